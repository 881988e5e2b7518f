"""The RL loop of one trial: the one place that calls tasks, models, rewards and the RL core.

``run_trial(config, log)`` trains one fully specified configuration and seed and returns a
:class:`TrialResult`::

    warm start (cached SFT) ─► per step:
        sample prompts ─► roll out G completions each ─► grade ─► token rewards [B, T]
        ─► advantages [B, T] ─► PPO epochs over minibatches (gradient accumulation inside each)
        ─► evaluate every ``eval.every`` steps ─► checkpoint every ``train.checkpoint_every``

``log(metrics, step)`` is the only way it reports (it never imports mlflow); every metric name is
documented in ``docs/metrics.md`` (:data:`METRICS` here), and a test keeps the two in sync.

Reproducibility: every random draw of step ``s`` comes from generators seeded by ``(seed, s)``, so
the same config and seed give the same metrics on CPU, and a trial resumed from its checkpoint ends
with exactly the result of an uninterrupted one.

Run one trial from the command line with ``ablate train --set train.steps=20``.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ablate.config import TrialConfig, autocast_dtype, resolve_device
from ablate.metrics import METRICS, metrics_glossary_markdown  # noqa: F401  (re-exported)
from ablate.models import Policy, load_policy
from ablate.models.evaluate import ProblemRecord, evaluate_with_records
from ablate.models.heads import BackboneHead
from ablate.models.logprobs import token_logprobs, token_logprobs_and_entropy
from ablate.models.rollout import PromptCompletionLayout, generate_rollouts
from ablate.rewards import RewardContext, compute_token_rewards, step_mask_from_grades
from ablate.rewards.learned_prm import LearnedPRM, learned_prm_for_trial
from ablate.rl import (
    aggregate_loss,
    compute_advantages,
    kl_penalty,
    masked_mean,
    policy_loss,
    step_totals,
    value_loss,
)
from ablate.tasks import TASKS, Problem, Task

LogFn = Callable[[dict[str, float], int], None]

class NonFiniteError(RuntimeError):
    """A NaN or inf appeared in a loss, a reward or a gradient; the message names step and quantity."""


@dataclass
class TrialResult:
    """The outcome of one trial.

    Attributes:
        key: the config's trial key.
        steps: RL steps completed.
        final: the last logged value of every metric (final eval metrics included).
        history: every logged ``(step, metrics)`` pair, in order.
        seconds: wall time of this call (a resumed call counts only its own part).
        resumed_from: the checkpoint step this call resumed from, or None.
        warmstart: the warm start's report (empty when disabled).
        samples: sample completions of the last step with their per-component rewards.
        eval_problems: one row per evaluation x eval problem, in order: ``step, problem, correct,
            step_accuracy, format_ok, length, truncated, partial`` (see :func:`eval_problem_rows`);
            the rows of evaluations before a resume come from the checkpoint.
        learned_prm: the learned PRM's report (held-out AUC, accuracy, log loss ..., see
            :class:`ablate.rewards.learned_prm.LearnedPRMReport`); empty unless reward.prm.source=learned.
    """

    key: str
    steps: int
    final: dict[str, float]
    history: list[tuple[int, dict[str, float]]]
    seconds: float
    resumed_from: int | None = None
    warmstart: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    learned_prm: dict[str, Any] = field(default_factory=dict)
    eval_problems: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# helpers


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from its parts, stable across processes and Python versions."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _generator(device: torch.device, *parts: int | str) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(derive_seed(*parts))


def eval_problem_rows(step: int, records: list[ProblemRecord]) -> list[dict[str, Any]]:
    """The records of the evaluation at ``step`` as plain rows: ``step, problem, correct, step_accuracy,
    format_ok, length, truncated, partial`` (flags as 0/1; ``problem``: the index in the eval problems)."""
    return [
        {"step": int(step), "problem": r.problem, "correct": int(r.correct), "step_accuracy": r.step_accuracy,
         "format_ok": int(r.format_ok), "length": r.length, "truncated": int(r.truncated), "partial": r.partial}
        for r in records
    ]


def build_task(config: TrialConfig) -> Task:
    """The task of ``config`` (``task.name`` with its difficulty, data seed and options)."""
    kwargs: dict[str, Any] = dict(config.task.options)
    if config.task.difficulty is not None:
        kwargs["difficulty"] = config.task.difficulty
    return TASKS.get(config.task.name)(seed=config.task.data_seed, **kwargs)


def build_policy(config: TrialConfig, device: torch.device, *, progress: bool = False) -> tuple[Policy, dict[str, Any]]:
    """The start policy: the cached warm start of a zoo model, or the model as it is.

    Returns:
        ``(policy, warm start report as a dict)``; the report is empty when no warm start ran
        (disabled, a pretrained model or a local checkpoint).
    """
    from ablate.models import MODELS

    entry = MODELS.get(config.model.name) if config.model.name in MODELS else None
    if config.warmstart.enabled and entry is not None and not entry.pretrained:
        from ablate.warmstart import WarmStartSpec, warm_start

        ws = config.warmstart
        spec = WarmStartSpec(
            task=config.task.name,
            model=config.model.name,
            difficulty=config.task.difficulty,
            task_options=dict(config.task.options),
            seed=ws.seed if ws.seed is not None else config.seed,
            target_min=ws.target_min,
            target_max=ws.target_max,
            max_steps=ws.max_steps,
            batch_size=ws.batch_size,
            lr=ws.lr,
            max_new_tokens=config.rollout.max_new_tokens,
        )
        policy, report = warm_start(spec, cache_dir=ws.cache_dir, device=device, progress=progress)
        return policy, report.to_dict()
    return load_policy(config.model.name, seed=config.seed, device=device), {}


class Critic(BackboneHead):
    """A value function: a copy of the policy's backbone with a scalar head (:class:`BackboneHead`).

    ``values[b, t]`` is the value of the state in which completion token ``t`` is chosen (the hidden
    state at input position ``P + t - 1``, the one whose logits sample token ``t``), as GAE expects.
    """

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_prompt_tokens: int) -> torch.Tensor:
        """[B, P + T] ids and mask → values [B, T] (float32; 0 where the completion mask is 0)."""
        values = self.completion_outputs(input_ids, attention_mask, num_prompt_tokens, state_before=True)  # (B, T)
        return values * attention_mask[:, num_prompt_tokens:].to(values.dtype)


def _pad_cat(tensors: list[torch.Tensor], value: float, left: bool) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    out = []
    for t in tensors:
        pad = width - t.shape[1]
        if pad:
            filler = torch.full((t.shape[0], pad), value, dtype=t.dtype, device=t.device)
            t = torch.cat([filler, t] if left else [t, filler], dim=1)
        out.append(t)
    return torch.cat(out, dim=0)


@dataclass
class StepBatch(PromptCompletionLayout):
    """The scored rollouts of one RL step. Tensors are [B, P] (prompt) or [B, T] (completion)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor | None
    group_ids: torch.Tensor
    truncated: torch.Tensor
    token_rewards: torch.Tensor
    step_mask: torch.Tensor
    parts: dict[str, torch.Tensor]
    grades: list[Any]
    texts: list[str]
    prompts: list[str]
    ref_logp: torch.Tensor | None = None

    def select_groups(self, keep: list[int]) -> StepBatch:
        """The rows of the groups in ``keep`` (group ids renumbered 0..len(keep)-1)."""
        rows = [i for i, g in enumerate(self.group_ids.tolist()) if g in set(keep)]
        new_gid = {g: j for j, g in enumerate(keep)}
        idx = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        return StepBatch(
            prompt_ids=self.prompt_ids[idx],
            prompt_mask=self.prompt_mask[idx],
            completion_ids=self.completion_ids[idx],
            mask=self.mask[idx],
            old_logp=None if self.old_logp is None else self.old_logp[idx],
            group_ids=torch.tensor([new_gid[int(self.group_ids[i])] for i in rows], device=self.mask.device),
            truncated=self.truncated[idx],
            token_rewards=self.token_rewards[idx],
            step_mask=self.step_mask[idx],
            parts={k: v[idx] for k, v in self.parts.items()},
            grades=[self.grades[i] for i in rows],
            texts=[self.texts[i] for i in rows],
            prompts=[self.prompts[g] for g in keep],
            ref_logp=None if self.ref_logp is None else self.ref_logp[idx],
        )

    @staticmethod
    def concat(batches: list[StepBatch], pad_id: int) -> StepBatch:
        """Rows of several batches in one (prompts left-padded, completions right-padded)."""
        if len(batches) == 1:
            return batches[0]
        offsets, n = [], 0
        for b in batches:
            offsets.append(n)
            n += len(b.prompts)
        ref = None
        if batches[0].ref_logp is not None:
            ref = _pad_cat([b.ref_logp for b in batches], 0.0, left=False)
        return StepBatch(
            prompt_ids=_pad_cat([b.prompt_ids for b in batches], pad_id, left=True),
            prompt_mask=_pad_cat([b.prompt_mask for b in batches], 0, left=True),
            completion_ids=_pad_cat([b.completion_ids for b in batches], pad_id, left=False),
            mask=_pad_cat([b.mask for b in batches], 0.0, left=False),
            old_logp=None if batches[0].old_logp is None else _pad_cat([b.old_logp for b in batches], 0.0, left=False),
            group_ids=torch.cat([b.group_ids + o for b, o in zip(batches, offsets)]),
            truncated=torch.cat([b.truncated for b in batches]),
            token_rewards=_pad_cat([b.token_rewards for b in batches], 0.0, left=False),
            step_mask=_pad_cat([b.step_mask for b in batches], 0.0, left=False),
            parts={k: _pad_cat([b.parts[k] for b in batches], 0.0, left=False) for k in batches[0].parts},
            grades=[g for b in batches for g in b.grades],
            texts=[t for b in batches for t in b.texts],
            prompts=[p for b in batches for p in b.prompts],
            ref_logp=ref,
        )


def reward_components(config: TrialConfig) -> dict[str, tuple[float, dict[str, Any]]]:
    """``reward.components`` as ``name → (weight, options)`` for :func:`compute_token_rewards`."""
    r = config.reward
    table: dict[str, tuple[float, dict[str, Any]]] = {
        "final_answer": (r.final_answer.weight, {}),
        "prm": (
            r.prm.weight,
            {
                "source": r.prm.source,
                "flip_prob": r.prm.flip_prob,
                "correct": r.prm.correct_reward,
                "incorrect": r.prm.incorrect_reward,
                "normalize": r.prm.normalize,
            },
        ),
        "kl": (1.0, {"beta": config.kl.beta, "estimator": config.kl_estimator}),
        "format": (r.format.weight, {"mode": r.format.mode}),
        "partial": (r.partial.weight, {}),
        "missing_eos": (r.missing_eos.weight, {}),
        "soft_overlong": (
            r.soft_overlong.weight,
            {"max_len": config.rollout.max_new_tokens, "cache": r.soft_overlong.buffer},
        ),
    }
    out = {}
    for name in r.components:
        # a plugin component has no config section: weight 1, no options
        out[name] = table.get(name, (1.0, {}))
    return out


def _check_finite(value: torch.Tensor, quantity: str, step: int) -> None:
    if not torch.isfinite(value).all():
        raise NonFiniteError(f"non-finite {quantity} at RL step {step}: stopping the trial")


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


# --------------------------------------------------------------------------------------------------
# the trainer


class Trainer:
    """The state of one trial (policy, reference, critic, optimizer) and its step function.

    Most users call :func:`run_trial`; the class exists so that tests and benchmarks can drive
    single steps.
    """

    def __init__(self, config: TrialConfig, *, progress: bool = False) -> None:
        self.config = config
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        self.device = resolve_device(config)
        self.amp_dtype = autocast_dtype(config, self.device)
        torch.manual_seed(derive_seed(config.seed, "init"))
        self.task = build_task(config)
        self.train_pool: list[Problem] = self.task.sample("train", config.task.train_size, seed=config.task.data_seed)
        # The eval problems depend on the task (name, difficulty, options) and task.data_seed only, never on
        # the trial seed: every seed, and every arm that leaves task.* alone, is evaluated on the same problems.
        self.eval_problems: list[Problem] = self.task.sample(
            "eval", config.eval.n_problems, seed=config.task.data_seed
        )
        self.policy, self.warmstart_report = build_policy(config, self.device, progress=progress)
        self.model = self.policy.model
        self.prm: LearnedPRM | None = None  # the learned PRM (reward.prm.source=learned), trained on the start policy
        self.prm_report: dict[str, Any] = {}
        if "prm" in config.reward.components and config.reward.prm.source == "learned":
            self.prm, self.prm_report = learned_prm_for_trial(
                config, self.policy, self.task, self.warmstart_report, device=self.device, progress=progress
            )
        self.ref_model: nn.Module | None = None
        if config.kl.placement != "none":
            self.ref_model = copy.deepcopy(self.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.critic: Critic | None = Critic(self.model).to(self.device) if config.critic.enabled else None
        o = config.optim
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": o.lr}]
        if self.critic is not None:
            groups.append({"params": list(self.critic.parameters()), "lr": config.critic_lr})
        self.optimizer = torch.optim.AdamW(groups, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
        warm = o.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0
        )
        self.beta = config.kl.beta
        self.tokens_so_far = 0
        self.samples_so_far = 0
        self.components = reward_components(config)
        # One epoch of one minibatch is on-policy: the behaviour log-probs equal the update's own
        # (detached) log-probs, so the extra forward that computes them is skipped (as TRL does).
        # KL needs them (in the reward, and for the policy/kl_ref metric), so it keeps the forward.
        self.on_policy = config.algo.ppo_epochs == 1 and config.algo.minibatches == 1 and config.kl.placement == "none"

    # ---------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "critic": None if self.critic is None else self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "beta": self.beta,
            "tokens_so_far": self.tokens_so_far,
            "samples_so_far": self.samples_so_far,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.critic is not None and state["critic"] is not None:
            self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.beta = state["beta"]
        self.tokens_so_far = state["tokens_so_far"]
        self.samples_so_far = state["samples_so_far"]

    # ---------------------------------------------------------------- pieces of a step

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def sample_batch(self, step: int, round_: int, n_prompts: int) -> StepBatch:
        """Roll out and score ``n_prompts`` prompts × G completions (one sampling round)."""
        c = self.config
        gen_cpu = _generator(torch.device("cpu"), c.seed, "prompts", step, round_)
        idx = torch.randint(len(self.train_pool), (n_prompts,), generator=gen_cpu).tolist()
        problems = [self.train_pool[i] for i in idx]
        gen = _generator(self.device, c.seed, "rollout", step, round_)
        with self._autocast():
            r = generate_rollouts(
                self.policy,
                [p.prompt for p in problems],
                group_size=c.rollout.group_size,
                max_new_tokens=c.rollout.max_new_tokens,
                temperature=c.rollout.temperature,
                top_p=c.rollout.top_p,
                generator=gen,
                compute_old_logp=not self.on_policy,
            )
        self._rollout_timing = r.timing
        grades = [self.task.grade(problems[g], text) for g, text in zip(r.group_ids.tolist(), r.texts)]
        ref_logp = None
        if self.ref_model is not None:
            with torch.no_grad(), self._autocast():
                ref_logp = token_logprobs(
                    self.ref_model, r.input_ids, r.attention_mask,
                    num_prompt_tokens=r.num_prompt_tokens, temperature=r.logp_temperature,
                )
        extra: dict[str, object] = {}
        if self.prm is not None:
            with self._autocast():
                extra["prm_scores"] = self.prm.score(
                    r.input_ids, r.attention_mask, r.num_prompt_tokens, grades, r.offsets, r.mask
                )
        ctx = RewardContext(
            mask=r.mask,
            grades=grades,
            offsets=r.offsets,
            truncated=r.truncated,
            logp=r.old_logp,
            ref_logp=ref_logp,
            generator=_generator(torch.device("cpu"), c.seed, "reward", step, round_),
            extra=extra,
        )
        comps = {k: (w, dict(o, beta=self.beta) if k == "kl" else o) for k, (w, o) in self.components.items()}
        token_rewards, parts = compute_token_rewards(ctx, comps)
        # Process-style estimators normalize rewards at step ends; every position that carries a
        # reward (the last token for sequence-level components) counts as one.
        step_mask = step_mask_from_grades(ctx)
        last = torch.zeros_like(r.mask)
        lengths = r.lengths
        has = lengths > 0
        last[has, (lengths[has] - 1)] = 1.0
        step_mask = ((step_mask + last + (token_rewards != 0).float()) > 0).float() * r.mask
        return StepBatch(
            prompt_ids=r.prompt_ids,
            prompt_mask=r.prompt_mask,
            completion_ids=r.completion_ids,
            mask=r.mask,
            old_logp=r.old_logp,
            group_ids=r.group_ids,
            truncated=r.truncated,
            token_rewards=token_rewards,
            step_mask=step_mask,
            parts=parts,
            grades=grades,
            texts=r.texts,
            prompts=[p.prompt for p in problems],
            ref_logp=ref_logp,
        )

    def collect(self, step: int) -> tuple[StepBatch, dict[str, float]]:
        """One step's batch, with DAPO dynamic sampling when enabled."""
        c = self.config
        want = c.rollout.prompts_per_step
        batch = self.sample_batch(step, 0, want)
        rounds, sampled_groups = 1, want
        stats = {"tokens": float(batch.mask.sum()), "samples": float(batch.mask.shape[0])}
        if not c.algo.dynamic_sampling:
            return batch, {**stats, "kept_groups_frac": 1.0, "sample_rounds": 1.0}
        kept: list[StepBatch] = []
        have = 0
        current = batch
        while True:
            seq_reward = current.token_rewards.sum(dim=1)
            keep = []
            for g in range(len(current.prompts)):
                vals = seq_reward[current.group_ids == g]
                if vals.numel() > 1 and float(vals.max() - vals.min()) > 1e-8:
                    keep.append(g)
            keep = keep[: want - have]
            if keep:
                kept.append(current.select_groups(keep))
                have += len(keep)
            if have >= want or rounds > c.algo.max_resample_rounds:
                break
            current = self.sample_batch(step, rounds, want)
            rounds += 1
            sampled_groups += want
            stats["tokens"] += float(current.mask.sum())
            stats["samples"] += float(current.mask.shape[0])
        if not kept:  # nothing had variance: train on the first round (all advantages are 0)
            kept = [batch]
            have = want
        out = StepBatch.concat(kept, self.policy.pad_token_id)
        return out, {**stats, "kept_groups_frac": have / sampled_groups, "sample_rounds": float(rounds)}

    def _minibatches(self, n: int, step: int, epoch: int) -> list[torch.Tensor]:
        c = self.config
        # a group may be split across minibatches: the step totals of prompt-mean handle that
        perm = torch.randperm(n, generator=_generator(torch.device("cpu"), c.seed, "perm", step, epoch))
        k = min(c.algo.minibatches, n)
        return [chunk.to(self.device) for chunk in torch.tensor_split(perm, k)]

    def update(self, batch: StepBatch, step: int) -> dict[str, float]:
        """PPO epochs over minibatches of ``batch``; returns the update's metrics."""
        c = self.config
        loss_mask = batch.mask
        if c.reward.overlong_filter:
            loss_mask = batch.mask * (~batch.truncated).to(batch.mask.dtype).unsqueeze(1)
        input_ids, attn, p = batch.input_ids, batch.attention_mask, batch.num_prompt_tokens
        old_values = None
        if self.critic is not None:
            with torch.no_grad(), self._autocast():
                old_values = self.critic(input_ids, attn, p).float()
        adv, returns = compute_advantages(
            batch.token_rewards, loss_mask, batch.group_ids,
            estimator=c.algo.advantage, values=old_values, gamma=c.algo.gamma, lam=c.algo.lam,
            step_mask=batch.step_mask, whiten=c.algo.whiten,
        )
        _check_finite(adv, "advantages", step)
        metrics: dict[str, list[float]] = {}

        def add(name: str, value: float) -> None:
            metrics.setdefault(name, []).append(float(value))

        temperature = c.rollout.temperature
        ent_sum, ent_count = 0.0, 0.0  # entropy of the behaviour policy, from the first epoch's forwards
        self.model.train()
        if self.critic is not None:
            self.critic.train()
        for epoch in range(c.algo.ppo_epochs):
            for rows in self._minibatches(input_ids.shape[0], step, epoch):
                mb_mask = loss_mask[rows]
                totals = step_totals(mb_mask, batch.group_ids[rows])
                self.optimizer.zero_grad(set_to_none=True)
                parts = {"policy": 0.0, "entropy": 0.0, "kl": 0.0, "value": 0.0, "total": 0.0}
                positions = torch.arange(rows.numel())
                for pos in torch.tensor_split(positions, min(c.algo.grad_accum, rows.numel())):
                    micro = rows[pos.to(rows.device)]
                    m_mask = loss_mask[micro]
                    agg = dict(group_ids=batch.group_ids[micro], max_len=c.loss_max_len, **totals.for_rows(pos))
                    with self._autocast():
                        logp, entropy = token_logprobs_and_entropy(
                            self.model, input_ids[micro], attn[micro], num_prompt_tokens=p, temperature=temperature
                        )
                    per_token, m = policy_loss(
                        logp, logp.detach() if batch.old_logp is None else batch.old_logp[micro], adv[micro], m_mask,
                        ratio_level=c.loss.ratio_level, surrogate=c.loss.surrogate,
                        clip_low=c.loss.clip_low, clip_high=c.loss.clip_high, dual_clip=c.loss.dual_clip,
                        tau_pos=c.loss.sapo_tau_pos, tau_neg=c.loss.sapo_tau_neg,
                        cispo_lower_bound=c.loss.cispo_lower_bound,
                    )
                    pg = aggregate_loss(per_token, m_mask, c.loss.aggregation, **agg)
                    ent = aggregate_loss(entropy, m_mask, c.loss.aggregation, **agg)
                    loss = pg - c.loss.entropy_coef * ent
                    kl_term = torch.zeros((), device=self.device)
                    if c.kl.placement == "loss":
                        kl_t = kl_penalty(logp, batch.ref_logp[micro], estimator=c.kl_estimator, mask=m_mask)
                        kl_term = aggregate_loss(kl_t, m_mask, c.loss.aggregation, **agg)
                        loss = loss + self.beta * kl_term
                    vf = torch.zeros((), device=self.device)
                    if self.critic is not None:
                        with self._autocast():
                            v = self.critic(input_ids[micro], attn[micro], p).float()
                        vf_t = value_loss(v, old_values[micro], returns[micro], m_mask, clip=c.critic.value_clip)
                        vf = aggregate_loss(vf_t, m_mask, "token-mean", num_tokens=totals.num_tokens)
                        loss = loss + c.critic.vf_coef * vf
                    _check_finite(loss.detach(), "loss", step)
                    loss.backward()
                    parts["policy"] += float(pg.detach())
                    parts["entropy"] += float(ent.detach())
                    parts["kl"] += float(kl_term.detach())
                    parts["value"] += float(vf.detach())
                    parts["total"] += float(loss.detach())
                    for k, v in m.items():
                        add("policy/" + k, v)
                    if epoch == 0:
                        ent_sum += float((entropy.detach() * m_mask).sum())
                        ent_count += float(m_mask.sum())
                params = [q for g in self.optimizer.param_groups for q in g["params"]]
                max_norm = c.optim.max_grad_norm if c.optim.max_grad_norm is not None else float("inf")
                grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
                _check_finite(grad_norm, "gradient norm", step)
                self.optimizer.step()
                self.scheduler.step()
                add("optim/grad_norm", float(grad_norm))
                for k, v in parts.items():
                    add("loss/" + k, v)
        self.model.eval()
        out = {k: _mean(v) for k, v in metrics.items()}
        with torch.no_grad():
            out["adv/mean"] = float(masked_mean(adv, loss_mask))
            out["adv/std"] = float(masked_mean((adv - masked_mean(adv, loss_mask)) ** 2, loss_mask).sqrt())
            out["policy/entropy"] = ent_sum / max(ent_count, 1.0)
            if old_values is not None:
                var_r = masked_mean((returns - masked_mean(returns, loss_mask)) ** 2, loss_mask)
                resid = returns - old_values
                var_e = masked_mean((resid - masked_mean(resid, loss_mask)) ** 2, loss_mask)
                out["critic/value_mean"] = float(masked_mean(old_values, loss_mask))
                out["critic/explained_variance"] = float(1.0 - var_e / var_r) if var_r > 0 else float("nan")
        out["optim/lr"] = float(self.optimizer.param_groups[0]["lr"])
        return out

    def rollout_metrics(self, batch: StepBatch) -> dict[str, float]:
        out: dict[str, float] = {}
        seq = batch.token_rewards.sum(dim=1)
        out["reward/total"] = float(seq.mean())
        for name, part in batch.parts.items():
            out[f"reward/{name}"] = float(part.sum(dim=1).mean())
        correct = torch.tensor([g.answer_correct for g in batch.grades], dtype=torch.bool)
        lengths = batch.mask.sum(dim=1).cpu()
        out["reward/accuracy"] = float(correct.float().mean())
        out["reward/format_rate"] = _mean([float(g.format_ok) for g in batch.grades])
        out["reward/step_accuracy"] = _mean([g.step_accuracy for g in batch.grades])
        out["response/length"] = float(lengths.mean())
        out["response/length_correct"] = float(lengths[correct].mean()) if correct.any() else float("nan")
        out["response/length_incorrect"] = float(lengths[~correct].mean()) if (~correct).any() else float("nan")
        out["response/truncated_frac"] = float(batch.truncated.float().mean())
        if batch.ref_logp is not None:
            k1 = kl_penalty(batch.old_logp, batch.ref_logp, estimator="k1", mask=batch.mask)
            out["policy/kl_ref"] = float((k1 * batch.mask).sum(dim=1).mean())
        return out

    def evaluate(self, step: int) -> tuple[dict[str, float], list[ProblemRecord]]:
        """Evaluate the policy on the eval problems: the ``eval/*`` metrics and one record per problem
        (``records[i]`` is ``self.eval_problems[i]``)."""
        c = self.config
        with self._autocast():
            m, records = evaluate_with_records(
                self.policy, self.task, self.eval_problems,
                max_new_tokens=c.rollout.max_new_tokens,
                pass_k=c.eval.pass_k,
                temperature=c.rollout.temperature,
                top_p=c.rollout.top_p,
                generator=_generator(self.device, c.seed, "eval", step),
                greedy=c.eval.greedy,
            )
        out = {
            "eval/accuracy": m["accuracy"],
            "eval/step_accuracy": m["step_accuracy"],
            "eval/format_rate": m["format_rate"],
            "eval/partial": m["partial"],
            "eval/length": m["mean_length"],
            "eval/truncated_frac": m["truncated_rate"],
        }
        if c.eval.pass_k > 1:
            out[f"eval/pass_at_{c.eval.pass_k}"] = m[f"pass@{c.eval.pass_k}"]  # MLflow metric names allow no "@"
        return out, records

    def step(self, step: int) -> tuple[dict[str, float], StepBatch]:
        """Run RL step ``step`` (1-based): collect, score, update. Returns its metrics and batch."""
        c = self.config
        t0 = time.perf_counter()
        batch, data = self.collect(step)
        _check_finite(batch.token_rewards, "rewards", step)
        t1 = time.perf_counter()
        metrics = self.rollout_metrics(batch)
        t2 = time.perf_counter()
        metrics.update(self.update(batch, step))
        t3 = time.perf_counter()
        self.tokens_so_far += int(data["tokens"])
        self.samples_so_far += int(data["samples"])
        if c.kl.adaptive and "policy/kl_ref" in metrics:
            error = max(-0.2, min(0.2, metrics["policy/kl_ref"] / c.kl.target - 1.0))
            self.beta *= 1.0 + error * batch.mask.shape[0] / c.kl.horizon
        timing = getattr(self, "_rollout_timing", {})
        metrics.update({
            "data/kept_groups_frac": data["kept_groups_frac"],
            "data/sample_rounds": data["sample_rounds"],
            "kl/beta": float(self.beta),
            "compute/tokens": float(self.tokens_so_far),
            "compute/samples": float(self.samples_so_far),
            "perf/rollout_s": t1 - t0,
            "perf/reward_s": t2 - t1,
            "perf/update_s": t3 - t2,
            "perf/rollout_tokens_per_s": float(timing.get("tokens", 0.0)) / max(timing.get("generate_s", 0.0), 1e-9),
        })
        return metrics, batch


def _sample_table(batch: StepBatch, limit: int = 16) -> list[dict[str, Any]]:
    rows = []
    for i in range(min(limit, len(batch.texts))):
        g = int(batch.group_ids[i])
        rows.append({
            "prompt": batch.prompts[g],
            "completion": batch.texts[i],
            "correct": bool(batch.grades[i].answer_correct),
            **{f"reward/{k}": float(v[i].sum()) for k, v in batch.parts.items()},
        })
    return rows


CHECKPOINT_FILE = "trainer.pt"


def run_trial(
    config: TrialConfig,
    log: LogFn | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    stop_after: int | None = None,
) -> TrialResult:
    """Train and evaluate one trial.

    Args:
        config: the fully resolved trial configuration (its seed included).
        log: called as ``log(metrics, step)`` after every logged step and evaluation; step 0 is the
            evaluation of the start policy. Metric names: :data:`METRICS`.
        workdir: where checkpoints go (``<workdir>/trainer.pt``); a checkpoint found there is resumed
            from. None: no checkpoints.
        progress: show a progress bar.
        stop_after: stop after this many steps of this call (for tests of resumption).

    Returns:
        The :class:`TrialResult`; ``history`` includes the steps logged before a resume.

    Raises:
        NonFiniteError: a NaN or inf in the loss, rewards, advantages or gradients.
    """
    start_time = time.perf_counter()
    c = config
    trainer = Trainer(c, progress=progress)
    history: list[tuple[int, dict[str, float]]] = []
    eval_rows: list[dict[str, Any]] = []
    start_step = 1
    resumed_from = None
    ckpt_path = Path(workdir) / CHECKPOINT_FILE if workdir is not None else None
    if ckpt_path is not None and ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=trainer.device, weights_only=False)
        if state["key"] != c.trial_key():
            raise RuntimeError(f"{ckpt_path} belongs to trial {state['key']}, not {c.trial_key()}")
        trainer.load_state_dict(state["trainer"])
        history = [(int(s), dict(m)) for s, m in state["history"]]
        eval_rows = [dict(r) for r in state.get("eval_problems", [])]  # absent in checkpoints of older versions
        start_step = state["step"] + 1
        resumed_from = state["step"]

    def emit(metrics: dict[str, float], step: int) -> None:
        history.append((step, metrics))
        if log is not None:
            log(metrics, step)

    if start_step == 1:
        t = time.perf_counter()
        m, records = trainer.evaluate(0)
        eval_rows += eval_problem_rows(0, records)
        m["perf/eval_s"] = time.perf_counter() - t
        m["compute/tokens"] = 0.0
        m["compute/samples"] = 0.0
        emit(m, 0)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=c.train.steps, initial=start_step - 1, desc=f"trial {c.trial_key()}", unit="step")
    last_batch = None
    done = 0
    step = start_step - 1
    for step in range(start_step, c.train.steps + 1):
        t0 = time.perf_counter()
        metrics, last_batch = trainer.step(step)
        metrics["perf/eval_s"] = 0.0
        if (c.eval.every and step % c.eval.every == 0) or step == c.train.steps:
            t = time.perf_counter()
            m, records = trainer.evaluate(step)
            metrics.update(m)
            eval_rows += eval_problem_rows(step, records)
            metrics["perf/eval_s"] = time.perf_counter() - t
        metrics["perf/step_s"] = time.perf_counter() - t0
        if step % c.train.log_every == 0 or "eval/accuracy" in metrics:
            emit(metrics, step)
        if bar is not None:
            bar.update(1)
            last_acc = next((m["eval/accuracy"] for _, m in reversed(history) if "eval/accuracy" in m), float("nan"))
            bar.set_postfix(reward=f"{metrics['reward/total']:.3f}", eval_acc=f"{last_acc:.3f}")
        done += 1
        if ckpt_path is not None and c.train.checkpoint_every and (
            step % c.train.checkpoint_every == 0 or (stop_after is not None and done >= stop_after)
        ):
            ckpt_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = ckpt_path.with_suffix(".tmp")
            torch.save({"key": c.trial_key(), "step": step, "trainer": trainer.state_dict(), "history": history,
                        "eval_problems": eval_rows}, tmp)
            os.replace(tmp, ckpt_path)
        if stop_after is not None and done >= stop_after:
            break
    if bar is not None:
        bar.close()

    final: dict[str, float] = {}
    for _, m in history:
        final.update(m)
    return TrialResult(
        key=c.trial_key(),
        steps=step,
        final=final,
        history=history,
        seconds=time.perf_counter() - start_time,
        resumed_from=resumed_from,
        warmstart=trainer.warmstart_report,
        samples=_sample_table(last_batch) if last_batch is not None else [],
        learned_prm=dict(trainer.prm_report),
        eval_problems=eval_rows,
    )

