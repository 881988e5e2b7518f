"""``ablate tasks``: list the tasks, each with an example problem and its reference solution."""

from __future__ import annotations

import argparse
import json
from typing import Any

HELP = "list the tasks with an example problem and its reference solution"
DESCRIPTION = """\
List the registered tasks: what each one asks, its difficulty knob, its options and an example
problem (prompt, reference completion, answer) from its train split. A task that needs an option
shows its example with the task's example options when none are given (reasoning_gym: the
basic_arithmetic generator), or says which option it needs (jsonl: path).

Name tasks to show only those; options (--option KEY=VALUE, values read as JSON when they parse,
else as strings) then apply to each named task, e.g.

  ablate tasks jsonl --option path=data/apples.jsonl
  ablate tasks addition --difficulty 5 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Task names, --difficulty, --seed, --option KEY=VALUE (repeatable), --json."""
    parser.add_argument("names", nargs="*", metavar="TASK", help="tasks to show (default: all)")
    parser.add_argument("--difficulty", type=int, default=None, help="difficulty knob (default: each task's)")
    parser.add_argument("--seed", type=int, default=0, help="task seed (default 0)")
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="a task option (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` → ``{k: v}``, each value read as JSON when it parses, else kept as a string."""
    from ablate.errors import AblateError

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AblateError(f"--option {item!r}: expected KEY=VALUE, e.g. --option eval_fraction=0.2")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def describe(name: str, difficulty: int | None, seed: int, options: dict[str, Any], strict: bool) -> dict[str, Any]:
    """One task as a JSON-able dict: name, description, difficulty, options and an example.

    With ``strict`` an error building the task or its example propagates; otherwise it becomes the
    ``note`` of an entry without example (e.g. ``jsonl`` without its ``path`` option). Without
    ``options``, a task class's ``EXAMPLE_OPTIONS`` (if any) build the example; the entry then names
    them (``example_options``).
    """
    from ablate.errors import AblateError
    from ablate.tasks import TASKS

    cls = TASKS.get(name)
    entry: dict[str, Any] = {
        "name": name,
        "description": getattr(cls, "description", "") or "",
        "difficulty": getattr(cls, "DIFFICULTY", "") or "",
        "options": dict(getattr(cls, "OPTIONS", {}) or {}),
        "example": None,
    }
    if not options and getattr(cls, "EXAMPLE_OPTIONS", None):
        options = dict(cls.EXAMPLE_OPTIONS)
        entry["example_options"] = options
    try:
        task = cls(difficulty=difficulty, seed=seed, **options)
        p = task.example() if hasattr(task, "example") else task.sample("train", 1, seed=0)[0]
        g = task.grade(p, p.solution)
    except AblateError as exc:
        if strict:
            raise
        entry["note"] = str(exc)
        return entry
    entry["example"] = {
        "prompt": p.prompt,
        "solution": p.solution,
        "answer": p.answer,
        "steps": g.num_reference_steps,
        "solution_tokens": solution_tokens(p.solution),
    }
    return entry


def solution_tokens(text: str) -> int:
    """Length of ``text`` for a character-level tokenizer that reads each format tag as one token."""
    from ablate.tasks.format import FORMAT_TAGS

    return len(text) - sum(text.count(t) * (len(t) - 1) for t in FORMAT_TAGS)


def _indent(text: str, prefix: str) -> str:
    return text.replace("\n", "\n" + prefix)


def run(args: argparse.Namespace) -> int:
    """Print the tasks (text or ``{"tasks": [...]}`` JSON); unknown names and bad options exit 2."""
    from ablate.errors import AblateError
    from ablate.tasks import TASKS

    options = parse_options(args.option)
    if options and not args.names:
        raise AblateError("--option needs task names: e.g. ablate tasks jsonl --option path=FILE")
    names = args.names or TASKS.names()
    for name in names:
        TASKS.get(name)  # unknown names fail before anything is printed
    entries = [describe(n, args.difficulty, args.seed, options, strict=bool(args.names)) for n in names]
    if args.json:
        print(json.dumps({"tasks": entries}, indent=2))
        return 0
    for e in entries:
        print(f"{e['name']}: {e['description']}")
        if e["difficulty"]:
            print(f"  difficulty: {e['difficulty']}")
        for key, doc in e["options"].items():
            print(f"  option {key}: {doc}")
        ex = e["example"]
        if ex is None:
            print(f"  example: (none: {e.get('note', '')})")
        else:
            if e.get("example_options"):
                shown = ", ".join(f"{k}={v}" for k, v in e["example_options"].items())
                print(f"  example with option {shown}:")
            print(f"  prompt:   {_indent(ex['prompt'], '            ')}")
            print(f"  solution: {_indent(ex['solution'], '            ')}")
            print(f"  answer:   {ex['answer']}")
        print()
    return 0
