"""The trl engine against ablate's own trainer (issue 47): the map's equivalence table and a trial's cost.

1. **Equivalence.** For each mapped option set of ``tests/test_trl_engine.py`` (``OPTION_SETS``), one batch
   on the micro trial: TRL's own loss code (``GRPOTrainer._compute_loss`` of the trainer the engine builds)
   against ablate's (``rl.losses`` with the trial's options), on-policy and with moved old log-probs (ratios
   far from 1, so the clip ranges bind); the table gives the largest relative difference of the loss and
   of any gradient entry.
2. **Cost.** One trial of the quickstart's base (tiny-llama, 2-digit addition, warm start cached,
   ``--steps`` RL steps, evaluation only at the start and end) on each engine, alternated ``--reps`` times
   in one process on one torch thread; the table gives each engine's median seconds per RL step (the
   ``perf/step_s`` both engines log: rollout, rewards and update) and the ratio trl / ablate.

    python benchmarks/bench_engines.py --write       # both tables into benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import write_section  # noqa: E402

BEGIN, END = "<!-- bench_engines:begin -->", "<!-- bench_engines:end -->"


def load_checks():
    """tests/test_trl_engine.py as a module: its option sets and the two losses of one batch."""
    spec = importlib.util.spec_from_file_location("test_trl_engine", ROOT / "tests" / "test_trl_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| relative to the largest |a| (0 when both are 0)."""
    scale = float(a.abs().max())
    return float((a - b).abs().max()) / scale if scale else float((a - b).abs().max())


def equivalence_rows() -> list[str]:
    checks = load_checks()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, options in enumerate(checks.OPTION_SETS):
            c = checks.micro_config(**options)
            from ablate.engines.trl_map import grpo_arguments

            loss_type = grpo_arguments(c)["loss_type"]
            cells = []
            for moved in (False, True):
                ours, og, theirs, tg = checks.both_losses(c, Path(tmp) / f"{i}{moved}", moved=moved)
                cells.append(f"{rel(ours, theirs):.1e} / {max(rel(a, b) for a, b in zip(og, tg, strict=True)):.1e}")
            opts = ", ".join(f"{k}={v}" for k, v in options.items())
            rows.append(f"| {opts} | {loss_type} | {cells[0]} | {cells[1]} |")
    return rows


def cost(steps: int, reps: int) -> dict[str, list[float]]:
    """Median seconds per RL step of each engine's trial, ``reps`` alternated runs each."""
    from ablate.config import TrialConfig
    from ablate.engines.base import EngineJob, engine_for

    base = {"task.difficulty": 2, "model.name": "tiny-llama", "rollout.max_new_tokens": 32,
            "rollout.prompts_per_step": 4, "rollout.group_size": 8, "eval.every": 0, "eval.n_problems": 100,
            "train.steps": steps, "threads": 1, "device": "cpu"}
    out: dict[str, list[float]] = {"ablate": [], "trl": []}
    for _ in range(reps):
        for name in out:
            c = TrialConfig.from_overrides({**base, "engine.name": name})
            result = engine_for(c).train(EngineJob(c, lambda m, s: None))
            step_s = [m["perf/step_s"] - m.get("perf/eval_s", 0.0) for s, m in result.history if s > 1]
            out[name].append(statistics.median(step_s))
    return out


def markdown(rows: list[str], times: dict[str, list[float]], steps: int) -> str:
    import transformers
    import trl

    a, t = statistics.median(times["ablate"]), statistics.median(times["trl"])
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return "\n".join([
        "## The trl engine against ablate's trainer (benchmarks/bench_engines.py)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {cpu}, one torch thread; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, TRL {trl.__version__}.",
        "",
        "**The map, one batch.** TRL's `GRPOTrainer._compute_loss` (the trainer the engine builds) against "
        "ablate's loss with the trial's options, on the same 8 completions (micro trial: random-init "
        "tiny-llama, 2 prompts x 4 completions, lengths 1-8, advantages drawn at random): largest relative "
        "difference of the loss / of any gradient entry (float32). tests/test_trl_engine.py asserts each "
        "within rtol 1e-5 (loss) and 1e-4 (gradient).",
        "",
        "| option set | TRL loss_type | on-policy | old log-probs moved (ratios far from 1) |",
        "|---|---|---|---|",
        *rows,
        "",
        "Where the definitions differ, the map refuses or says so: TRL adds 1e-4 to the group std, ablate 1e-6 "
        "(advantages differ by < 1e-3 relative for stds >= 0.25; tests/rl/test_advantages.py); TRL's loss "
        "forward passes no position ids while generation derives them from the attention mask, so the engine "
        "hooks the model's forward to pass the mask's (`engine.positions: mask`, issue 55; tests/test_trl_engine.py "
        "checks tiny-gpt2 on countdown): every 2-digit addition prompt is 7 tokens long (2,000 of 2,000 train "
        "prompts), as is the table's batch, so nothing here is padded; `token-mean` maps to "
        "`bnpo`, whose normalizer is the micro-batch's tokens: equal to ablate's minibatch tokens with one "
        "process and no gradient accumulation (the engine sets both); TRL's entropy bonus is a token mean, so "
        "`loss.entropy_coef` is refused with other aggregations; `optim.warmup_steps` is refused (TRL's "
        "warmup is s/warmup, ablate's (s+1)/warmup).",
        "",
        f"**Cost.** One trial of the quickstart's base ({steps} RL steps, 32 completions of at most 32 tokens "
        f"per step, warm start cached) on each engine, alternated {len(times['ablate'])} times: median seconds "
        "per RL step (rollout, rewards and update; evaluations excluded).",
        "",
        "| engine | seconds per RL step (median of runs' medians) | runs |",
        "|---|---|---|",
        f"| ablate | {a:.3f} | {', '.join(f'{x:.3f}' for x in times['ablate'])} |",
        f"| trl (GRPOTrainer) | {t:.3f} | {', '.join(f'{x:.3f}' for x in times['trl'])} |",
        "",
        f"trl / ablate = {t / a:.2f}x per RL step (n = {len(times['ablate'])} runs each, {steps - 1} steps each).",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="write the tables into benchmarks/RESULTS.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = equivalence_rows()
    times = cost(args.steps, args.reps)
    body = markdown(rows, times, args.steps)
    print(body)
    if args.write:
        write_section(Path(__file__).resolve().parent / "RESULTS.md", body, BEGIN, END)


if __name__ == "__main__":
    main()
