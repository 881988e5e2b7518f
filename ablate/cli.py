"""The ``ablate`` command line.

Each sub-command lives in its own module under :mod:`ablate.commands`, which defines::

    HELP = "one line for the command list"
    DESCRIPTION = "the paragraph shown by ``ablate CMD --help``"
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...

Command modules import heavy libraries (torch, mlflow) inside ``run`` so that ``--help`` is fast;
:func:`main` loads the built-in registries (:func:`ablate.registry.load_builtin_registries`) once
the command line is parsed, so that every command sees every built-in component.
User errors (:class:`ablate.errors.AblateError`) print one message to stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ablate import __version__
from ablate.errors import AblateError, say_warnings_in_one_line
from ablate.registry import load_builtin_registries

#: Sub-commands in the order ``ablate --help`` lists them: name → module under ablate.commands.
COMMANDS: dict[str, str] = {
    "tasks": "ablate.commands.tasks",
    "validate": "ablate.commands.validate",
    "show": "ablate.commands.show",
    "models": "ablate.commands.models",
    "warmstart": "ablate.commands.warmstart",
    "train": "ablate.commands.train",
    "run": "ablate.commands.run",
    "worker": "ablate.commands.worker",
    "status": "ablate.commands.status",
    "plan": "ablate.commands.plan",
    "report": "ablate.commands.report",
    "ledger": "ablate.commands.ledger",
}

#: Commands that read no registry but the tasks' own: they do not load the built-ins (nor torch).
TORCH_FREE_COMMANDS: frozenset[str] = frozenset({"tasks"})

EPILOG = """\
A study file names factors (the choices to compare), their levels, seeds and budgets; `ablate`
expands it into trials, trains each one, logs them to MLflow and writes a report with confidence
intervals. Run `ablate CMD --help` for the options of one command.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ablate",
        description="Controlled ablation studies of the choices inside RL fine-tuning of language models.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ablate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.command_line = argv  # the command line as given, recorded with a study's results (``ablate.command``)
    if args.command is None:
        parser.print_help()
        return 0
    say_warnings_in_one_line(f"ablate {args.command}")
    try:
        if args.command not in TORCH_FREE_COMMANDS:
            load_builtin_registries()  # the edge: every built-in component registered before a command runs
        return int(args._run(args) or 0)
    except AblateError as exc:
        print(f"ablate {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        from ablate.disk import disk_full_error, is_disk_full

        if not is_disk_full(exc):
            raise
        full = disk_full_error(exc)  # a write found no space (a report, a log): one line, not a traceback
        print(f"ablate {args.command}: error: {full}", file=sys.stderr)
        return full.exit_code
    except KeyboardInterrupt:
        print(f"ablate {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
