"""``ablate train``: run one trial (warm start, RL, evaluation) and print its final metrics."""

from __future__ import annotations

import argparse
import json
import math
import sys

HELP = "run one trial with a progress bar and print its final metrics"
DESCRIPTION = """\
Run one trial: the default configuration, changed by a YAML file (--config, nested or dotted keys)
and by dotted overrides (--set path=value, applied after the file). Every path is documented in
docs/config.md. Examples:

  ablate train --set train.steps=20
  ablate train --set loss.aggregation=token-mean --set loss.ratio_level=sequence \\
               --set loss.clip_low=3e-4 --set loss.clip_high=4e-4
  ablate train --config my_trial.yaml --json

With --workdir the trial checkpoints there every train.checkpoint_every steps, and running the same
command again resumes from the last checkpoint.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML file of config values (nested or dotted keys)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
        help="dotted override, e.g. loss.aggregation=token-mean (repeatable; values are read as YAML)",
    )
    parser.add_argument("--workdir", metavar="DIR", help="checkpoint folder; an existing checkpoint is resumed")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ablate.commands.run import prepare_environment

    prepare_environment()  # before torch and transformers load: no weights-loading bar, passive OpenMP waits
    from ablate.config import TrialConfig
    from ablate.errors import AblateError

    for item in args.overrides:
        if "=" not in item:
            raise AblateError(f"--set {item!r}: expected PATH=VALUE, e.g. --set train.steps=20")
    if args.config:
        config = TrialConfig.from_file(args.config, overrides=args.overrides)
    else:
        config = TrialConfig.from_overrides(args.overrides)

    from ablate.train import NonFiniteError, run_trial

    try:
        if config.engine.name == "ablate":
            result = run_trial(config, workdir=args.workdir, progress=not args.no_progress and not args.json)
        else:  # another trainer behind the engine seam (engine.name: trl)
            from pathlib import Path

            from ablate.engines.base import EngineJob, engine_for

            job = EngineJob(config, lambda metrics, step: None, Path(args.workdir) if args.workdir else None)
            result = engine_for(config).train(job)
    except NonFiniteError as exc:  # the configuration diverged at once: say where, not a traceback
        if args.json:
            json.dump({"key": config.trial_key(), "error": str(exc)}, sys.stdout, indent=2)
            print()
        print(f"ablate train: the trial diverged: {exc}; lower optim.lr or check the overrides", file=sys.stderr)
        return 1
    final = {k: v for k, v in sorted(result.final.items()) if not k.startswith("perf/")}
    if args.json:
        payload = {
            "key": result.key,
            "steps": result.steps,
            "seconds": round(result.seconds, 3),
            "resumed_from": result.resumed_from,
            "warmstart": {k: v for k, v in result.warmstart.items() if k != "history"},
            "final": {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in final.items()},
        }
        json.dump(payload, sys.stdout, indent=2)
        print()
        return 0
    print(f"trial {result.key}: {result.steps} steps in {result.seconds:.1f} s")
    width = max(len(k) for k in final)
    for k, v in final.items():
        print(f"  {k:<{width}}  {v:.4g}")
    return 0
