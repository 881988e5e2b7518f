"""The metric glossary: every metric a trial logs, with its meaning and unit.

Kept apart from :mod:`ablate.train` so that reports can read units without importing torch.
``docs/metrics.md`` is generated from :data:`METRICS` (``python -m ablate.metrics > docs/metrics.md``)
and a test compares both with what a trial actually logs.
"""

from __future__ import annotations

import re

#: Metric names a trial logs, with their meaning and unit (the glossary; docs/metrics.md is
#: generated from it and a test compares it with what a trial actually logs). ``{c}`` stands for a
#: reward component name, ``{k}`` for eval.pass_k.
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
    "data/kept_groups_frac": ("fraction of sampled groups kept (dynamic sampling drops zero-variance groups)", "fraction"),
    "data/sample_rounds": ("rollout rounds in this step (1 + dynamic-sampling resamples)", "rounds"),
    "policy/entropy": ("mean entropy of the next-token distribution over active tokens, at the first epoch's forward passes", "nats"),
    "policy/kl_ref": ("KL(policy || reference) per completion: summed k1 over its tokens, mean over completions", "nats"),
    "policy/clip_frac_low": ("fraction of ratios clipped at 1 - clip_low (sequences for GSPO ratios)", "fraction"),
    "policy/clip_frac_high": ("fraction of ratios clipped at 1 + clip_high (sequences for GSPO ratios)", "fraction"),
    "policy/dual_clip_frac": ("fraction of negative-advantage tokens capped by dual clip", "fraction"),
    "policy/ratio_mean": ("mean importance ratio new/behaviour (per token, or per sequence for GSPO)", "ratio"),
    "policy/ratio_max": ("largest importance ratio of the step", "ratio"),
    "policy/approx_kl": ("mean of r - 1 - log r over active tokens: KL(behaviour || new) of the update", "nats"),
    "loss/policy": ("aggregated policy loss, mean over the step's optimizer steps", "loss"),
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
    "compute/tokens": ("completion tokens generated for training so far (the compute axis)", "tokens"),
    "compute/samples": ("completions generated for training so far", "completions"),
    "perf/rollout_s": ("seconds spent sampling this step", "s"),
    "perf/reward_s": ("seconds spent grading and computing rewards and advantages", "s"),
    "perf/update_s": ("seconds spent in the PPO update", "s"),
    "perf/eval_s": ("seconds of the evaluation logged at this step (0 when none)", "s"),
    "perf/step_s": ("wall seconds of the whole step", "s"),
    "perf/rollout_tokens_per_s": ("generated tokens per second of sampling", "tokens/s"),
}


def glossary_pattern(name: str) -> re.Pattern[str]:
    """The logged names a glossary entry stands for: ``{c}`` is any reward component, ``{k}`` a number."""
    pattern = re.escape(name).replace(r"\{c\}", r"[^/]+").replace(r"\{k\}", r"\d+")
    return re.compile(pattern + r"\Z")


def known_metric(name: str) -> bool:
    """True when a trial can log ``name`` (it matches an entry of :data:`METRICS`)."""
    return any(glossary_pattern(m).match(name) for m in METRICS)


def metrics_glossary_markdown() -> str:
    """docs/metrics.md: the glossary of every metric a trial logs."""
    lines = [
        "# Metrics glossary",
        "",
        "<!-- Generated from ablate/metrics.py (METRICS) by `python -m ablate.metrics`; do not edit by hand. -->",
        "",
        "Every metric a trial logs through `log(metrics, step)` (and so to MLflow), by prefix. Step 0 is the",
        "evaluation of the start policy; `{c}` is a reward component name, `{k}` is `eval.pass_k`.",
        "",
        "| metric | meaning | unit |",
        "|---|---|---|",
    ]
    for name, (meaning, unit) in METRICS.items():
        lines.append(f"| `{name}` | {meaning} | {unit} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(metrics_glossary_markdown(), end="")
