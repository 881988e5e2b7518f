"""Pilot of the contexts of a generalization study (issue 44, "Verdicts that travel").

A future ``studies/generalization.yaml`` compares the mission's three choices (loss aggregation
seq-mean vs token-mean, GSPO's sequence ratio vs the token ratio, a per-token KL reward vs the final
answer alone) in every *context*: tasks (addition, chain, countdown, reasoning_gym's
basic_arithmetic) x architectures (tiny-llama, tiny-gpt2, tiny-qwen2), plus a size ladder on
addition (tiny-llama 0.8M, small-llama 2.9M, base-llama 10M). A context is worth trials only if it is
*informative*: its SFT warm start lands where RL can show learning. Per context this script

1. builds the warm start exactly as a trial of such a study would (:func:`ablate.train.build_policy`
   on the trial's own configuration: the base settings of ``studies/granularity_cross_kl.yaml`` with
   ``warmstart.seed: 0``, one shared warm start per context) and records its eval accuracy, step
   accuracy, format rate, SFT steps, whether it reached the band and its wall seconds;
2. runs ONE RL trial of the study's baseline arm (final-answer reward, seq-mean-token-mean, token
   ratio with clip 0.2) at a small candidate budget (``--steps``, ``--eval-problems``; evaluations at
   step 0 and at the end only) with :func:`ablate.train.run_trial`, and records the step-0 and final
   eval accuracy on the same problems (paired: an exact McNemar test on the discordant problems says
   whether RL moved it), its wall seconds split into setup, RL steps and evaluations, and what the
   timing model of :mod:`ablate.study.timing` expected.

Everything runs on one torch thread, one job at a time; warm starts are cached under ``--cache``
(default ``/tmp/ablate-pilot-cache``), so nothing in the repository changes. Results are kept per
context in ``--state`` (a JSON file under /tmp): a rerun skips the contexts already measured
(``--fresh`` measures them again). Run from the repository root::

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/pilot_contexts.py
    .venv/bin/python benchmarks/pilot_contexts.py --only addition/tiny-llama --no-trial
    .venv/bin/python benchmarks/pilot_contexts.py --trial-tasks addition      # RL timing on one task + the ladder

and it writes ``benchmarks/pilot_contexts.md`` (``--out``); text between the
``<!-- pilot:proposal:begin -->`` and ``<!-- pilot:proposal:end -->`` markers of an existing file is kept, and so is
the hand-run second pass between ``<!-- pilot:second-pass:begin -->`` and ``<!-- pilot:second-pass:end -->``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ablate.config import TrialConfig  # noqa: E402
from ablate.machine import cpu_name  # noqa: E402
from ablate.study.timing import estimate_config_seconds  # noqa: E402
from ablate.train import build_policy, run_trial  # noqa: E402

#: The study's base (studies/granularity_cross_kl.yaml's base: without its task and model, which the
#: contexts set), with one shared warm start per context (warmstart.seed 0) and one torch thread.
BASE: dict[str, Any] = {
    "warmstart.enabled": True,
    "warmstart.seed": 0,
    "rollout.max_new_tokens": 32,  # every task below needs <= 29 completion tokens (EOS included)
    "rollout.prompts_per_step": 4,
    "rollout.group_size": 8,
    "algo.advantage": "grpo",
    "algo.ppo_epochs": 2,
    "kl.beta": 0.04,
    "device": "cpu",
    "threads": 1,
}
#: The baseline arm of the mission's three choices: final answer only, GRPO's seq-mean, token ratio.
BASELINE_ARM: dict[str, Any] = {
    "reward.components": ["final_answer"],
    "loss.aggregation": "seq-mean-token-mean",
    "loss.ratio_level": "token",
    "loss.clip_low": 0.2,
    "loss.clip_high": 0.2,
}
#: The KL arm (the costliest of the three one-at-a-time changes: a reference model's forward per step),
#: timed with --kl-contexts; the other two (token-mean, GSPO) cost what the baseline costs.
KL_ARM: dict[str, Any] = {"reward.components": ["final_answer", "kl"], "kl.placement": "reward"}
#: The tasks of the contexts: the overrides of each task level.
TASKS: dict[str, dict[str, Any]] = {
    "addition": {"task.name": "addition", "task.difficulty": 2},  # as every committed study
    "chain": {"task.name": "chain", "task.difficulty": 3},  # the task's default, stated
    "countdown": {"task.name": "countdown", "task.difficulty": 3},  # the task's default, stated
    # reasoning-gym's basic_arithmetic at the small setting of ablate/tasks/reasoning_gym.py's docstring;
    # the generator's defaults (2-6 terms of up to 4 digits, answered with no steps) are --rg-defaults.
    "reasoning_gym": {"task.name": "reasoning_gym", "task.dataset": "basic_arithmetic",
                      "task.options": {"min_terms": 2, "max_terms": 3, "max_digits": 2}},
}
#: Warm-start-only variants of basic_arithmetic for tiny-llama (--rg-variants): the generator's defaults,
#: and an easier one (two terms of up to 2 digits, + and - only, no parentheses or negation).
RG_VARIANTS: dict[str, dict[str, Any]] = {
    "reasoning_gym-defaults": {"task.name": "reasoning_gym", "task.dataset": "basic_arithmetic", "task.options": {}},
    "reasoning_gym-easy": {"task.name": "reasoning_gym", "task.dataset": "basic_arithmetic",
                           "task.options": {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+", "-"],
                                            "allow_parentheses": False, "allow_negation": False}},
}
ARCHITECTURES = ("tiny-llama", "tiny-gpt2", "tiny-qwen2")
LADDER = ("small-llama", "base-llama")  # on addition, above tiny-llama
#: The rule of an informative context: warm-start eval accuracy in this band, and RL moved accuracy.
RULE_BAND = (0.1, 0.9)
ALPHA = 0.05


def contexts(rg_variants: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """``(task label, model, task overrides)`` of every context, in the order they run."""
    out = [(t, m, TASKS[t]) for t in TASKS for m in ARCHITECTURES]
    out += [("addition", m, TASKS["addition"]) for m in LADDER]
    if rg_variants:
        out += [(name, "tiny-llama", task) for name, task in RG_VARIANTS.items()]
    return out


def trial_overrides(task: dict[str, Any], model: str, steps: int, n_eval: int, cache: str,
                    arm: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dotted overrides of the pilot trial of one context (the baseline arm unless ``arm`` changes it)."""
    return {**BASE, **task, "model.name": model, **BASELINE_ARM, **(arm or {}), "warmstart.cache_dir": cache,
            "train.steps": steps, "eval.n_problems": n_eval, "eval.every": 0, "seed": 0}


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p of ``b`` problems wrong->right against ``c`` right->wrong."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def measure_warmstart(config: TrialConfig) -> dict[str, Any]:
    """Build (or reuse) the context's warm start as a trial does; its report and wall seconds."""
    t, c = time.perf_counter(), time.process_time()
    _, report = build_policy(config, torch.device("cpu"))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    report = {k: v for k, v in report.items() if k != "history"}
    report.update(wall_s=wall, cpu_s=cpu, load1=os.getloadavg()[0])
    return report


def measure_trial(config: TrialConfig) -> dict[str, Any]:
    """One RL trial: accuracy at step 0 and at the end (paired), and where its seconds went."""
    t, cpu = time.perf_counter(), time.process_time()
    result = run_trial(config)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    evals = [(s, m) for s, m in result.history if "eval/accuracy" in m]
    first, last = evals[0], evals[-1]
    by_step: dict[int, dict[int, int]] = {}
    for row in result.eval_problems:
        by_step.setdefault(row["step"], {})[row["problem"]] = row["correct"]
    a, z = by_step[first[0]], by_step[last[0]]
    b = sum(1 for p in a if not a[p] and z.get(p))
    c = sum(1 for p in a if a[p] and not z.get(p))
    eval_s = sum(m.get("perf/eval_s", 0.0) for _, m in evals)
    step_s = sum(m.get("perf/step_s", 0.0) for s, m in result.history if s > 0)
    rl_s = step_s - sum(m.get("perf/eval_s", 0.0) for s, m in evals if s > 0)
    return {
        "steps": result.steps,
        "acc0": first[1]["eval/accuracy"],
        "acc_final": last[1]["eval/accuracy"],
        "format0": first[1].get("eval/format_rate"),
        "format_final": last[1].get("eval/format_rate"),
        "wrong_to_right": b,
        "right_to_wrong": c,
        "mcnemar_p": mcnemar_p(b, c),
        "reward_mean": sum(m.get("reward/total", 0.0) for s, m in result.history if s > 0) / max(1, result.steps),
        "wall_s": wall,
        "cpu_s": cpu,
        "load1": os.getloadavg()[0],
        "trial_s": result.seconds,
        "rl_s": rl_s,
        "rl_step_s": rl_s / max(1, result.steps),
        "eval_s": eval_s,
        "eval_s_each": eval_s / max(1, len(evals)),
        "n_evals": len(evals),
        "other_s": result.seconds - rl_s - eval_s,
        "model_estimate_s": estimate_config_seconds(config),
    }


def run_context(task_label: str, model: str, task: dict[str, Any], args, row: dict[str, Any] | None) -> dict[str, Any]:
    """Measure what ``row`` (a context's earlier results, or None) still lacks: the warm start, the
    trial at ``--steps`` and, with ``--long-steps``, the longer trial; failures are recorded, not raised."""
    overrides = trial_overrides(task, model, args.steps, args.eval_problems, args.cache)
    if row is None or args.fresh:
        row = {"task": task_label, "model": model, "overrides": overrides}
    if "warmstart" not in row:
        try:
            row["warmstart"] = measure_warmstart(TrialConfig.from_overrides(overrides))
            row.pop("warmstart_error", None)
        except Exception as exc:  # record the failure and go on
            row["warmstart_error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc(limit=4)
            return row
    if args.no_trial or (args.trial_tasks and task_label not in args.trial_tasks and model not in LADDER):
        return row
    in_band = RULE_BAND[0] <= row["warmstart"]["eval_accuracy"] <= RULE_BAND[1]
    long = args.long_steps or args.steps
    wanted = [("trial", args.steps, None)] + ([("trial_long", long, None)] if args.long_steps and in_band else [])
    if f"{task_label}/{model}" in (args.kl_contexts or []):
        wanted.append(("trial_kl", long, KL_ARM))
    for name, steps, arm in wanted:
        if name in row:
            continue
        try:
            config = TrialConfig.from_overrides(trial_overrides(task, model, steps, args.eval_problems, args.cache, arm))
            row[name] = measure_trial(config)
            row.pop(f"{name}_error", None)
        except Exception as exc:
            row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc(limit=4)
    return row


# ---------------------------------------------------------------------------------------------- report


def fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.0f} s" if s < 100 else f"{s / 60:.1f} min"


TRIALS = ("trial", "trial_long")  # the baseline arm's trials (trial_kl: the KL arm's, for its cost)


def moved(tr: dict[str, Any]) -> str:
    """'up', 'down' or 'flat': the paired change of one trial's accuracy at p < ALPHA."""
    if tr["mcnemar_p"] >= ALPHA:
        return "flat"
    return "up" if tr["acc_final"] > tr["acc0"] else "down"


def informative(row: dict[str, Any]) -> str:
    """The rule applied to one context: warm start in RULE_BAND and RL moved accuracy (any timed budget)."""
    ws = row.get("warmstart")
    if ws is None:
        return "no (warm start failed)"
    if not RULE_BAND[0] <= ws["eval_accuracy"] <= RULE_BAND[1]:
        return f"no (warm start outside [{RULE_BAND[0]}, {RULE_BAND[1]}])"
    moves = [moved(row[t]) for t in TRIALS if t in row]
    if not moves:
        return "in band; RL not timed"
    if "up" in moves:
        return "**yes** (up)"
    if "down" in moves:
        return "moved down only"
    return "no (flat)"


def table(rows: list[dict[str, Any]]) -> str:
    budgets = [t for t in TRIALS if any(t in r for r in rows)]
    steps = {t: next(r[t]["steps"] for r in rows if t in r) for t in budgets}
    head = "| context | SFT steps | warm-start acc (step / format) | in band [0.2, 0.6] | SFT wall |"
    for t in budgets:
        head += f" RL trial wall, {steps[t]} steps | acc step 0 -> {steps[t]} (W->R / R->W, p) |"
    head += " informative? |"
    lines = [head, "|" + "---|" * (6 + 2 * len(budgets))]
    for r in rows:
        name = f"{r['task']} / {r['model']}"
        ws = r.get("warmstart")
        if ws is None:
            lines.append(f"| {name} | - | failed: {r.get('warmstart_error', '?')} | - | - |" + " - | - |" * len(budgets)
                         + " no |")
            continue
        acc = f"{ws['eval_accuracy']:.3f} ({ws['step_accuracy']:.2f} / {ws['format_rate']:.2f})"
        band = "yes" if ws["reached_target"] else "**no**"
        sft = fmt_s(ws["seconds"])
        cells = []
        for t in budgets:
            tr = r.get(t)
            if tr is not None:
                cells.append(f"{tr['trial_s']:.1f} s")
                cells.append(f"{tr['acc0']:.3f} -> {tr['acc_final']:.3f} ({tr['wrong_to_right']} / "
                             f"{tr['right_to_wrong']}, {tr['mcnemar_p']:.2g})")
            elif f"{t}_error" in r:
                cells += [f"failed: {r[f'{t}_error']}", "-"]
            else:
                cells += ["not timed", "-"]
        lines.append(f"| {name} | {ws['steps']} | {acc} | {band} | {sft} | " + " | ".join(cells)
                     + f" | {informative(r)} |")
    return "\n".join(lines)


def cpu_load(m: dict[str, Any]) -> str:
    return "-" if "cpu_s" not in m else f"{m['cpu_s']:.1f} ({m['load1']:.1f})"


def cost_table(rows: list[dict[str, Any]], n_eval: int) -> str:
    """Per timed trial: measured seconds per RL step and per evaluation, where the trial's seconds went,
    and what the timing model of ablate.study.timing expected."""
    lines = [f"| context | steps | s per RL step | s per eval of {n_eval} problems | trial wall = RL + evals + "
             "setup | process CPU s (load avg at end) | timing model's estimate |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        for t in (*TRIALS, "trial_kl"):
            tr = r.get(t)
            if tr is None:
                continue
            est = tr["model_estimate_s"]
            arm = " (KL arm)" if t == "trial_kl" else ""
            lines.append(f"| {r['task']} / {r['model']}{arm} | {tr['steps']} | {tr['rl_step_s']:.3f} | "
                         f"{tr['eval_s_each']:.2f} | {tr['trial_s']:.1f} = {tr['rl_s']:.1f} + {tr['eval_s']:.1f} + "
                         f"{tr['other_s']:.1f} s | {cpu_load(tr)} | {'-' if est is None else f'{est:.1f} s'} |")
    return "\n".join(lines)


def set_args(overrides: dict[str, Any]) -> str:
    """``--set path=value`` arguments as a shell reads them (values in YAML/JSON, quoted where needed)."""
    out = []
    for k, v in overrides.items():
        item = f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        out.append(f"--set '{item}'" if re.search(r'[\s\[\]{}"]', item) else f"--set {item}")
    return " ".join(out)


def commands(args) -> str:
    tasks = {**TASKS, **(RG_VARIANTS if args.rg_variants else {})}
    return (
        "```bash\n"
        "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/pilot_contexts.py "
        + " ".join(args.argv) + "\n```\n\n"
        "Each context is equivalent to one command line (the script calls the same functions in-process:\n"
        "`ablate.train.build_policy` for the warm start, then `ablate.train.run_trial`):\n\n"
        "```bash\n"
        f"ablate train --json --set model.name=M <task overrides> {set_args({**BASE, 'warmstart.cache_dir': args.cache})} "
        f"{set_args(BASELINE_ARM)} --set train.steps={args.steps} --set eval.n_problems={args.eval_problems} "
        "--set eval.every=0 --set seed=0\n"
        "```\n\n"
        f"The KL arm's timing adds `{set_args(KL_ARM)}`. Task overrides (the `-defaults` and `-easy` variants of\n"
        "basic_arithmetic ran on tiny-llama only):\n\n"
        + "\n".join(f"- {t}: `{set_args(o)}`" for t, o in tasks.items())
        + "\n\nWarm start: the trial's own (`warmstart.*` defaults: target band [0.2, 0.6], stop at the first\n"
        "evaluation >= 0.2, at most 2000 SFT steps of 32 solutions, lr 1e-3, evaluation of 128 eval problems\n"
        "every 25 steps, `warmstart.seed: 0`, generation limit `rollout.max_new_tokens` = 32).\n"
    )


def render(rows: list[dict[str, Any]], args, proposal: str) -> str:
    date = dt.date.today().isoformat()
    lines = [
        "# Pilot of the generalization study's contexts (issue 44)",
        "",
        f"Measured {date} on **{cpu_name()}** ({os.cpu_count()} cores, shared with other people's jobs: the load",
        "average at the end of each trial is in the cost table; one torch thread, one job at a time),",
        f"torch {torch.__version__}, Python {platform.python_version()}. Produced by",
        "[pilot_contexts.py](pilot_contexts.py); warm starts cached under "
        f"`{args.cache}` (nothing in the repository changed).",
        "",
        "## How",
        "",
        commands(args),
        "RL trial: the baseline arm of the three choices (final-answer reward, `seq-mean-token-mean`, token",
        f"ratio clip 0.2), seed 0, `train.steps={args.steps}`"
        + (f" (and a second trial at `train.steps={args.long_steps}` where the warm start is in the rule's band)"
           if args.long_steps else "")
        + f", `eval.n_problems={args.eval_problems}`, evaluated at",
        "step 0 and at the end only (`eval.every=0`). *Moved*: an exact McNemar test on the eval problems",
        "whose correctness changed between step 0 and the end (W->R: wrong to right, R->W: right to wrong),",
        f"p < {ALPHA}. *Informative*: warm-start eval accuracy within [{RULE_BAND[0]}, {RULE_BAND[1]}] and RL moved it up",
        "at either budget (one seed each: a screen, not a test of the context).",
        "Warm-start accuracy is the warm start's own last evaluation (128 problems, its stopping rule);",
        f"step-0 accuracy is the trial's evaluation of the same policy on {args.eval_problems} problems.",
        "",
        "## Results",
        "",
        table(rows),
        "",
        "SFT wall: the warm start's own training seconds (its evaluations included; not saving or loading).",
        "RL trial wall: `run_trial`'s seconds with the warm start already cached; below, split into its RL steps,",
        "its two evaluations and the rest (loading the cached warm start, building the task pools).",
        "",
        "### Cost per unit",
        "",
        cost_table(rows, args.eval_problems),
        "",
    ]
    failures = [(r, k) for r in rows for k in ("warmstart_error", "trial_error", "trial_long_error", "trial_kl_error")
                if k in r]
    if failures:
        lines += ["### Failures", ""]
        for r, k in failures:
            lines.append(f"- {r['task']} / {r['model']} ({k}): {r[k]}")
        lines.append("")
    lines += ["<!-- pilot:proposal:begin -->", proposal.strip("\n"), "<!-- pilot:proposal:end -->", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="RL steps of the timed trial (default 30)")
    parser.add_argument("--eval-problems", type=int, default=200, help="eval problems per evaluation (default 200)")
    parser.add_argument("--long-steps", type=int, default=None,
                        help="also time a longer trial of every timed context at this many RL steps")
    parser.add_argument("--kl-contexts", nargs="*", default=None,
                        help="also time the KL arm (reward final_answer + kl) at --long-steps in these contexts (task/model)")
    parser.add_argument("--cache", default="/tmp/ablate-pilot-cache", help="warm-start cache root")
    parser.add_argument("--state", default="/tmp/ablate-pilot-state.json", help="per-context results (resumable)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "pilot_contexts.md"), help="markdown output")
    parser.add_argument("--only", nargs="*", default=None, help="contexts to run, as task/model")
    parser.add_argument("--trial-tasks", nargs="*", default=None,
                        help="time the RL trial only for these tasks' contexts and the size ladder")
    parser.add_argument("--no-trial", action="store_true", help="warm starts only")
    parser.add_argument("--rg-variants", action="store_true",
                        help="also warm-start tiny-llama on basic_arithmetic at the generator's defaults and an "
                             "easier setting (warm start only)")
    parser.add_argument("--fresh", action="store_true", help="measure contexts already in --state again")
    parser.add_argument("--no-write", action="store_true", help="print the table, write no markdown")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)

    state_path = Path(args.state)
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
    for task_label, model, task in contexts(args.rg_variants):
        key = f"{task_label}/{model}"
        if args.only and key not in args.only:
            continue
        t = time.perf_counter()
        before = json.dumps(state.get(key), sort_keys=True, default=str)
        row = run_context(task_label, model, task, args, state.get(key))
        if json.dumps(row, sort_keys=True, default=str) == before:
            continue  # nothing left to measure
        print(f"[{time.strftime('%H:%M:%S')}] {key}: {time.perf_counter() - t:.0f} s", flush=True)
        row["context_wall_s"] = row.get("context_wall_s", 0.0) + time.perf_counter() - t
        state[key] = row
        state_path.write_text(json.dumps(state, indent=1, default=str))
        ws, tr = row.get("warmstart"), row.get("trial")
        print(f"   warm start: {row.get('warmstart_error') or {k: ws[k] for k in ('steps', 'eval_accuracy', 'reached_target', 'seconds')}}",
              flush=True)
        if tr or "trial_error" in row:
            print(f"   trial: {row.get('trial_error') or {k: round(tr[k], 3) for k in ('acc0', 'acc_final', 'mcnemar_p', 'trial_s')}}",
                  flush=True)

    order = [f"{t}/{m}" for t, m, _ in contexts(True)]
    rows = [state[k] for k in order if k in state]
    print(table(rows))
    if args.no_write:
        return 0
    out = Path(args.out)
    proposal = "## Proposal\n\n(to be written from the figures above)\n"
    if out.exists():
        m = re.search(r"<!-- pilot:proposal:begin -->\n(.*?)<!-- pilot:proposal:end -->", out.read_text(), re.S)
        if m:
            proposal = m.group(1)
    kept = re.search(r"<!-- pilot:second-pass:begin -->.*?<!-- pilot:second-pass:end -->\n", out.read_text(), re.S) \
        if out.exists() else None
    out.write_text(render(rows, args, proposal) + ("\n" + kept.group(0) if kept else ""))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
