"""Write ``docs/config.md``, the reference of every :class:`~ablate.config.TrialConfig` field.

The page is generated from the field descriptions in :mod:`ablate.config`, so it cannot drift from
the code; ``tests/test_config.py`` fails when the file on disk differs from :func:`render_markdown`.
Regenerate it after changing a field::

    .venv/bin/python -m ablate.config.docs            # writes docs/config.md
    .venv/bin/python -m ablate.config.docs --check    # exit 1 if docs/config.md is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel

from ablate.config import KEY_EXCLUDED_PATHS, RULES, TrialConfig
from ablate.config.paths import default_of, describe_type, is_section
from ablate.registry import engine_registry

#: Where the reference lives, relative to the repository root.
DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "config.md"

_INTRO = """\
# Trial configuration reference

<!-- Generated from ablate/config/ (the sections and rules) by `python -m ablate.config.docs`; do not edit by hand. -->

A trial is one `TrialConfig` plus its seed. Every field below is set by its dotted path, from
a study's `base:`, a factor level, a budget, `ablate train --set path=value`, or a YAML file with
nested or dotted keys:

```yaml
loss: {aggregation: token-mean, clip_high: 0.28}
reward.components: [final_answer, prm]
seed: 3
```

Values given as `path=value` strings are read as YAML (`reward.components=[final_answer, prm]`,
`optim.lr=3e-4`, `loss.dual_clip=null`). Files and strings are read in one dialect, the same as study
files (`ablate/yamlio.py`): only `true` and `false` are booleans (`on`, `off`, `yes`, `no` are
strings) and `1e-4` is a float; a key given twice in a file is an error. Every problem (an unknown path, with the nearest valid one;
a value outside the allowed ones; an unknown registered name; an impossible combination) is reported
at once, in one error.

The **trial key** (`TrialConfig.trial_key()`) is 12 hex digits of SHA-256 over the canonical JSON of
every field except those that do not change what a trial computes: EXCLUDED.
"""


def cell(text: str) -> str:
    """``text`` as one cell of a markdown table (its pipes escaped, on one line)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _section_table(cls: type[BaseModel], prefix: str, out: list[str]) -> None:
    doc = (cls.__doc__ or "").strip().splitlines()[0].replace("``", "`")
    out.append(f"## `{prefix.rstrip('.')}`\n")
    out.append(f"{doc}\n")
    out.append("| key | allowed values | default | description |")
    out.append("|---|---|---|---|")
    nested: list[tuple[type[BaseModel], str]] = []
    for name, fi in cls.model_fields.items():
        if is_section(fi.annotation):
            out.append(f"| `{prefix}{name}` | section | see below | {cell(fi.description or '')} |")
            nested.append((fi.annotation, f"{prefix}{name}."))
            continue
        default = json.dumps(default_of(fi))
        out.append(
            f"| `{prefix}{name}` | {cell(describe_type(fi))} | `{default}` | {cell(fi.description or '')} |"
        )
    out.append("")
    for sub, sub_prefix in nested:
        _section_table(sub, sub_prefix, out)


def _engine_maps(out: list[str]) -> None:
    """Each trial engine's own section (its map of the options), as the engine renders it: the engines the
    seam registers (:func:`ablate.registry.engine_registry`), for those with a ``config_docs`` method."""
    engines = engine_registry()
    for name in engines.names():
        section = getattr(engines.get(name), "config_docs", None)
        if callable(section):
            out.extend(section())


def render_markdown() -> str:
    """The whole ``docs/config.md`` page, from the schema's descriptions."""
    excluded = ", ".join(f"`{p}`" for p in sorted(KEY_EXCLUDED_PATHS))
    out = [_INTRO.replace("EXCLUDED", excluded)]
    top = [(n, fi) for n, fi in TrialConfig.model_fields.items() if not is_section(fi.annotation)]
    out.append("## Top level\n")
    out.append("| key | allowed values | default | description |")
    out.append("|---|---|---|---|")
    for name, fi in top:
        default = json.dumps(default_of(fi))
        out.append(f"| `{name}` | {cell(describe_type(fi))} | `{default}` | {cell(fi.description or '')} |")
    out.append("")
    for name, fi in TrialConfig.model_fields.items():
        if is_section(fi.annotation):
            _section_table(fi.annotation, name + ".", out)
    _engine_maps(out)
    out.append("## Cross-field rules\n")
    out.append("Checked whenever a configuration is built; an error says how to fix it, a warning why.\n")
    out.extend(f"- {rule}" for rule in RULES)
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``docs/config.md``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m ablate.config.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the schema")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help=f"file to write (default {DOC_PATH})")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m ablate.config.docs", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
