"""The metric glossary: every metric a trial logs, with its meaning and unit.

Kept apart from :mod:`ablate.train` so that reports can read units without importing torch.
``docs/metrics.md`` is generated from :data:`METRICS` (``python -m ablate.metrics > docs/metrics.md``)
and a test compares both with what a trial actually logs.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping

#: Metric names a trial logs, with their meaning and unit (the glossary; docs/metrics.md is
#: generated from it and a test compares it with what a trial actually logs). ``{c}`` stands for a
#: reward component name, ``{k}`` for eval.pass_k, ``{t}`` for a name of TRL's log (engine trl).
METRICS: dict[str, tuple[str, str]] = {
    "reward/total": ("mean over completions of the summed token rewards (all components, weighted)", "reward"),
    "reward/{c}": ("mean over completions of one component's weighted reward, summed over its tokens", "reward"),
    "reward/accuracy": ("fraction of training completions whose final answer is correct", "fraction"),
    "reward/format_rate": ("fraction of training completions in the task's exact format", "fraction"),
    "reward/step_accuracy": ("mean fraction of correct reasoning steps of training completions", "fraction"),
    "response/length": ("mean completion length, EOS included", "tokens"),
    "response/length_correct": ("mean length of completions with a correct answer (NaN if none)", "tokens"),
    "response/length_incorrect": ("mean length of completions with a wrong answer (NaN if none)", "tokens"),
    "response/truncated_frac": ("fraction of completions cut at rollout.max_new_tokens without EOS", "fraction"),
    "adv/mean": ("mean advantage over active tokens", "advantage"),
    "adv/std": ("standard deviation of advantages over active tokens", "advantage"),
    "data/kept_groups_frac": ("fraction of sampled groups kept (dynamic sampling and the zero-variance filter drop zero-variance groups)", "fraction"),
    "data/pool_size": ("train prompts still drawn from (algo.drop_solved_at removes solved ones; logged only with it)", "prompts"),
    "data/solved_dropped": ("prompts that left the training pool this step (pass rate >= algo.drop_solved_at)", "prompts"),
    "data/sample_rounds": ("rollout rounds in this step (1 + dynamic-sampling resamples)", "rounds"),
    "policy/entropy": ("mean entropy of the next-token distribution over active tokens, at the first epoch's forward passes", "nats"),
    "policy/kl_ref": ("KL(policy || reference) per completion: summed k1 over its tokens, mean over completions", "nats"),
    "policy/clip_frac_low": ("fraction of ratios clipped at 1 - clip_low (sequences for GSPO ratios)", "fraction"),
    "policy/clip_frac_high": ("fraction of ratios clipped at 1 + clip_high (sequences for GSPO ratios)", "fraction"),
    "policy/dual_clip_frac": ("fraction of negative-advantage tokens capped by dual clip", "fraction"),
    "policy/ratio_mean": ("mean importance ratio new/behaviour (per token, or per sequence for GSPO)", "ratio"),
    "policy/ratio_max": ("largest importance ratio of the step", "ratio"),
    "policy/approx_kl": ("mean of r - 1 - log r over active tokens: KL(behaviour || new) of the update", "nats"),
    "mismatch/kl": ("rollout/trainer mismatch before the update: mean over sampled tokens of Schulman's k3 = w - 1 - log w, "
                    "w = exp(trainer's recomputed log-prob - rollout's log-prob), an estimate of KL(rollout || trainer); "
                    "logged only when measured (rollout.dtype differs from the trainer's, or loss.rollout_correction is on)",
                    "nats/token"),
    "mismatch/max_ratio": ("largest mismatch weight w = exp(trainer's - rollout's log-prob) over sampled tokens (1 = "
                           "no mismatch); logged only when measured", "ratio"),
    "mismatch/corrected_frac": ("fraction of active tokens whose mismatch weight loss.rollout_correction truncated "
                                "(tis) or masked (mis)", "fraction"),
    "loss/policy": ("aggregated policy loss, mean over the step's optimizer steps", "loss"),
    "loss/normalizer": ("what the policy loss was divided by, mean over the step's optimizer steps: active tokens (token-mean), sequences (seq-mean-*), max_len x sequences (Dr. GRPO's constant), groups (prompt-mean) or groups with a non-zero advantage (balanced-mean); NaN for a plugin aggregation", "tokens / sequences / groups"),
    "loss/entropy": ("aggregated entropy term (before entropy_coef)", "nats"),
    "loss/kl": ("aggregated KL-in-the-loss term (before beta); 0 unless kl.placement=loss", "nats"),
    "loss/value": ("aggregated value loss (critic only)", "loss"),
    "loss/total": ("the loss that was minimized", "loss"),
    "critic/value_mean": ("mean predicted value over active tokens (critic only)", "return"),
    "critic/explained_variance": ("1 - Var(returns - values) / Var(returns) over active tokens (critic only)", "fraction"),
    "kl/beta": ("current KL coefficient (changes with kl.adaptive)", "coefficient"),
    "optim/grad_norm": ("global gradient norm before clipping, mean over the step's optimizer steps", "norm"),
    "optim/lr": ("learning rate of the policy parameters", "lr"),
    "eval/accuracy": ("greedy final-answer accuracy on the eval split", "fraction"),
    "eval/step_accuracy": ("mean fraction of correct reasoning steps, greedy, eval split", "fraction"),
    "eval/format_rate": ("fraction of greedy eval completions in the exact format", "fraction"),
    "eval/partial": ("mean partial credit of greedy eval completions", "fraction"),
    "eval/length": ("mean greedy eval completion length", "tokens"),
    "eval/truncated_frac": ("fraction of greedy eval completions without EOS", "fraction"),
    "eval/pass_at_{k}": ("unbiased pass@k from k samples per eval problem (eval.pass_k > 1)", "fraction"),
    "trl/{t}": ("engine trl only: TRL GRPOTrainer's own log entry t (trl/loss, trl/reward, trl/entropy, "
                "trl/clip_ratio/region_mean, trl/num_tokens, ...), mean over the RL step's optimizer steps",
                "TRL's"),
    "model/params": ("parameters of the policy (logged once, at step 0): the size a report's scale trend reads",
                     "parameters"),
    "compute/tokens": ("completion tokens generated for training so far (the compute axis)", "tokens"),
    "compute/samples": ("completions generated for training so far", "completions"),
    "perf/rollout_s": ("seconds spent sampling this step", "s"),
    "perf/reward_s": ("seconds spent grading and computing rewards and advantages", "s"),
    "perf/update_s": ("seconds spent in the PPO update", "s"),
    "perf/eval_s": ("seconds of the evaluation logged at this step (0 when none)", "s"),
    "perf/step_s": ("wall seconds of the whole step", "s"),
    "perf/rollout_tokens_per_s": ("generated tokens per second of sampling", "tokens/s"),
    "perf/graph_capture_s": ("seconds spent capturing the decode loop's CUDA graphs so far in the trial, warm-up included "
                             "(logged with rollout.cuda_graph; 0 off CUDA, and for shapes an earlier trial of the "
                             "worker captured)", "s"),
}


#: Columns of a trial's ``eval_problems.csv`` artifact (one row per evaluation x eval problem, see
#: :mod:`ablate.tracking`), with their meaning and unit; the order is the file's.
EVAL_PROBLEM_GLOSSARY: dict[str, tuple[str, str]] = {
    "step": ("RL step after which the evaluation ran; 0 = the start policy", "step"),
    "problem": ("index of the problem in the trial's eval problems, `task.sample(\"eval\", eval.n_problems, "
                "seed=task.data_seed)`: the same problem in every seed and every arm with the same task settings; "
                "a smaller eval.n_problems evaluates a prefix", "index"),
    "correct": ("the greedy completion's final answer is correct (mean over problems: `eval/accuracy`)", "0/1"),
    "step_accuracy": ("correct reasoning steps over the reference's step count (mean: `eval/step_accuracy`)",
                      "fraction"),
    "format_ok": ("the completion is in the task's exact format (mean: `eval/format_rate`)", "0/1"),
    "length": ("generated tokens, EOS included (mean: `eval/length`)", "tokens"),
    "truncated": ("no EOS within rollout.max_new_tokens (mean: `eval/truncated_frac`)", "0/1"),
    "partial": ("partial credit (mean: `eval/partial`)", "fraction"),
}

#: What one evaluation costs, measured by ``benchmarks/bench_eval_cost.py`` (rendered into docs/metrics.md).
EVAL_COST_MARKDOWN = """\
## What an evaluation costs

Every evaluation decodes `eval.n_problems` eval problems greedily (batches of 64, the rollout decoder)
and grades them; its wall time is logged as `perf/eval_s`. A trial evaluates at step 0, every
`eval.every` steps and after the last step: the quickstart's 60 steps with `eval.every: 10` make 7
evaluations. The standard error of an accuracy p measured on n problems is sqrt(p (1 - p) / n), at most
0.5 / sqrt(n) (p = 50%).

Measured with `.venv/bin/python benchmarks/bench_eval_cost.py --repeats 10`: the quickstart's start
policy (`tiny-llama` warm-started on 2-digit addition, accuracy about 0.35, completions of about 23.5
tokens, `rollout.max_new_tokens: 32`), one torch thread (one study worker of `--workers 2`), on an
Intel(R) Xeon(R) Processor @ 2.80GHz with 2 cores (load average 0.7-0.9 during the run), torch 2.13.0+cpu.
Each size timed 10 times, interleaved with the others, after one warm-up evaluation.

| eval.n_problems | s per evaluation: median (min-max), n = 10 | s per quickstart trial (7 evaluations) | standard error at 50% accuracy |
|---:|---|---:|---:|
| 100 | 0.33 (0.29-0.42) | 2.3 | 5.0 points |
| 200 | 0.68 (0.59-0.81) | 4.8 | 3.5 points |
| 500 | 1.57 (1.40-1.81) | 11.0 | 2.2 points |

The cost is linear in n (about 3.1 ms per problem here). In whole quickstart trials (arm
`loss_norm=sequence,ratio=token`, seed 0, 60 steps, one thread; one trial per size, n = 1, measured
while other work kept the load average near 3 on the 2 cores, so each evaluation took about twice
its time in the table above): 34.7 s per
trial with 100 problems, 4.2 s of it in the 7 evaluations (12%, 0.60 s median per evaluation); 51.3 s
with 500 problems, 22.3 s of it in evaluations (44%, 3.3 s median).

The default `eval.n_problems` is 500: 2.2 points of standard error, and 500 distinct problems in the
eval split of the default task (3-digit addition: about 81,000 of its 810,000 problems are in the
eval split) and of the quickstart's task (2-digit addition: 822 of 8,100); `task.eval_size`, the most an
evaluation may ask for, is 500.
The predefined studies set their own `eval.n_problems` (100 at the default budget, 200 at full).
"""


#: The metrics a trial's content fingerprint hashes: what every trial logs, whose definitions are settled,
#: and which together pin down the computation to the last bit (the final gradient norm and losses are
#: functions of the trained weights and the last batch; the evaluation of the policy). Timings are out
#: (they differ run to run), and so are diagnostics whose definition may still be corrected (a fix to
#: ``policy/ratio_max`` must not make a rerun of the same computation look like other evidence).
CONTENT_METRICS: tuple[str, ...] = (
    "eval/accuracy", "loss/policy", "loss/entropy", "optim/grad_norm", "reward/total", "response/length",
    "adv/std", "policy/approx_kl",
)


def content_fingerprint(final: Mapping[str, object]) -> str:
    """A trial's content fingerprint: 12 hex digits of a SHA-256 over the last logged value of each of
    :data:`CONTENT_METRICS` (``TrialResult.final``, or a results.csv row), as ``name=repr(float(value))``
    lines in name order; a metric the trial did not log, or a non-finite value, is left out, so a
    results.csv row (where a metric the trial never logged is empty) gives the fingerprint its run
    recorded. Other entries are ignored.

    Two trials with one fingerprint computed the same thing: the same final losses, gradient norm,
    rewards, lengths and evaluation to the last bit. They are one piece of evidence, whatever their keys.
    Float rounding on another processor model or code version gives another fingerprint.
    """
    lines = []
    for name in sorted(CONTENT_METRICS):
        try:
            value = float(final[name])  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            lines.append(f"{name}={value!r}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def glossary_pattern(name: str) -> re.Pattern[str]:
    """The logged names a glossary entry stands for: ``{c}`` is any reward component, ``{k}`` a number,
    ``{t}`` any name of TRL's log (slashes included)."""
    pattern = re.escape(name).replace(r"\{c\}", r"[^/]+").replace(r"\{k\}", r"\d+").replace(r"\{t\}", r".+")
    return re.compile(pattern + r"\Z")


def known_metric(name: str, components: Iterable[str] | None = None) -> bool:
    """True when a trial can log ``name`` (it matches an entry of :data:`METRICS`). With ``components``
    (the reward component names registered, a study's plugins' among them), ``reward/{c}`` stands for
    one of those names only, so that ``reward/acuracy`` is no metric; without, for any name."""
    if components is None:
        return any(glossary_pattern(m).match(name) for m in METRICS)
    names = set(components)
    return any(name in {m.replace("{c}", c) for c in names} if "{c}" in m else glossary_pattern(m).match(name)
               for m in METRICS)


def metric_names(components: Iterable[str] = ()) -> list[str]:
    """Every metric name a trial can log, written out: the glossary's names, ``reward/<c>`` for each of
    ``components`` (the reward component names registered) in place of ``reward/{c}``, and the other
    templates as the glossary writes them (``eval/pass_at_{k}``, ``trl/{t}``): what a misspelt metric is
    matched against for the nearest name."""
    out: list[str] = []
    for m in METRICS:
        names = [m.replace("{c}", c) for c in components] if "{c}" in m else [m]
        out += [n for n in names if n not in out]
    return out


def unknown_metric(name: object, components: Iterable[str]) -> str | None:
    """None when a trial can log ``name`` (:func:`known_metric` with ``components``), else the problem
    in words: the nearest metric name, and where the list is (docs/metrics.md)."""
    components = list(components)
    if isinstance(name, str) and known_metric(name, components):
        return None
    import difflib

    choices = [m for m in metric_names(components) if m != name]  # a template written as a name: not itself
    guess = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.5)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    where = "docs/metrics.md lists what a trial logs"
    if str(name).startswith("reward/"):
        where += f"; reward/<c> for each reward component c: {', '.join(components) or 'none registered'}"
    return f"unknown metric {name!r}{hint} ({where})"


def metrics_glossary_markdown() -> str:
    """docs/metrics.md: the glossary of every metric a trial logs."""
    lines = [
        "# Metrics glossary",
        "",
        "<!-- Generated from ablate/metrics.py (METRICS) by `python -m ablate.metrics`; do not edit by hand. -->",
        "",
        "Every metric a trial logs through `log(metrics, step)` (and so to MLflow), by prefix. Step 0 is the",
        "evaluation of the start policy; `{c}` is a reward component name, `{k}` is `eval.pass_k`, `{t}` a name",
        "of TRL's own log (engine.name: trl; the other metrics mean the same on both engines).",
        "",
        "| metric | meaning | unit |",
        "|---|---|---|",
    ]
    for name, (meaning, unit) in METRICS.items():
        lines.append(f"| `{name}` | {meaning} | {unit} |")
    lines += [
        "",
        "## Per-problem evaluation records",
        "",
        "Besides its `eval/*` means, every evaluation records each eval problem; a finished trial uploads them",
        "as the MLflow artifact `eval_problems.csv` (next to `history.csv` and `samples.json`), one row per",
        "evaluation x eval problem, and `ablate.tracking.results.load_results` reads them into `Results.problems`",
        "(`key, arm, seed`, the factor columns, then these columns). The eval problems depend on the task",
        "settings and `task.data_seed` only, never on the trial seed, so arms and seeds can be paired problem",
        "by problem.",
        "",
        "| column | meaning | unit |",
        "|---|---|---|",
    ]
    for name, (meaning, unit) in EVAL_PROBLEM_GLOSSARY.items():
        lines.append(f"| `{name}` | {meaning} | {unit} |")
    lines += ["", EVAL_COST_MARKDOWN.rstrip("\n")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(metrics_glossary_markdown(), end="")
