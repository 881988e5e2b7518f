"""Measure the constants of ablate's timing model (ablate/study/timing.py) and write ablate/study/timing.json.

For each zoo model it runs real short trials (no warm start, so that every completion runs to its
full length, as the model assumes) at two batch sizes, and fits the decode and update costs from
their ``perf/*`` metrics; a third trial with a critic gives the critic factor. One CPU thread, as one
study worker uses on a 2-core machine with --workers 2. Run it on a quiet machine::

    python benchmarks/calibrate_timing.py                  # every zoo model that can be built here
    python benchmarks/calibrate_timing.py --models tiny-llama micro-llama --out /tmp/timing.json

Then compare: ``ablate show studies/quickstart.yaml`` against the time ``ablate run`` reports.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from ablate.config import TrialConfig  # noqa: E402
from ablate.study.timing import TIMING_FILE  # noqa: E402
from ablate.train import run_trial  # noqa: E402

LENGTH = 32  # max_new_tokens of the calibration trials
SMALL, LARGE = 8, 32  # completions per step of the two trials (4 prompts x 2, 4 prompts x 8)
STEPS = 4


def trial(model: str, group: int, cache: str, **extra) -> dict[str, float]:
    """Run one short trial; return its per-step medians and its setup time."""
    cfg = TrialConfig.from_overrides({
        "model.name": model, "task.name": "addition", "task.difficulty": 2, "warmstart.enabled": False,
        "warmstart.cache_dir": cache, "rollout.max_new_tokens": LENGTH, "rollout.prompts_per_step": 4,
        "rollout.group_size": group, "algo.minibatches": 1, "train.steps": STEPS, "train.checkpoint_every": 0,
        "eval.every": 0, "eval.n_problems": 4 * group, "threads": 1, "device": "cpu", **extra,
    })
    result = run_trial(cfg)
    steps = [m for s, m in result.history if s > 1]  # step 1 warms caches up
    med = {k: statistics.median(m[k] for m in steps) for k in ("perf/rollout_s", "perf/update_s", "perf/reward_s")}
    eval0 = result.history[0][1]["perf/eval_s"]
    med["setup"] = result.seconds - sum(m["perf/step_s"] for _, m in result.history if _ > 0) - eval0
    med["eval_s"] = eval0
    return med


def prompt_tokens(model: str) -> float:
    """Mean prompt length (tokens) of the calibration task for ``model``'s tokenizer."""
    from ablate.models import load_policy
    from ablate.tasks import TASKS

    policy = load_policy(model, seed=0, device="cpu")
    task = TASKS.get("addition")(difficulty=2, seed=0)
    problems = task.sample("train", 64, seed=0)
    return statistics.mean(len(policy.encode_prompt(p.prompt)) for p in problems)


def calibrate(model: str, cache: str) -> dict[str, float]:
    small = trial(model, SMALL // 4, cache)
    large = trial(model, LARGE // 4, cache)
    p = prompt_tokens(model)
    tokens = LENGTH + p
    decode_b = max(0.0, (large["perf/rollout_s"] - small["perf/rollout_s"]) / ((LARGE - SMALL) * LENGTH))
    decode_a = max(0.0, small["perf/rollout_s"] / LENGTH - SMALL * decode_b)
    update_b = max(0.0, (large["perf/update_s"] - small["perf/update_s"]) / ((LARGE - SMALL) * tokens))
    update_a = max(0.0, small["perf/update_s"] - SMALL * tokens * update_b)
    return {
        "decode_a": decode_a, "decode_b": decode_b, "update_a": update_a, "update_b": update_b,
        "reward_b": large["perf/reward_s"] / LARGE, "setup": max(0.0, statistics.median([small["setup"], large["setup"]])),
        "prompt_tokens": p, "critic_factor": 1.0,
        "_update_large_s": large["perf/update_s"],
    }


def main(argv: list[str] | None = None) -> int:
    from ablate.models import MODELS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="zoo models (default: all that can be built here)")
    parser.add_argument("--out", default=str(TIMING_FILE), help=f"output file (default: {TIMING_FILE})")
    parser.add_argument("--critic-model", default="tiny-llama", help="model whose critic factor is measured")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    names = args.models or list(MODELS.names())
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as cache:
        for name in names:
            t0 = time.perf_counter()
            try:
                out[name] = calibrate(name, cache)
            except Exception as exc:  # noqa: BLE001 - e.g. an optional extra that is not installed
                print(f"{name}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
                continue
            print(f"{name}: {json.dumps({k: round(v, 6) for k, v in out[name].items()})} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        if args.critic_model in out:
            with_critic = trial(args.critic_model, LARGE // 4, cache, **{"algo.advantage": "gae", "critic.enabled": True})
            factor = with_critic["perf/update_s"] / out[args.critic_model]["_update_large_s"]
            print(f"critic factor ({args.critic_model}): {factor:.2f}")
            for c in out.values():
                c["critic_factor"] = round(factor, 3)
    for c in out.values():
        c.pop("_update_large_s")
    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.processor() or 'cpu'}, torch {torch.__version__}",
        "date": dt.date.today().isoformat(),
        "how": "python benchmarks/calibrate_timing.py",
    }
    out = {name: {k: float(f"{v:.4g}") for k, v in c.items()} for name, c in out.items()}
    Path(args.out).write_text(json.dumps({"meta": meta, "models": out}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
