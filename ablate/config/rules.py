"""The cross-field rules of a trial configuration: combinations that are impossible (errors) or
probably not meant (warnings), one function per group of rules, collected in :data:`RULE_CHECKS`.

:data:`RULES` says every rule in words (rendered into ``docs/config.md``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.config.problems import ConfigNote, ConfigProblem
from ablate.registry import ALL_REGISTRIES, BUILTIN_MODEL_POSITIONS, builtins_loaded, engine_registry

if TYPE_CHECKING:
    from ablate.config.schema import TrialConfig

__all__ = [
    "CRITIC_ESTIMATORS", "GROUP_ESTIMATORS", "LENGTH_WEIGHTED_AGGREGATIONS", "RULES", "RULE_CHECKS",
    "SCOPED_ESTIMATORS", "SEQUENCE_RATIO_LEVELS", "WARNING_RULES", "check_rules", "model_positions",
]

#: Advantage estimators that read a value function (need ``critic.enabled``).
CRITIC_ESTIMATORS: frozenset[str] = frozenset({"gae"})
#: Built-in estimators that compare completions within a group (need ``group_size >= 2``, never read values).
GROUP_ESTIMATORS: frozenset[str] = frozenset({"grpo", "dr_grpo", "rloo", "grpo_process"})
#: Ratio levels with one ratio per sequence (GSPO), which stays within ~1e-3 of 1.
SEQUENCE_RATIO_LEVELS: frozenset[str] = frozenset({"sequence", "sequence_token"})
#: Estimators that read ``algo.adv_mean`` / ``algo.adv_std`` (as ``ablate.rl.advantages.SCOPED_ESTIMATORS``).
SCOPED_ESTIMATORS: frozenset[str] = frozenset({"grpo"})
#: Built-in aggregations that weight a sequence-level loss by the sequence's length: a sequence ratio's
#: per-token loss is one value repeated over the sequence's tokens, which these sum (over the step, the
#: sequence, or the prompt's group) instead of averaging per sequence (huggingface/trl#3823).
LENGTH_WEIGHTED_AGGREGATIONS: frozenset[str] = frozenset(
    {"token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "prompt-mean", "balanced-mean"})
#: Clip ranges at or above this are "PPO-sized" for the GSPO warning.
_PPO_SIZED_CLIP = 0.01

#: The warnings of :func:`check_rules` by name, each with what it flags in a few words. A study file
#: that runs such a combination on purpose names it under ``acknowledge:`` (see :mod:`ablate.study`):
#: validation then says once that it is acknowledged instead of warning about every arm.
WARNING_RULES: dict[str, str] = {
    "gspo-ppo-clip": "a sequence ratio (GSPO) with PPO-sized clip ranges",
    "gspo-token-sum": "a sequence ratio (GSPO) under a length-weighted loss aggregation",
    "token-gspo-clip": "a token ratio with GSPO-sized clip ranges",
    "prompt-mean-group-1": "prompt-mean aggregation with groups of one completion",
    "kl-k1-loss": "the k1 KL estimator placed in the loss",
    "correction-without-mismatch": "a rollout correction without a precision mismatch",
    "correction-bounds-unused": "rollout-correction bounds without a correction",
    "sampler-on-policy": "sampler log-probs with an on-policy update",
    "fp32-head-unused": "an FP32 LM head where the policy is float32 throughout",
}

#: The cross-field rules of :func:`check_rules`, in words (rendered into docs/config.md); a warning
#: carries its name from :data:`WARNING_RULES`.
RULES: tuple[str, ...] = (
    "error: `algo.advantage=gae` needs `critic.enabled=true` (GAE reads a learned value function).",
    "error: `critic.enabled=true` with a group estimator (grpo, dr_grpo, rloo, grpo_process): they never read "
    "values, and the critic's value loss would still change a shared backbone, confounding the comparison "
    "(plugin estimators are not checked).",
    "error: `algo.advantage=grpo_process` needs `prm` in `reward.components` (it normalizes step rewards).",
    "error: `kl` is in `reward.components` exactly when `kl.placement=reward` (the kl reward component is the "
    "KL placed in the reward; `kl.placement=loss` adds it to the loss instead).",
    "error: `kl.adaptive=true` with `kl.beta=0` (the controller multiplies beta, which would stay 0).",
    "error: `reward.components` empty or with a name listed twice.",
    "error: `prm` in `reward.components` with a task whose problems have no verifiable steps (reasoning_gym: "
    "its generators score the final answer only), so there is no step reward to place.",
    "error: group estimators, `algo.dynamic_sampling`, `algo.zero_variance_filter` and `algo.drop_solved_at` "
    "need `rollout.group_size >= 2`; `algo.dynamic_sampling` and `algo.zero_variance_filter` exclude each other.",
    "error: `algo.minibatches` must divide `rollout.prompts_per_step x rollout.group_size`, and "
    "`algo.grad_accum` the minibatch size.",
    "error: `loss.dual_clip` applies to `loss.surrogate=ppo` only.",
    "error: `algo.adv_mean` / `algo.adv_std` other than group with an estimator other than grpo (rloo, gae, "
    "grpo_process, dr_grpo and plugins ignore them), and `algo.adv_mean=batch` with `algo.adv_std=group` "
    "(undefined for groups whose rewards agree).",
    "error: `reward.soft_overlong.buffer` at most `rollout.max_new_tokens` when soft_overlong is used.",
    "error: `rollout.max_new_tokens` below the model's positions (`max_position_embeddings`: 256 for the tiny zoo "
    "models, 512 for the small ones and base-llama, 8192 for smollm2-135m, a checkpoint's config.json), which the prompt "
    "shares; each batch's prompts plus completions are checked again when it is sampled.",
    "error: `task.options` the task does not have (each task's options: `ablate tasks`), a jsonl task without "
    "its `path`, a reasoning_gym task without `task.dataset`; whether the file exists or the generator takes "
    "its options is checked where the trial runs.",
    "error: `task.difficulty` inside the task's declared range; `eval.n_problems <= task.eval_size`; "
    "`warmstart.target_min < warmstart.target_max`.",
    "warning `gspo-ppo-clip`: a sequence ratio level (GSPO) with a clip range >= 0.01: sequence ratios stay within ~1e-3 of 1, "
    "so PPO-sized ranges almost never bind; GSPO uses 3e-4 / 4e-4.",
    "warning `gspo-token-sum`: a sequence ratio level (GSPO) with `loss.aggregation` token-mean, seq-mean-token-sum, "
    "seq-mean-token-sum-norm or prompt-mean: each sequence's loss is weighted by its length "
    "(huggingface/trl#3823); only seq-mean-token-mean gives GSPO's per-sequence objective. Not warned: "
    "`loss.ratio_level=sequence` with seq-mean-token-sum, which is LUSPO (arXiv 2602.05261), length-scaled on purpose.",
    "warning `token-gspo-clip`: `loss.ratio_level=token` with both clip ranges < 0.01: nearly every token would be clipped.",
    "warning `prompt-mean-group-1`: `loss.aggregation=prompt-mean` with `rollout.group_size=1` (the same as seq-mean-token-mean).",
    "warning `kl-k1-loss`: `kl.placement=loss` with the k1 estimator, whose gradient has zero expectation under the policy.",
    "warning `correction-without-mismatch`: `loss.rollout_correction` (tis, mis) with the rollout in the trainer's precision (`rollout.dtype` "
    "null or equal to what `model.dtype` resolves to): there is no precision mismatch to correct.",
    "warning `correction-bounds-unused`: `loss.rollout_correction_cap` or `loss.rollout_correction_floor` changed with "
    "`loss.rollout_correction=none` (they have no effect).",
    "warning `fp32-head-unused`: `model.lm_head_dtype=float32` where the policy runs in float32 everywhere (it changes nothing).",
    "warning `sampler-on-policy`: `rollout.behaviour_logp=sampler` with an on-policy update (`algo.ppo_epochs=1`, `algo.minibatches=1`, "
    "`kl.placement=none`, no precision mismatch): no behaviour log-probs are used (it changes nothing).",
    "error: `loss.rollout_correction_cap` must be > 1 and `loss.rollout_correction_floor` in (0, 1) (field bounds).",
    "error: `engine.name=trl` with an option TRL's GRPOTrainer cannot honour (token-placed rewards, a critic, "
    "prompt-mean, dynamic sampling, ...; the engine's map in this page lists them).",
)


#: A group of rules: appends the errors and warnings of ``config`` it finds.
RuleCheck = Callable[["TrialConfig", list[ConfigProblem], list[ConfigNote]], None]


def _note(notes: list[ConfigNote], rule: str, message: str) -> None:
    """Append warning ``rule`` (a key of :data:`WARNING_RULES`) with its message."""
    assert rule in WARNING_RULES, rule
    notes.append(ConfigNote(rule, message))


def _critic_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """gae needs a critic; the group estimators never read one."""
    adv = c.algo.advantage
    if adv in CRITIC_ESTIMATORS and not c.critic.enabled:
        errors.append(ConfigProblem("critic.enabled", (
            f"algo.advantage={adv} estimates advantages from a learned value function: set "
            f"critic.enabled=true (or choose a critic-free estimator: {', '.join(sorted(GROUP_ESTIMATORS))})")))
    if c.critic.enabled and adv in GROUP_ESTIMATORS:
        errors.append(ConfigProblem("critic.enabled", (
            f"critic.enabled=true but algo.advantage={adv} never reads values: the critic would cost compute and "
            "its value loss would still change a shared backbone, confounding the comparison; set "
            "critic.enabled=false, or algo.advantage=gae")))


def _reward_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """Each reward component once, at least one, and prm for grpo_process."""
    comps = c.reward.components
    dupes = sorted({n for n in comps if comps.count(n) > 1})
    if dupes:
        errors.append(ConfigProblem("reward.components", f"lists {', '.join(dupes)} more than once; list each once"))
    if not comps:
        errors.append(ConfigProblem("reward.components", "is empty: list at least one component, e.g. [final_answer]"))
    task_cls = _task_class(c.task.name) if "prm" in comps else None
    if task_cls is not None and not getattr(task_cls, "has_steps", True):
        errors.append(ConfigProblem("reward.components", (
            f"prm needs verifiable reasoning steps, and task {c.task.name!r} has none (it grades the final "
            "answer only, e.g. reasoning_gym's generators): remove prm (and grpo_process), or use a task with "
            "checkable steps (addition, chain, countdown, jsonl with steps)")))
    if c.algo.advantage == "grpo_process" and "prm" not in comps:
        errors.append(ConfigProblem("algo.advantage", (
            "grpo_process normalizes step rewards, which come from the prm component: add prm to "
            "reward.components (e.g. reward.components=[final_answer, prm]) or choose another estimator")))


def _kl_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """The kl reward component exactly with kl.placement=reward; an adaptive beta above 0; no k1 in the loss."""
    comps = c.reward.components
    if c.kl.placement == "reward" and "kl" not in comps:
        errors.append(ConfigProblem("kl.placement", (
            "kl.placement=reward puts the KL penalty into token_rewards through the kl reward component: add kl "
            f"to reward.components (reward.components=[{', '.join([*comps, 'kl'])}]), or use kl.placement=loss")))
    if "kl" in comps and c.kl.placement != "reward":
        rest = [n for n in comps if n != "kl"]
        errors.append(ConfigProblem("reward.components", (
            f"lists kl but kl.placement={c.kl.placement}: the kl reward component is the KL placed in the reward; "
            f"set kl.placement=reward, or remove kl (reward.components=[{', '.join(rest)}])")))
    if c.kl.adaptive and c.kl.placement != "none" and c.kl.beta == 0.0:
        errors.append(ConfigProblem("kl.beta", (
            "the adaptive controller multiplies beta, so it stays 0 forever: give an initial kl.beta > 0")))
    if c.kl.placement == "loss" and c.kl_estimator == "k1":
        _note(notes, "kl-k1-loss",
            "kl.placement=loss with kl.estimator=k1: the gradient of k1 = log p - log p_ref is the score function, "
            "whose expectation under the policy is zero, so this penalty does not pull toward the reference; use "
            "k3 (GRPO) or k2 (whose gradient is the reverse-KL gradient)")


def _advantage_scope_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """adv_mean / adv_std only with the estimators that read them; no batch mean over a group std."""
    adv, mean, std = c.algo.advantage, c.algo.adv_mean, c.algo.adv_std
    if adv not in SCOPED_ESTIMATORS:
        for path, value in (("algo.adv_mean", mean), ("algo.adv_std", std)):
            if value != "group":
                hint = " (dr_grpo is grpo with algo.adv_std=none)" if adv == "dr_grpo" else ""
                errors.append(ConfigProblem(path, (
                    f"{value} is not read by algo.advantage={adv}, which keeps its own baseline; only "
                    f"{', '.join(sorted(SCOPED_ESTIMATORS))} reads it: set {path}=group, or "
                    f"algo.advantage=grpo{hint}")))
    elif mean == "batch" and std == "group":
        errors.append(ConfigProblem("algo.adv_std", (
            "group with algo.adv_mean=batch divides a batch-centred reward by its group's std, which is 0 for "
            "every group whose rewards agree (an undefined advantage, and no published recipe): set "
            "algo.adv_std=batch (batch z-score) or none, or algo.adv_mean=group")))


def _overlong_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """DAPO's soft overlong buffer fits in the completions."""
    if "soft_overlong" in c.reward.components and c.reward.soft_overlong.buffer > c.rollout.max_new_tokens:
        errors.append(ConfigProblem("reward.soft_overlong.buffer", (
            f"{c.reward.soft_overlong.buffer} is longer than the completions can be (rollout.max_new_tokens="
            f"{c.rollout.max_new_tokens}); DAPO punishes the last buffer tokens before the limit: lower it "
            f"(e.g. {max(1, c.rollout.max_new_tokens // 4)})")))


def model_positions(name: str) -> int | None:
    """The positions (prompt plus completion tokens) of model ``name``, without importing torch.

    A built-in model's declared value, or ``max_position_embeddings`` (``n_positions`` for GPT-2) in a
    checkpoint directory's ``config.json``; None when unknown (a plugin model, an unreadable config).
    """
    if name in BUILTIN_MODEL_POSITIONS:
        return BUILTIN_MODEL_POSITIONS[name]
    try:
        data = json.loads((Path(name).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for key in ("max_position_embeddings", "n_positions"):
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _position_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """The completions fit in the model's positions, with room for at least one prompt token."""
    limit, n = model_positions(c.model.name), c.rollout.max_new_tokens
    if limit is not None and n >= limit:
        errors.append(ConfigProblem("rollout.max_new_tokens", (
            f"{n} tokens do not fit in the {limit} positions of model {c.model.name} (its max_position_embeddings), "
            f"which the prompt shares: lower it below {limit} minus the longest prompt (e.g. "
            f"rollout.max_new_tokens={max(1, limit // 4)}), or choose a model with more positions")))


def _group_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """Group estimators and the group filters (dynamic sampling, zero-variance filter, dropping solved
    prompts) need groups of two or more; the two filters exclude each other."""
    adv, G = c.algo.advantage, c.rollout.group_size
    if G < 2 and adv in GROUP_ESTIMATORS:
        errors.append(ConfigProblem("rollout.group_size", (
            f"algo.advantage={adv} compares completions within a group, which needs rollout.group_size >= 2 "
            f"(got {G}); raise it, or use algo.advantage=gae with critic.enabled=true")))
    if G < 2 and c.algo.dynamic_sampling:
        errors.append(ConfigProblem("algo.dynamic_sampling", (
            "a group of one completion always has zero reward variance, so dynamic sampling would drop every "
            "group: set rollout.group_size >= 2 or algo.dynamic_sampling=false")))
    for path, on in (("algo.zero_variance_filter", c.algo.zero_variance_filter),
                     ("algo.drop_solved_at", c.algo.drop_solved_at is not None)):
        if G < 2 and on:
            errors.append(ConfigProblem(path, (
                "it reads a prompt's group of completions (their reward variance, their pass rate), which needs "
                f"rollout.group_size >= 2 (got {G}): raise it, or turn {path} off")))
    if c.algo.dynamic_sampling and c.algo.zero_variance_filter:
        errors.append(ConfigProblem("algo.zero_variance_filter", (
            "both drop zero-variance groups: dynamic_sampling (DAPO) samples more prompts to refill the step, "
            "zero_variance_filter (ScaleRL) does not; choose one")))
    if c.loss.aggregation == "prompt-mean" and G == 1:
        _note(notes, "prompt-mean-group-1",
            "loss.aggregation=prompt-mean with rollout.group_size=1: each prompt group is one completion, so "
            "this is seq-mean-token-mean; raise rollout.group_size if you meant a per-prompt token mean")


def _update_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """Minibatches divide a step, micro-batches a minibatch; dual-clip with ppo only."""
    n = c.completions_per_step
    mb = c.algo.minibatches
    if n % mb:
        errors.append(ConfigProblem("algo.minibatches", (
            f"{mb} does not divide the {n} completions of a step (rollout.prompts_per_step x rollout.group_size "
            f"= {c.rollout.prompts_per_step} x {c.rollout.group_size}); choose a divisor of {n}")))
    elif (n // mb) % c.algo.grad_accum:
        errors.append(ConfigProblem("algo.grad_accum", (
            f"{c.algo.grad_accum} does not divide the minibatch of {n // mb} completions "
            f"({n} completions / {mb} minibatches); choose a divisor of {n // mb}")))
    if c.loss.dual_clip is not None and c.loss.surrogate != "ppo":
        errors.append(ConfigProblem("loss.dual_clip", (
            f"dual-clip applies to the ppo surrogate only, not loss.surrogate={c.loss.surrogate}: set "
            "loss.dual_clip=null (or loss.surrogate=ppo)")))


def _ratio_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """Clip ranges sized for the ratio level (GSPO's tiny ones for sequence ratios); sequence ratios averaged per sequence."""
    lo, hi = c.loss.clip_low, c.loss.clip_high
    if c.loss.ratio_level in SEQUENCE_RATIO_LEVELS and max(lo, hi) >= _PPO_SIZED_CLIP:
        _note(notes, "gspo-ppo-clip",
            f"loss.ratio_level={c.loss.ratio_level} (GSPO) with loss.clip_low={lo}, loss.clip_high={hi}: a sequence "
            "ratio is the geometric mean of its token ratios and stays within ~1e-3 of 1, so PPO-sized clip ranges "
            "almost never bind (reports/ratio_level: the gspo-clip0.2 arm clipped no sequence in any trial); GSPO "
            "(Zheng et al. 2025) uses clip_low=3e-4, clip_high=4e-4. Set them, unless "
            "you mean to compare without effective clipping")
    luspo = c.loss.ratio_level == "sequence" and c.loss.aggregation == "seq-mean-token-sum"  # length-scaled on purpose
    if c.loss.ratio_level in SEQUENCE_RATIO_LEVELS and c.loss.aggregation in LENGTH_WEIGHTED_AGGREGATIONS and not luspo:
        _note(notes, "gspo-token-sum",
            f"loss.ratio_level={c.loss.ratio_level} (GSPO) with loss.aggregation={c.loss.aggregation}: a sequence "
            "ratio gives one loss per sequence, repeated on each of its tokens, and this aggregation sums those "
            "tokens, so each sequence weighs as much as it is long instead of GSPO's per-sequence mean "
            "(Zheng et al. 2025; huggingface/trl#3823). Use loss.aggregation=seq-mean-token-mean, unless you "
            "mean to compare length-weighted sequence losses")
    if c.loss.ratio_level == "token" and max(lo, hi) < _PPO_SIZED_CLIP:
        _note(notes, "token-gspo-clip",
            f"loss.ratio_level=token with GSPO-sized clip ranges (clip_low={lo}, clip_high={hi}): token ratios "
            "vary by far more than 1e-2, so nearly every token would be clipped and get no gradient; use ~0.2 "
            "with token ratios")


def trainer_precision(c: TrialConfig) -> str | None:
    """What ``model.dtype`` resolves to without torch: float32 or bfloat16; None when it depends on
    whether CUDA is present (``auto`` on device ``auto``)."""
    if c.model.dtype != "auto":
        return c.model.dtype
    if c.device.startswith("cuda"):
        return "bfloat16"
    return "float32" if c.device in ("cpu", "mps") else None


def _precision_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """A mismatch correction needs a mismatch; its bounds act only with a correction; an FP32 head needs bf16."""
    loss, trainer = c.loss, trainer_precision(c)
    same = c.rollout.dtype is None or c.rollout.dtype == trainer
    if loss.rollout_correction != "none" and same:
        _note(notes, "correction-without-mismatch",
            f"loss.rollout_correction={loss.rollout_correction} with the rollout in the trainer's precision "
            f"(rollout.dtype={c.rollout.dtype or 'null'}, model.dtype={c.model.dtype}): the sampler's and the "
            "trainer's log-probs differ only by float rounding, so there is no mismatch to correct and the "
            "weights stay ~1, at the cost of one more log-prob forward per step; set rollout.dtype=bfloat16 "
            "(or another precision than the trainer's) to study the correction, or loss.rollout_correction=none")
    if loss.rollout_correction == "none" and (loss.rollout_correction_cap != 2.0
                                               or loss.rollout_correction_floor is not None):
        _note(notes, "correction-bounds-unused",
            "loss.rollout_correction_cap / loss.rollout_correction_floor are set but loss.rollout_correction=none, "
            "so they have no effect; set loss.rollout_correction=tis or mis")
    on_policy = c.single_pass_update and same and loss.rollout_correction == "none"  # as TrialState.on_policy
    if c.rollout.behaviour_logp == "sampler" and on_policy:
        _note(notes, "sampler-on-policy",
            "rollout.behaviour_logp=sampler with an on-policy update (algo.ppo_epochs=1, algo.minibatches=1, "
            "kl.placement=none, the rollout in the trainer's precision): the update uses its own log-probs and "
            "no behaviour log-probs are computed, so it changes nothing; it saves a forward when "
            "algo.minibatches > 1 or algo.ppo_epochs > 1")
    if c.model.lm_head_dtype == "float32" and trainer == "float32" and c.rollout.dtype in (None, "float32"):
        _note(notes, "fp32-head-unused",
            f"model.lm_head_dtype=float32 while the policy runs in float32 everywhere (model.dtype={c.model.dtype} "
            f"on device {c.device}, rollout.dtype={c.rollout.dtype or 'null'}): it changes nothing; it matters "
            "with bfloat16 (model.dtype=bfloat16 or rollout.dtype=bfloat16)")


def _task_class(name: str) -> object | None:
    """The registered task class ``name``, importing the (torch-free) tasks if the built-ins are not loaded."""
    reg = ALL_REGISTRIES.get("task")
    if (reg is None or name not in reg) and not builtins_loaded():
        importlib.import_module("ablate.tasks")  # registers the built-in tasks; imports no torch
        reg = ALL_REGISTRIES.get("task")
    return reg.get(name) if reg is not None and name in reg else None


def _task_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """The task's options as its class checks them without the machine (unknown names, a missing file
    or generator name); the task difficulty inside the task's declared range, where it declares one."""
    task_cls = _task_class(c.task.name)
    check = getattr(task_cls, "option_problems", None)
    if callable(check):  # the options the task is built with (ablate.config.schema.task_options)
        options = {**c.task.options, **({"dataset": c.task.dataset} if c.task.dataset is not None else {})}
        errors.extend(ConfigProblem(path, message) for path, message in check(options))
    if c.task.difficulty is None:
        return
    lo_d, hi_d = getattr(task_cls, "min_difficulty", None), getattr(task_cls, "max_difficulty", None)
    if (getattr(task_cls, "default_difficulty", None) is not None
            and isinstance(lo_d, int) and isinstance(hi_d, int) and not lo_d <= c.task.difficulty <= hi_d):
        errors.append(ConfigProblem("task.difficulty", (
            f"{c.task.difficulty} is outside task {c.task.name}'s range {lo_d}..{hi_d}: choose a value in it, or "
            "null for the task's default")))


def _eval_warmstart_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """No more eval problems than the eval split holds; a non-empty warm-start accuracy band."""
    if c.eval.n_problems > c.task.eval_size:
        errors.append(ConfigProblem("eval.n_problems", (
            f"{c.eval.n_problems} is more than the eval split holds (task.eval_size={c.task.eval_size}): lower "
            "eval.n_problems or raise task.eval_size")))
    if c.warmstart.target_min >= c.warmstart.target_max:
        errors.append(ConfigProblem("warmstart.target_min", (
            f"the target band [{c.warmstart.target_min}, {c.warmstart.target_max}] is empty: target_min must be "
            "smaller than warmstart.target_max")))


def _engine_rules(c: TrialConfig, errors: list[ConfigProblem], notes: list[ConfigNote]) -> None:
    """What the trial's engine cannot honour, as the engine says it (its ``refusals``, asked through the engine
    seam's registry: e.g. :func:`ablate.engines.trl_map.trl_refusals` for engine.name=trl)."""
    from dataclasses import replace

    engine = engine_registry().get(c.engine.name)
    errors.extend(replace(p, rule=True) for p in engine.refusals(c))


#: Every group of rules, in the order their problems are reported.
RULE_CHECKS: tuple[RuleCheck, ...] = (
    _critic_rules,
    _reward_rules,
    _advantage_scope_rules,
    _kl_rules,
    _overlong_rules,
    _position_rules,
    _group_rules,
    _update_rules,
    _ratio_rules,
    _precision_rules,
    _task_rules,
    _eval_warmstart_rules,
    _engine_rules,
)


def check_rules(config: TrialConfig) -> tuple[list[ConfigProblem], list[ConfigNote]]:
    """Every cross-field rule of ``config``: (errors, warnings)."""
    errors: list[ConfigProblem] = []
    notes: list[ConfigNote] = []
    for check in RULE_CHECKS:
        check(config, errors, notes)
    return errors, notes
