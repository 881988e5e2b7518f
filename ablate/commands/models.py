"""``ablate models``: list the model zoo with architectures and parameter counts."""

from __future__ import annotations

import argparse
import json
from typing import Any

HELP = "list the model zoo (architecture, parameter count, description)"
DESCRIPTION = """\
List the models a configuration can name under model.name: small models built from transformers
configs with the character tokenizer (randomly initialised, seeded), and pretrained entries.
Parameter counts of built models are counted on the meta device (nothing is allocated); pretrained
entries show their published count without loading. Any local Hugging Face checkpoint directory
works in place of a name too.

  ablate models
  ablate models --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def format_params(n: int) -> str:
    """A parameter count for people: ``804992`` → ``"0.80M"``, ``134515008`` → ``"134.5M"``."""
    if n >= 100_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e6:.2f}M"


def describe_models() -> list[dict[str, Any]]:
    """Every zoo entry as a JSON-able dict: name, architecture, params, pretrained, default, description."""
    from ablate.models.zoo import DEFAULT_MODEL, MODELS

    return [
        {
            "name": name,
            "architecture": entry.architecture,
            "params": entry.num_parameters(),
            "pretrained": entry.pretrained,
            "default": name == DEFAULT_MODEL,
            "description": entry.description,
        }
        for name, entry in MODELS.items()
    ]


def run(args: argparse.Namespace) -> int:
    models = describe_models()
    if args.json:
        print(json.dumps({"models": models}, indent=2))
        return 0
    rows = [
        (
            m["name"] + (" *" if m["default"] else ""),
            m["architecture"],
            format_params(m["params"]),
            ("pretrained; " if m["pretrained"] else "") + m["description"],
        )
        for m in models
    ]
    header = ("NAME", "ARCHITECTURE", "PARAMS", "DESCRIPTION")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for r in [header, *rows]:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}")
    print("\n* the default model. Any local Hugging Face checkpoint directory works in place of a name.")
    return 0
