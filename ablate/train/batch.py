"""One RL step's batch: sampling rounds (rollout, grading, reference log-probs, scoring) and DAPO's
dynamic sampling, which keeps sampling until enough groups have reward variance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ablate.models.logprobs import token_logprobs
from ablate.models.rollout import PromptCompletionLayout, Rollout, generate_rollouts
from ablate.tasks import Grade, Problem
from ablate.train.scoring import score_rollout
from ablate.train.seeds import seeded_generator, trial_stream
from ablate.train.setup import TrialState, autocast, rollout_autocast

if TYPE_CHECKING:
    from ablate.config import TrialConfig


@dataclass(frozen=True)
class RolloutTiming:
    """Seconds and tokens of the sampling that made a batch (summed over its sampling rounds).

    Attributes:
        generate_s: seconds of prefill and decode loops.
        logprob_s: seconds of the behaviour log-prob forwards (0 when the update is on-policy).
        tokens: generated tokens (mask sums).
    """

    generate_s: float = 0.0
    logprob_s: float = 0.0
    tokens: float = 0.0

    @staticmethod
    def of(r: Rollout) -> RolloutTiming:
        """The timing of one rollout (from ``Rollout.timing``)."""
        return RolloutTiming(r.timing["generate_s"], r.timing["logprob_s"], r.timing["tokens"])

    def __add__(self, other: RolloutTiming) -> RolloutTiming:
        return RolloutTiming(
            self.generate_s + other.generate_s, self.logprob_s + other.logprob_s, self.tokens + other.tokens
        )

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of sampling (``perf/rollout_tokens_per_s``)."""
        return self.tokens / max(self.generate_s, 1e-9)


def _pad_cat(tensors: list[torch.Tensor], value: float, left: bool) -> torch.Tensor:
    """Concatenate [N_i, W_i] tensors along rows, padding each to the widest with ``value`` (left or right)."""
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
    """The scored rollouts of one RL step. Tensors are [B, P] (prompt) or [B, T] (completion).

    Attributes:
        prompt_ids, prompt_mask: [B, P] left-padded prompts; completion_ids, mask: [B, T] completions.
        old_logp: [B, T] behaviour log-probs as the rollout computed them (in ``rollout.dtype``), or None
            when the update is on-policy.
        group_ids: [B] index into ``prompts``; truncated: [B] bool, no EOS within the length limit.
        token_rewards: [B, T] summed weighted rewards; parts: each component's weighted [B, T] part.
        step_mask: [B, T] 1.0 at step ends (see :func:`ablate.train.scoring.reward_step_mask`).
        grades, texts: one per row; prompts: one per group.
        ref_logp: [B, T] reference log-probs, or None without a KL term.
        timing: the sampling time of the rounds that made the batch.
        pool_ids: one per group: its problem's index into the trial's ``train_pool``.
    """

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
    grades: list[Grade]
    texts: list[str]
    prompts: list[str]
    ref_logp: torch.Tensor | None = None
    timing: RolloutTiming = field(default_factory=RolloutTiming)
    pool_ids: list[int] = field(default_factory=list)

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
            timing=self.timing,
            pool_ids=[self.pool_ids[g] for g in keep] if self.pool_ids else [],
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

        def right(name: str) -> torch.Tensor:
            return _pad_cat([getattr(b, name) for b in batches], 0.0, left=False)

        return StepBatch(
            prompt_ids=_pad_cat([b.prompt_ids for b in batches], pad_id, left=True),
            prompt_mask=_pad_cat([b.prompt_mask for b in batches], 0, left=True),
            completion_ids=_pad_cat([b.completion_ids for b in batches], pad_id, left=False),
            mask=right("mask"),
            old_logp=None if batches[0].old_logp is None else right("old_logp"),
            group_ids=torch.cat([b.group_ids + o for b, o in zip(batches, offsets)]),
            truncated=torch.cat([b.truncated for b in batches]),
            token_rewards=right("token_rewards"),
            step_mask=right("step_mask"),
            parts={k: _pad_cat([b.parts[k] for b in batches], 0.0, left=False) for k in batches[0].parts},
            grades=[g for b in batches for g in b.grades],
            texts=[t for b in batches for t in b.texts],
            prompts=[p for b in batches for p in b.prompts],
            ref_logp=None if batches[0].ref_logp is None else right("ref_logp"),
            timing=sum((b.timing for b in batches[1:]), batches[0].timing),
            pool_ids=[i for b in batches for i in b.pool_ids],
        )


@dataclass(frozen=True)
class CollectStats:
    """What collecting one step's batch cost and kept.

    Attributes:
        tokens: generated tokens of every sampling round (kept or not); samples: completions sampled.
        kept_groups_frac: groups kept / groups sampled (1.0 without dynamic sampling or the zero-variance
            filter; with the filter, the groups with reward variance / those sampled).
        sample_rounds: sampling rounds run (1 without dynamic sampling).
    """

    tokens: float
    samples: float
    kept_groups_frac: float
    sample_rounds: float


def _draw_problems(state: TrialState, step: int, round_: int, n_prompts: int) -> tuple[list[Problem], list[int]]:
    """``n_prompts`` problems drawn with replacement from the training pool (``state.pool``), seeded by
    ``(seed, "prompts", step, round_)``; and their indices into ``state.train_pool``."""
    gen = seeded_generator(torch.device("cpu"), *trial_stream(state.config), "prompts", step, round_)
    idx = torch.randint(len(state.pool), (n_prompts,), generator=gen).tolist()
    ids = [state.pool[i] for i in idx]
    return [state.train_pool[i] for i in ids], ids


def _reference_logp(state: TrialState, r: Rollout) -> torch.Tensor | None:
    """[B, T] log-probs of the sampled tokens under the reference model (None without one)."""
    if state.ref_model is None:
        return None
    with torch.no_grad(), autocast(state):
        return token_logprobs(
            state.ref_model, r.input_ids, r.attention_mask,
            num_prompt_tokens=r.num_prompt_tokens, temperature=r.logp_temperature,
        )


def sample_round(state: TrialState, step: int, round_: int, n_prompts: int) -> StepBatch:
    """Roll out, grade and score ``n_prompts`` prompts × G completions (one sampling round of ``step``)."""
    c = state.config
    problems, pool_ids = _draw_problems(state, step, round_, n_prompts)
    with rollout_autocast(state):  # rollout.dtype: the trainer's precision unless set
        r = generate_rollouts(
            state.policy,
            [p.prompt for p in problems],
            group_size=c.rollout.group_size,
            max_new_tokens=c.rollout.max_new_tokens,
            temperature=c.rollout.temperature,
            top_p=c.rollout.top_p,
            generator=seeded_generator(state.device, *trial_stream(c), "rollout", step, round_),
            compute_old_logp=not state.on_policy,
            behaviour_logp=c.rollout.behaviour_logp,
            cuda_graph=c.rollout.cuda_graph,
        )
    grades = [state.task.grade(problems[g], text) for g, text in zip(r.group_ids.tolist(), r.texts)]
    ref_logp = _reference_logp(state, r)
    token_rewards, parts, step_mask = score_rollout(state, r, grades, ref_logp, step, round_)
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
        timing=RolloutTiming.of(r),
        pool_ids=pool_ids,
    )


def truncated_leave_statistics(config: TrialConfig) -> bool:
    """Whether truncated completions leave the group statistics of the advantages as well as the loss:
    ``reward.overlong_filter`` with ``overlong_baseline: exclude`` (with ``include``, DAPO's semantics,
    they stay in the statistics and leave only the loss)."""
    return config.reward.overlong_filter and config.reward.overlong_baseline == "exclude"


def filter_rows(config: TrialConfig, batch: StepBatch) -> torch.Tensor:
    """[B] bool: the rows whose rewards the zero-variance filters judge (``algo.filter_on``): under
    ``used`` the rows whose rewards enter the advantages (:func:`truncated_leave_statistics`), under
    ``all`` every row."""
    rows = torch.ones(batch.group_ids.shape[0], dtype=torch.bool, device=batch.group_ids.device)
    if config.algo.filter_on == "used" and truncated_leave_statistics(config):
        rows = rows & ~batch.truncated.to(rows.device)
    return rows


def groups_with_variance(batch: StepBatch, rows: torch.Tensor | None = None) -> list[int]:
    """The groups of ``batch`` whose sequence rewards are not all equal (more than 1e-8 apart), over
    the ``rows`` [B] bool given (default every row): a group that is constant on them gets advantage 0."""
    seq_reward = batch.token_rewards.sum(dim=1)  # (B,)
    keep = []
    for g in range(len(batch.prompts)):
        member = batch.group_ids == g
        vals = seq_reward[member if rows is None else member & rows.to(member.device)]
        if vals.numel() > 1 and float(vals.max() - vals.min()) > 1e-8:
            keep.append(g)
    return keep


def collect_batch(state: TrialState, step: int) -> tuple[StepBatch, CollectStats]:
    """One step's batch of ``rollout.prompts_per_step`` groups, with DAPO dynamic sampling or ScaleRL's
    zero-variance filter when enabled.

    The zero-variance filter keeps the groups with reward variance and samples nothing more (a step
    where no group has variance keeps them all: every advantage is 0); ``kept_groups_frac`` is the
    fraction with variance.

    Dynamic sampling keeps only groups with reward variance and samples further rounds (at most
    ``algo.max_resample_rounds`` more) until ``prompts_per_step`` groups are kept; when no group of any
    round had variance, the first round is used as it is (all its advantages are 0).
    """
    c = state.config
    want = c.rollout.prompts_per_step
    batch = sample_round(state, step, 0, want)
    tokens, samples = float(batch.mask.sum()), float(batch.mask.shape[0])
    if c.algo.zero_variance_filter:  # ScaleRL: drop, never refill
        keep = groups_with_variance(batch, filter_rows(c, batch))
        if keep and len(keep) < want:
            batch = batch.select_groups(keep)
        return batch, CollectStats(tokens, samples, len(keep) / want, 1.0)
    if not c.algo.dynamic_sampling:
        return batch, CollectStats(tokens, samples, 1.0, 1.0)
    kept: list[StepBatch] = []
    have, rounds, sampled_groups = 0, 1, want
    current, timing = batch, batch.timing
    while True:
        keep = groups_with_variance(current, filter_rows(c, current))[: want - have]
        if keep:
            kept.append(current.select_groups(keep))
            have += len(keep)
        if have >= want or rounds > c.algo.max_resample_rounds:
            break
        current = sample_round(state, step, rounds, want)
        rounds += 1
        sampled_groups += want
        tokens += float(current.mask.sum())
        samples += float(current.mask.shape[0])
        timing = timing + current.timing
    if not kept:  # nothing had variance: train on the first round (all advantages are 0)
        kept, have = [batch], want
    out = StepBatch.concat(kept, state.policy.pad_token_id)
    out.timing = timing  # every round's sampling, kept or not
    return out, CollectStats(tokens, samples, have / sampled_groups, float(rounds))


def drop_solved(state: TrialState, batch: StepBatch) -> int:
    """ScaleRL's no-positive-resampling: remove from ``state.pool`` every prompt of ``batch`` whose group
    answered at least ``algo.drop_solved_at`` of its completions correctly (its pass rate this step);
    the pool's last prompt always stays. Returns how many prompts left the pool."""
    threshold = state.config.algo.drop_solved_at
    if threshold is None or not batch.pool_ids:
        return 0
    correct = torch.tensor([float(g.answer_correct) for g in batch.grades])  # (B,)
    gids = batch.group_ids.cpu()
    removed = 0
    for g, pool_id in enumerate(batch.pool_ids):
        members = correct[gids == g]
        if members.numel() and float(members.mean()) >= threshold and pool_id in state.pool and len(state.pool) > 1:
            state.pool.remove(pool_id)
            removed += 1
    return removed
