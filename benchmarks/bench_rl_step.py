"""RL step time: ablate's ``train_step`` against TRL's ``GRPOTrainer``, same model, prompts and shapes.

Run from the repository root (TRL comes from the optional ``bench`` extra)::

    .venv/bin/python benchmarks/bench_rl_step.py                    # 2 warm-up + 8 timed steps each
    .venv/bin/python benchmarks/bench_rl_step.py --steps 12 --threads 2
    .venv/bin/python benchmarks/bench_rl_step.py --write benchmarks/RESULTS.md
    .venv/bin/python benchmarks/bench_rl_step.py --no-trl --profile 3   # cProfile of ablate's step

The work of one step, identical on both sides:

- model: the zoo's ``tiny-llama`` built by ``load_policy(name, seed=0)`` twice (one copy each, the
  same random initialisation: no warm start, so both train the same weights) with its character
  tokenizer; prompts are ``<bos>`` + the prompt's characters on both sides (TRL tokenizes a plain
  text prompt with ``add_special_tokens=True``; the script checks that the ids are equal);
- data: the default task's (``addition``) train pool; 8 prompts x G = 8 = 64 completions per step,
  at most 32 new tokens, temperature 1, top-p 1, no top-k; a row stops at its EOS;
- reward: final-answer correctness, ``task.grade(problem, completion).answer_correct`` (TRL: a reward
  function that looks the problem up by a dataset column and calls the same ``grade``);
- update: GRPO advantages (group mean and std), token-level PPO-clip surrogate with eps 0.2, loss
  per sequence then over sequences (ablate ``seq-mean-token-mean`` = TRL ``loss_type="grpo"``),
  no KL and no reference model (beta 0), one optimizer step on the whole batch (ablate
  ``algo.ppo_epochs=1, algo.minibatches=1``; TRL ``per_device_train_batch_size=64,
  num_generations=8, gradient_accumulation_steps=1, num_iterations=1``, so ``steps_per_generation``
  = 1 and one generation batch of 64 per optimizer step), AdamW with the same lr, betas, eps and no
  weight decay, a constant schedule, gradient norm clipped at 1.0, float32, CPU, no gradient
  checkpointing (TRL turns it on by default; it recomputes the forward in the backward).

Timing. Both trainers live in one process and alternate step by step: TRL's own training loop runs,
and a ``TrainerCallback`` runs one ablate step at every ``on_step_end``. A TRL step is the wall time
of one iteration of its loop (from the end of the previous ablate step to its ``on_step_end``: batch
fetch, generation, reward, loss, backward, optimizer step and its logging all included); an ablate
step is the wall time of ``train_step`` (rollout with the behaviour log-prob forward, grading,
advantages, update and metrics; no evaluation). TRL's rollout part is the time spent in
``_generate_and_score_completions``. The first ``--warmup`` steps of each are dropped, the rest are
reported as medians. Both run with the same ``torch.set_num_threads``. Without TRL installed (or with
``--no-trl``) only ablate's side runs.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime
import io
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ablate.config import TrialConfig  # noqa: E402
from ablate.train import TrialState, setup_trial, train_step  # noqa: E402

BEGIN = "<!-- BEGIN rl-step-vs-trl (written by benchmarks/bench_rl_step.py) -->"
END = "<!-- END rl-step-vs-trl -->"


@dataclass(frozen=True)
class Settings:
    """The shape of the benchmark (defaults: the issue's 64 completions of at most 32 tokens)."""

    model: str = "tiny-llama"
    task: str = "addition"
    prompts: int = 8
    group_size: int = 8
    max_new_tokens: int = 32
    lr: float = 1e-4
    steps: int = 8
    warmup: int = 2
    threads: int = 1
    seed: int = 0
    train_size: int = 10000
    device: str = "cpu"
    dtype: str = "float32"  # both sides: float32, or bfloat16 autocast over float32 weights
    cuda_graph: bool = False  # ablate's rollout.cuda_graph
    optim: str = "auto"  # ablate's optim.implementation (TRL's default is torch's fused AdamW)


@dataclass
class StepTimes:
    """Per-step wall seconds of one side, with its parts and the tokens it generated."""

    step_s: list[float] = field(default_factory=list)
    rollout_s: list[float] = field(default_factory=list)
    update_s: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)  # ablate only: prefill + decode loop
    logprob_s: list[float] = field(default_factory=list)  # ablate only: the behaviour log-prob forward
    rows: list[int] = field(default_factory=list)  # ablate only: the update's batch rows ...
    width: list[int] = field(default_factory=list)  # ... and its positions per row (prompt + completion, padded)

    def median(self, name: str, warmup: int) -> float:
        """Median of ``name`` over the steps after the first ``warmup`` (NaN when there are none)."""
        values = getattr(self, name)[warmup:]
        return statistics.median(values) if values else float("nan")


# ---------------------------------------------------------------------------------------------------
# ablate
# ---------------------------------------------------------------------------------------------------
def ablate_config(s: Settings) -> TrialConfig:
    """The ablate trial of the benchmark: no warm start, no KL, one optimizer step per batch, CPU."""
    return TrialConfig.from_overrides({
        "model.name": s.model,
        "task.name": s.task,
        "task.train_size": s.train_size,
        "warmstart.enabled": False,
        "rollout.group_size": s.group_size,
        "rollout.prompts_per_step": s.prompts,
        "rollout.max_new_tokens": s.max_new_tokens,
        "rollout.temperature": 1.0,
        "rollout.top_p": 1.0,
        "reward.components": ["final_answer"],
        "algo.advantage": "grpo",
        "algo.ppo_epochs": 1,
        "algo.minibatches": 1,
        "algo.grad_accum": 1,
        "loss.aggregation": "seq-mean-token-mean",
        "loss.ratio_level": "token",
        "loss.clip_low": 0.2,
        "loss.clip_high": 0.2,
        "kl.placement": "none",
        "optim.lr": s.lr,
        "optim.weight_decay": 0.0,
        "optim.max_grad_norm": 1.0,
        "optim.warmup_steps": 0,
        "device": s.device,
        "model.dtype": s.dtype,
        "rollout.cuda_graph": s.cuda_graph,
        "optim.implementation": s.optim,
        "threads": s.threads,
        "seed": s.seed,
    })


def ablate_step(state: TrialState, step: int, times: StepTimes) -> None:
    """Run ablate RL step ``step`` (1-based) and append its wall time and parts to ``times``."""
    t0 = time.perf_counter()
    metrics, batch = train_step(state, step)
    times.step_s.append(time.perf_counter() - t0)
    times.rollout_s.append(metrics["perf/rollout_s"] + metrics["perf/reward_s"])
    times.update_s.append(metrics["perf/update_s"])
    times.tokens.append(float(batch.mask.sum()))
    times.sample_s.append(batch.timing.generate_s)
    times.logprob_s.append(batch.timing.logprob_s)
    times.rows.append(int(batch.completion_ids.shape[0]))
    times.width.append(int(batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]))


def update_flop(model: torch.nn.Module, rows: int, width: int) -> float:
    """Model FLOPs of one update over ``rows`` sequences of ``width`` positions: forward and backward,
    ``rows * width * (6 N + 12 layers * hidden * width)`` with N the weights of the model's linear layers
    (the LM head included, the embedding lookup not): PaLM's count (Chowdhery et al. 2022, appendix B),
    its attention term over the full (padded) width."""
    n = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cfg = model.config
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 0)
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 0)
    return float(rows * width * (6 * n + 12 * layers * hidden * width))


def matmul_peak(device: str, dtype: str, n: int | None = None, reps: int = 20) -> float:
    """FLOP/s of a square ``n x n`` matrix multiply in ``dtype`` on ``device`` (median of ``reps``): the
    peak the update's MFU is measured against (n = 8192 on CUDA, 1024 elsewhere)."""
    dev = torch.device(device)
    n = n or (8192 if dev.type == "cuda" else 1024)
    a = torch.randn(n, n, device=dev, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=dev, dtype=getattr(torch, dtype))
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for i in range(reps + 3):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return 2.0 * n**3 / statistics.median(times)


# ---------------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------------
def trl_version() -> str | None:
    """The installed TRL version, or None when TRL or ``datasets`` (its prompts' container here) cannot be
    imported (``pip install -e '.[bench]'`` installs both)."""
    try:
        import datasets  # noqa: F401
        import trl
    except ImportError:
        return None
    return str(trl.__version__)


def build_trl(s: Settings, state: TrialState, out_dir: str, callbacks: list[Any], trl_times: StepTimes) -> Any:
    """A ``GRPOTrainer`` on a fresh copy of the same model, the same train pool and the same grader.

    ``_generate_and_score_completions`` is timed into ``trl_times.rollout_s`` (generation, decoding,
    rewards and advantages) and the tokens it generated into ``trl_times.tokens``.
    """
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from ablate.models import load_policy

    policy = load_policy(s.model, seed=s.seed, device=s.device)
    pool, task = state.train_pool, state.task
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in pool], "problem_idx": list(range(len(pool)))})

    def final_answer(prompts: list[str], completions: list[str], problem_idx: list[int], **_: Any) -> list[float]:
        return [float(task.grade(pool[i], c).answer_correct) for i, c in zip(problem_idx, completions)]

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):  # type: ignore[override]
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            trl_times.rollout_s.append(time.perf_counter() - t0)
            trl_times.tokens.append(float(out["completion_mask"].sum()))
            return out

    # TRL turns activation (gradient) checkpointing on by default: an extra forward inside the backward,
    # which ablate does not do. transformers 5 renamed the option; the old name warns.
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    no_checkpointing = {"activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": False}
    args = GRPOConfig(
        output_dir=out_dir,
        **no_checkpointing,
        use_cpu=s.device == "cpu",
        bf16=s.dtype == "bfloat16",
        fp16=False,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        seed=s.seed,
        max_steps=s.steps + s.warmup,
        per_device_train_batch_size=s.prompts * s.group_size,
        gradient_accumulation_steps=1,
        num_generations=s.group_size,
        num_iterations=1,
        max_completion_length=s.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=s.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        dataloader_num_workers=0,
        log_completions=False,
    )
    if args.gradient_checkpointing or getattr(args, "activation_checkpointing", False):
        raise RuntimeError("could not turn TRL's activation checkpointing off: the comparison would not be fair")
    return TimedGRPOTrainer(
        model=policy.model,
        reward_funcs=final_answer,
        args=args,
        train_dataset=dataset,
        processing_class=policy.tokenizer,
        callbacks=callbacks,
    )


def same_prompt_ids(trl_trainer: Any, state: TrialState, n: int = 8) -> bool:
    """Whether TRL tokenizes the first ``n`` train prompts to the ids ablate's policy feeds the model."""
    prompts = [p.prompt for p in state.train_pool[:n]]
    trl_ids, _, _ = trl_trainer._tokenize_prompts(prompts)
    return [list(map(int, ids)) for ids in trl_ids] == [state.policy.encode_prompt(p) for p in prompts]


def same_init(trl_trainer: Any, state: TrialState) -> bool:
    """Whether both trainers start from bit-identical weights."""
    a, b = state.model.state_dict(), trl_trainer.model.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------
def run(s: Settings, *, use_trl: bool = True) -> dict[str, Any]:
    """Time ``s.warmup + s.steps`` steps of ablate (and of TRL, alternating, when available).

    Returns:
        A JSON-able dict: settings, versions, load averages, per-step times of each side, the medians
        and the ratio (TRL median step / ablate median step; None without TRL).
    """
    previous_threads = torch.get_num_threads()
    try:
        return _run(s, use_trl=use_trl)
    finally:  # the benchmark may run inside another process (the tests): leave its thread count alone
        torch.set_num_threads(previous_threads)


def _run(s: Settings, *, use_trl: bool) -> dict[str, Any]:
    torch.set_num_threads(s.threads)
    load_before = os.getloadavg()
    ablate_state = setup_trial(ablate_config(s))
    ours = StepTimes()
    theirs = StepTimes()
    version = trl_version() if use_trl else None
    checks: dict[str, bool] = {}
    total = s.warmup + s.steps
    if version is None:
        for step in range(1, total + 1):
            ablate_step(ablate_state, step, ours)
    else:
        from transformers import TrainerCallback

        class Alternate(TrainerCallback):
            """After every TRL step, time TRL's whole loop iteration, then run one ablate step."""

            def __init__(self) -> None:
                self.mark = 0.0

            def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
                self.mark = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
                theirs.step_s.append(time.perf_counter() - self.mark)
                ablate_step(ablate_state, len(ours.step_s) + 1, ours)
                self.mark = time.perf_counter()

        with tempfile.TemporaryDirectory(prefix="bench-rl-step-") as out_dir:
            trl_trainer = build_trl(s, ablate_state, out_dir, [Alternate()], theirs)
            torch.set_num_threads(s.threads)  # in case TRL or accelerate changed it
            checks = {"same_prompt_ids": same_prompt_ids(trl_trainer, ablate_state), "same_init": same_init(trl_trainer, ablate_state)}
            trl_trainer.train()
        theirs.update_s = [a - b for a, b in zip(theirs.step_s, theirs.rollout_s)]
    load_after = os.getloadavg()

    import transformers

    w = s.warmup
    summary = {
        "ablate_step_s": ours.median("step_s", w),
        "ablate_rollout_s": ours.median("rollout_s", w),
        "ablate_update_s": ours.median("update_s", w),
        "ablate_tokens": ours.median("tokens", w),
        "ablate_sample_s": ours.median("sample_s", w),
        "ablate_logprob_s": ours.median("logprob_s", w),
        "trl_step_s": theirs.median("step_s", w) if version else None,
        "trl_rollout_s": theirs.median("rollout_s", w) if version else None,
        "trl_update_s": theirs.median("update_s", w) if version else None,
        "trl_tokens": theirs.median("tokens", w) if version else None,
    }
    summary["ratio"] = summary["trl_step_s"] / summary["ablate_step_s"] if version else None
    flop = [update_flop(ablate_state.model, r, wd) for r, wd in zip(ours.rows, ours.width)][w:]
    rates = [f / u for f, u in zip(flop, ours.update_s[w:]) if u > 0]
    summary["update_flop"] = statistics.median(flop) if flop else None
    summary["update_flops"] = statistics.median(rates) if rates else None
    summary["matmul_peak_flops"] = matmul_peak(s.device, s.dtype)
    summary["mfu"] = (summary["update_flops"] / summary["matmul_peak_flops"]) if rates else None
    return {
        "settings": asdict(s),
        "date": datetime.date.today().isoformat(),
        "machine": (f"{torch.cuda.get_device_name(0)}, " if s.device.startswith("cuda") else "")
        + f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.python_implementation()} {platform.python_version()}",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": version},
        "threads": torch.get_num_threads(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in load_after],
        "checks": checks,
        "ablate": asdict(ours),
        "trl": asdict(theirs) if version else None,
        "summary": summary,
    }


#: torch operators by kind, for :func:`profile_ablate`'s shares of ablate's step time.
GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"})


def _op_kind(name: str) -> str:
    if name in GEMM_OPS:
        return "matrix multiplies"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention kernels"
    if name.startswith("aten::"):
        return "other tensor ops"
    return "other"


def profile_ablate(s: Settings, steps: int, top: int = 25) -> dict[str, Any]:
    """Where ablate's step time goes: ``steps`` profiled steps after one warm-up step.

    Returns:
        ``{"op_shares": {kind: fraction of self CPU time of torch operators}, "cprofile": text}``: the
        shares come from ``torch.profiler`` (matrix multiplies, attention kernels, other tensor ops;
        Python time outside operators is not in them), the text is a ``cProfile`` of ``steps`` more
        steps, the ``top`` functions by cumulative time.
    """
    from torch.profiler import ProfilerActivity, profile

    previous_threads = torch.get_num_threads()
    try:
        state = setup_trial(ablate_config(s))  # sets torch's thread count to s.threads
        ablate_step(state, 1, StepTimes())
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for step in range(2, steps + 2):
                train_step(state, step)
        totals: dict[str, float] = {}
        for event in prof.key_averages():
            kind = _op_kind(event.key)
            totals[kind] = totals.get(kind, 0.0) + event.self_cpu_time_total
        ops_total = sum(v for k, v in totals.items() if k != "other") or 1.0
        shares = {k: v / ops_total for k, v in sorted(totals.items(), key=lambda kv: -kv[1]) if k != "other"}
        cprof = cProfile.Profile()
        cprof.enable()
        for step in range(steps + 2, 2 * steps + 2):
            train_step(state, step)
        cprof.disable()
        buf = io.StringIO()
        pstats.Stats(cprof, stream=buf).sort_stats("cumulative").print_stats(top)
        return {"op_shares": shares, "cprofile": buf.getvalue()}
    finally:
        torch.set_num_threads(previous_threads)


def gemm_floor(s: Settings, steps: int) -> dict[str, Any]:
    """ablate's matrix multiplies over ``steps`` steps (after one warm-up step), and their floor.

    Returns:
        ``{"steps", "gflop", "in_situ_s", "floor_s"}`` per step: the work, the profiler's self time of the
        calls inside the step, and the sum of each call's time alone at its best layout
        (:mod:`benchmarks.bench_floor`).
    """
    from benchmarks.bench_floor import floor_seconds, profile_steps

    previous_threads = torch.get_num_threads()
    try:
        state = setup_trial(ablate_config(s))
        train_step(state, 1)
        calls = profile_steps(state, 2, steps)
        return {"steps": steps, "gflop": calls.flops_per_step() / 1e9, "in_situ_s": calls.seconds_per_step(),
                "floor_s": floor_seconds(calls, reps=20)}
    finally:
        torch.set_num_threads(previous_threads)


# ---------------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------------
def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def markdown_table(result: dict[str, Any]) -> str:
    """The result as a markdown table: median seconds per step, its parts, tokens, and the ratio."""
    m = result["summary"]
    lines = [
        "| trainer | median s/step | rollout + scoring s | update s | generated tokens/step | TRL / ablate |",
        "|---|---|---|---|---|---|",
        f"| ablate `train_step` | {_fmt(m['ablate_step_s'])} | {_fmt(m['ablate_rollout_s'])} | "
        f"{_fmt(m['ablate_update_s'])} | {_fmt(m['ablate_tokens'], 0)} | 1.00 |",
    ]
    if m["trl_step_s"] is None:
        lines.append("| TRL `GRPOTrainer` | not run (TRL not installed or `--no-trl`) | | | | |")
    else:
        lines.append(
            f"| TRL `GRPOTrainer` | {_fmt(m['trl_step_s'])} | {_fmt(m['trl_rollout_s'])} | "
            f"{_fmt(m['trl_update_s'])} | {_fmt(m['trl_tokens'], 0)} | {_fmt(m['ratio'], 2)} |"
        )
    return "\n".join(lines)


def breakdown(result: dict[str, Any]) -> str:
    """Where ablate's median step goes (phases, and torch operator kinds when profiled), as markdown."""
    m, a, w = result["summary"], result["ablate"], result["settings"]["warmup"]
    step = m["ablate_step_s"]
    rows = list(zip(a["step_s"], a["rollout_s"], a["update_s"], a["sample_s"], a["logprob_s"]))[w:]

    def med(values: list[float]) -> float:  # derived parts: per step first, then the median
        return statistics.median(values) if values else float("nan")

    parts = [
        ("sampling (prefill + decode loop)", m["ablate_sample_s"]),
        ("behaviour log-prob forward (`old_logp`)", m["ablate_logprob_s"]),
        ("texts, grading, rewards, advantages", med([r - sa - lp for _, r, _, sa, lp in rows])),
        ("update (forward + backward + AdamW)", m["ablate_update_s"]),
        ("metrics and the rest", med([st - r - u for st, r, u, _, _ in rows])),
    ]
    lines = ["| ablate phase | median s | share of the step |", "|---|---|---|"]
    lines += [f"| {name} | {sec:.3f} | {sec / step:.0%} |" for name, sec in parts]
    text = "\n".join(lines) + mfu_line(result)
    prof = result.get("profile")
    if prof:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in prof["op_shares"].items())
        text += f"\n\nTorch operator time of {prof['steps']} profiled ablate steps (`--profile`): {shares}."
    return text


def mfu_line(result: dict[str, Any]) -> str:
    """The update's model FLOPs utilisation, as a sentence ('' when not measured)."""
    m, s = result["summary"], result["settings"]
    if m.get("mfu") is None:
        return ""
    return (f"\n\nUpdate MFU: {m['mfu']:.1%} — the update's model FLOPs ({m['update_flop'] / 1e12:.2f} TFLOP a step, "
            f"`update_flop`: 6 N per position plus attention, over the padded batch) / its median time = "
            f"{m['update_flops'] / 1e12:.1f} TFLOP/s, against a {s['dtype']} square matmul measured in the same run "
            f"({m['matmul_peak_flops'] / 1e12:.1f} TFLOP/s); median over the {s['steps']} timed steps.")


def gap_analysis(result: dict[str, Any]) -> str:
    """Why ablate's step is not 2x faster than TRL's (with ``--floor``: the bound its matrix multiplies
    set), or ''."""
    m = result["summary"]
    if m["ratio"] is None or m["ratio"] >= 2.0:
        return ""
    step = m["ablate_step_s"]
    text = (
        "Why: both trainers do the same arithmetic on tensors of the same shapes (the decode loop, then "
        "forward + backward over [64, P + 32]) in float32; ablate already skips the behaviour forward when the "
        f"update is on-policy (it took {m['ablate_logprob_s']:.3f} s here) and drops finished rows from the "
        f"decode batch. Its sampling takes {m['ablate_sample_s']:.3f} s against {m['trl_rollout_s']:.3f} s for "
        f"TRL's whole rollout part, but its update ({m['ablate_update_s']:.3f} s) is as slow as TRL's "
        f"({m['trl_update_s']:.3f} s): the same dense matrix multiplies."
    )
    floor = result.get("floor")
    if floor:
        bound = m["trl_step_s"] / floor["floor_s"]
        left = m["trl_step_s"] / 2.0 - floor["floor_s"]
        text += (
            f" Measured (`--floor {floor['steps']}`): ablate's step performs {floor['gflop']:.1f} GFLOP of matrix "
            f"multiplies, which take {floor['in_situ_s']:.3f} s inside the step and {floor['floor_s']:.3f} s "
            f"each run alone at its best memory layout ({floor['gflop'] / floor['floor_s']:.0f} GFLOP/s). TRL's "
            f"step / that floor = **{bound:.2f}**: the most TRL / ablate can reach while ablate computes what TRL "
            f"computes in float32. 2x means a step of {m['trl_step_s'] / 2:.3f} s: {left * 1e3:.0f} ms above the floor "
            "for everything else (attention, elementwise work, sampling, the optimizer, Python), while the matrix "
            f"multiplies as they run inside the step take {(floor['in_situ_s'] - floor['floor_s']) * 1e3:.0f} ms more "
            "than alone. At TRL's arithmetic that needs the matrix multiplies near their standalone speed and all "
            "other work inside that margin; the other way is less arithmetic than TRL (no padding, or lower "
            "precision: `model.dtype=bfloat16` with `model.attention=eager`)."
        )
    else:
        text += f" (`--floor N` measures the bound the matrix multiplies set; step {step:.3f} s.)"
    return text + "\n\n"


def results_section(result: dict[str, Any]) -> str:
    """The ``RL step vs TRL GRPOTrainer`` section of benchmarks/RESULTS.md."""
    s, v, m = result["settings"], result["versions"], result["summary"]
    verdict = ""
    if m["ratio"] is not None:
        ok = "meets" if m["ratio"] >= 2.0 else "does NOT meet"
        word = "faster" if m["ratio"] >= 1.0 else "slower"
        times = m["ratio"] if m["ratio"] >= 1.0 else 1.0 / m["ratio"]
        verdict = (f"TRL / ablate = **{m['ratio']:.2f}**: ablate's step is {times:.2f}x {word} than TRL's; this "
                   f"{ok} the goal of 2x.\n\n")
    n = s["steps"]
    flags = f"--steps {n} --warmup {s['warmup']} --threads {s['threads']}"
    if s["device"] != "cpu":
        flags += f" --device {s['device']} --model {s['model']} --max-new-tokens {s['max_new_tokens']}"
    if s["dtype"] != "float32":
        flags += f" --dtype {s['dtype']}"
    if s["cuda_graph"]:
        flags += " --cuda-graph"
    if s["optim"] != "auto":
        flags += f" --optim {s['optim']}"
    if result.get("profile"):
        flags += f" --profile {result['profile']['steps']}"
    if result.get("floor"):
        flags += f" --floor {result['floor']['steps']}"
    return (
        "## RL step vs TRL GRPOTrainer\n\n"
        f"Measured {result['date']} with `benchmarks/bench_rl_step.py {flags} --write` on {result['machine']}; "
        f"torch {v['torch']}, transformers {v['transformers']}, trl {v['trl'] or 'not installed'}; torch threads "
        f"{result['threads']}. Load average (1 min) before / after: {result['load_avg_before'][0]} / "
        f"{result['load_avg_after'][0]} (the 2 cores are shared with other work, so absolute times vary; the "
        "ratio is the figure to compare).\n\n"
        f"One RL step = {s['prompts']} prompts x G = {s['group_size']} = {s['prompts'] * s['group_size']} "
        f"completions of at most {s['max_new_tokens']} tokens of `{s['model']}` (the same random init on both "
        f"sides, no warm start) on `{s['task']}`, final-answer reward, GRPO advantages, token PPO-clip 0.2, "
        "per-sequence loss aggregation (ablate `seq-mean-token-mean`, TRL `loss_type=grpo`), no KL and no "
        f"reference model, one AdamW step (lr {s['lr']:g}) on the whole batch, {s['dtype']}, {s['device'].upper()}, no gradient "
        f"checkpointing. Medians over {n} steps after {s['warmup']} warm-up steps; both trainers in one process, "
        "alternating step by step. A TRL step is one whole iteration of its training loop; its rollout part is "
        "`_generate_and_score_completions` (generation, decoding, reward, advantages), its update part the rest. "
        "ablate's rollout part includes its behaviour log-prob forward, which TRL skips when on-policy. "
        "Generated tokens differ a little: ablate stops a row at EOS or pad, TRL at EOS only; both pad every "
        "row to the longest (here always 32), so the tensor shapes, and the work, are the same.\n\n"
        f"{markdown_table(result)}\n\n"
        f"{verdict}"
        f"{breakdown(result)}\n\n"
        f"{gap_analysis(result)}"
        f"Checks: prompt token ids identical: {result['checks'].get('same_prompt_ids', 'n/a')}; "
        f"identical initial weights: {result['checks'].get('same_init', 'n/a')}.\n"
    )


def write_section(path: Path, body: str) -> None:
    """Replace (or append) this benchmark's delimited section in ``path``; the rest of the file is kept."""
    from benchmarks.results_md import write_section as write

    write(path, body, BEGIN, END)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    d = Settings()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=d.model)
    ap.add_argument("--prompts", type=int, default=d.prompts)
    ap.add_argument("--group-size", type=int, default=d.group_size)
    ap.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--steps", type=int, default=d.steps, help="timed steps per trainer (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=d.warmup, help="steps dropped before timing")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch threads, the same for both")
    ap.add_argument("--train-size", type=int, default=d.train_size, help="problems in the train pool")
    ap.add_argument("--device", default=d.device, help="cpu or cuda")
    ap.add_argument("--dtype", default=d.dtype, choices=["float32", "bfloat16"],
                    help="precision on both sides: float32, or bfloat16 autocast over float32 weights (TRL bf16=True)")
    ap.add_argument("--cuda-graph", action="store_true", help="ablate decodes through CUDA graphs (rollout.cuda_graph)")
    ap.add_argument("--optim", default=d.optim, choices=["auto", "for-loop", "foreach", "fused"],
                    help="ablate's optim.implementation (TRL uses torch's fused AdamW by default)")
    ap.add_argument("--no-trl", action="store_true", help="time ablate only")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="also profile N ablate steps (operator shares, cProfile)")
    ap.add_argument("--floor", type=int, default=0, metavar="N",
                    help="also measure the floor of ablate's matrix multiplies over N steps (bench_floor.py)")
    ap.add_argument("--json", action="store_true", help="also print the per-step times as JSON")
    ap.add_argument("--write", type=Path, nargs="?", const=ROOT / "benchmarks" / "RESULTS.md", default=None,
                    help="update this benchmark's section of RESULTS.md (default benchmarks/RESULTS.md)")
    args = ap.parse_args(argv)
    s = Settings(
        model=args.model, prompts=args.prompts, group_size=args.group_size, max_new_tokens=args.max_new_tokens,
        lr=args.lr, steps=args.steps, warmup=args.warmup, threads=args.threads, train_size=args.train_size,
        device=args.device, dtype=args.dtype, cuda_graph=args.cuda_graph, optim=args.optim,
    )
    result = run(s, use_trl=not args.no_trl)
    if args.profile:
        result["profile"] = {"steps": args.profile, **profile_ablate(s, args.profile)}
    if args.floor:
        result["floor"] = gemm_floor(s, args.floor)
    if not args.no_trl and result["versions"]["trl"] is None:
        print("TRL is not installed, or datasets is missing (pip install -e '.[bench]'): timed ablate only.",
              file=sys.stderr)
    print(markdown_table(result) + mfu_line(result))
    print(f"\nchecks: {result['checks']}; load average before/after: {result['load_avg_before']} / "
          f"{result['load_avg_after']}; threads {result['threads']}")
    if args.json:
        import json

        print(json.dumps({k: v for k, v in result.items() if k != "profile"}, indent=1))
    if args.write is not None:
        write_section(args.write, results_section(result))
        print(f"wrote the section to {args.write}")
    if args.profile:
        print(breakdown(result))
        print(result["profile"]["cprofile"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
