"""``ablate warmstart``: build (or reuse) the cached SFT warm start of a zoo model on a task."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "build or reuse the SFT warm start of a zoo model on a task, and print its accuracy"
DESCRIPTION = """\
Train a zoo model on a task's reference solutions until its greedy eval accuracy reaches
--target-min (imperfect on purpose, so that RL has headroom), cache it on disk, and print its eval
accuracy, step accuracy and format rate. A second call with the same settings reuses the cache.
The cache lives in $ABLATE_CACHE or ~/.cache/ablate unless --cache-dir is given.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ablate.train.warmstart import WarmStartSpec

    d = WarmStartSpec()
    parser.add_argument("--task", default=d.task, help=f"task name (default {d.task}; see `ablate tasks`)")
    parser.add_argument("--model", default=d.model, help=f"zoo model name (default {d.model}; see `ablate models`)")
    parser.add_argument("--difficulty", type=int, default=None, help="the task's difficulty knob (default: the task's)")
    parser.add_argument("--seed", type=int, default=d.seed, help=f"seed (default {d.seed})")
    parser.add_argument("--target-min", type=float, default=d.target_min, help=f"stop at this eval accuracy (default {d.target_min})")
    parser.add_argument("--target-max", type=float, default=d.target_max, help=f"upper end of the accepted band (default {d.target_max})")
    parser.add_argument("--max-steps", type=int, default=d.max_steps, help=f"most SFT steps (default {d.max_steps})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help=f"SFT batch size (default {d.batch_size})")
    parser.add_argument("--lr", type=float, default=d.lr, help=f"AdamW learning rate (default {d.lr})")
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="generation limit of the evaluations")
    parser.add_argument("--eval-problems", type=int, default=d.eval_problems, help=f"eval problems per evaluation (default {d.eval_problems})")
    parser.add_argument("--cache-dir", default=None, help="cache root (default $ABLATE_CACHE or ~/.cache/ablate)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from ablate.commands.run import prepare_environment

    prepare_environment()  # before torch and transformers load: no weights-loading bar, passive OpenMP waits
    from ablate.models import MODELS
    from ablate.tasks import TASKS
    from ablate.train.warmstart import WarmStartSpec, warm_start

    TASKS.get(args.task)  # unknown names: one clear error listing the valid ones
    if MODELS.get(args.model).pretrained:
        from ablate.errors import AblateError

        raise AblateError(f"--model {args.model}: a pretrained model needs no warm start; choose a zoo model")
    spec = WarmStartSpec(
        task=args.task, model=args.model, difficulty=args.difficulty, seed=args.seed,
        target_min=args.target_min, target_max=args.target_max, max_steps=args.max_steps,
        batch_size=args.batch_size, lr=args.lr, max_new_tokens=args.max_new_tokens,
        eval_problems=args.eval_problems,
    )
    _, report = warm_start(spec, cache_dir=args.cache_dir, progress=not args.json)
    if args.json:
        json.dump({k: v for k, v in report.to_dict().items() if k != "history"}, sys.stdout, indent=2)
        print()
        return 0
    state = "cached" if report.cached else f"built in {report.seconds:.0f} s"
    band = "inside" if report.reached_target else "OUTSIDE"
    print(f"warm start {spec.model} on {spec.task} ({state}, {report.steps} SFT steps): {report.path}")
    print(f"  eval accuracy {report.eval_accuracy:.3f} ({band} [{spec.target_min}, {spec.target_max}])")
    print(f"  step accuracy {report.step_accuracy:.3f}")
    print(f"  format rate   {report.format_rate:.3f}")
    return 0
