"""The ``learned`` process reward model: a step classifier on the policy's architecture.

A realistic PRM is trained, not exact. :func:`train_learned_prm` builds one like the PRMs of Lightman
et al. (2024, "Let's Verify Step by Step": a language model fine-tuned to classify each step, read at
the step's last token), at toy scale and with the task's oracle in place of human labellers:

1. sample completions from the start policy (the warm start) at temperature 1 on train problems, so
   that both correct and incorrect steps occur;
2. label every reasoning step found with the task's oracle step checker (``Grade.steps[k].correct``);
3. train a binary classifier — a copy of the policy's backbone (initialised from the policy) with a
   linear head on the hidden state of each step's last token: first the head alone, as a logistic
   regression on the frozen features (a linear probe), then everything with binary cross-entropy
   (LP-FT, Kumar et al. 2022: a probe-initialised head keeps fine-tuning from wrecking the
   features, and learns far faster when correct steps are rare);
4. measure it on held-out draws (all completions of a fifth of the sampled problems are kept out):
   accuracy at threshold 1/2, ROC AUC and log loss of the step labels, next to the majority-class
   baseline (a constant: AUC 1/2) and the base-rate prior's log loss.

The trained PRM is cached on disk like the warm start (:mod:`ablate.train.warmstart`), keyed by
:meth:`LearnedPRMSpec.key` (the start policy's identity, the task, every PRM setting and the seed):
a builder holds a file lock, writes into a temporary folder and renames it into place, so that
several processes asking for the same PRM build it once and never read a half-written one.

During RL the trainer calls :meth:`LearnedPRM.score` on every rollout batch and passes the per-step
probabilities to the ``prm`` reward component as ``ctx.extra["prm_scores"]``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ablate.cache import spec_dict, spec_key
from ablate.config.schema import task_options
from ablate.errors import AblateError
from ablate.models.heads import BackboneHead
from ablate.rewards.base import step_end_tokens

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.models import Policy
    from ablate.tasks import Grade, Task

#: Bump when the procedure changes in a way that changes its result (invalidates the cache).
FORMAT_VERSION = 1
#: File names inside a cache entry ``<cache_dir>/prm/<key>/``.
WEIGHTS_FILE = "prm.pt"
REPORT_FILE = "report.json"
SPEC_FILE = "spec.json"


@dataclass(frozen=True)
class LearnedPRMSpec:
    """Everything that determines a learned PRM (and so its cache key).

    Attributes:
        policy: identity of the start policy: ``"warmstart:<key>"`` for a warm start, else a
            fingerprint of its weights (:func:`policy_fingerprint`).
        task: registered task name.
        difficulty: the task's difficulty (None: its default).
        task_options: the task's options.
        task_seed: the task's seed (its split partition and problem stream).
        samples: completions sampled to make the training data (held-out ones included).
        group_size: completions per sampled problem.
        max_new_tokens: generation limit of the samples.
        temperature: sampling temperature (1: the policy's own distribution, errors included).
        steps: fine-tuning steps of the whole classifier after the linear probe (0: probe only).
        batch_size: completions per optimizer step.
        lr: AdamW learning rate.
        heldout_fraction: fraction of the sampled problems whose completions are held out.
        seed: seed of the problem draw, the sampling and the data order.
    """

    policy: str
    task: str
    difficulty: int | None = None
    task_options: Mapping[str, Any] = field(default_factory=dict)
    task_seed: int = 0
    samples: int = 2048
    group_size: int = 4
    max_new_tokens: int = 48
    temperature: float = 1.0
    steps: int = 200
    batch_size: int = 64
    lr: float = 3e-4
    heldout_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        for name in ("samples", "group_size", "max_new_tokens", "batch_size"):
            if int(getattr(self, name)) < 1:
                problems.append(f"reward.prm: learned PRM setting {name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            problems.append(f"reward.prm.learned_steps must be >= 0, got {self.steps}")
        if self.lr <= 0:
            problems.append(f"reward.prm.learned_lr must be > 0, got {self.lr}")
        if not 0.0 < self.heldout_fraction < 1.0:
            problems.append(f"learned PRM heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if self.temperature <= 0:
            problems.append(f"learned PRM sampling temperature must be > 0, got {self.temperature}")
        if problems:
            raise AblateError("; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-able data (task options sorted)."""
        return spec_dict(self)

    def key(self) -> str:
        """Stable cache key: 16 hex digits of SHA-256 of the canonical JSON of the spec and format version."""
        return spec_key(self, FORMAT_VERSION)


@dataclass
class LearnedPRMReport:
    """How a learned PRM was built and how well it classifies held-out steps.

    Attributes:
        key: the spec's cache key.
        completions: completions sampled (train and held-out).
        train_steps_labelled / heldout_steps_labelled: labelled reasoning steps in each part.
        train_positive_rate / heldout_positive_rate: fraction of correct steps in each part.
        heldout_accuracy: accuracy of ``p >= 1/2`` on held-out steps.
        heldout_auc: ROC AUC of the held-out step scores (NaN when one class is absent).
        train_auc: ROC AUC on the training steps (with ``heldout_auc``: fit versus generalisation).
        probe_heldout_auc: held-out ROC AUC of the linear probe alone, before fine-tuning.
        majority_accuracy: held-out accuracy of always predicting the training majority class.
        heldout_log_loss: mean binary cross-entropy (nats) of the held-out step probabilities.
        prior_log_loss: the same for the constant prediction ``train_positive_rate`` (the baseline
            that knows only how often steps are correct).
        final_loss: mean training BCE of the last tenth of the fine-tuning steps (NaN without any).
        sample_seconds / train_seconds / seconds: time sampling, training, and in all.
        history: ``{"step", "loss"}`` (mean BCE since the previous entry), ten entries.
        cached: whether this came from the cache; path: the cache entry.
    """

    key: str
    completions: int
    train_steps_labelled: int
    heldout_steps_labelled: int
    train_positive_rate: float
    heldout_positive_rate: float
    heldout_accuracy: float
    heldout_auc: float
    train_auc: float
    probe_heldout_auc: float
    majority_accuracy: float
    heldout_log_loss: float
    prior_log_loss: float
    final_loss: float
    sample_seconds: float
    train_seconds: float
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    cached: bool = False
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# pure helpers


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: the probability that a random positive outscores a random negative.

    Computed from ranks (Mann-Whitney U / (n_pos * n_neg)), ties counted as one half.

    Returns:
        The AUC in [0, 1], or NaN when ``labels`` lack positives or negatives.
    """
    if len(scores) != len(labels):
        raise ValueError(f"roc_auc: {len(scores)} scores but {len(labels)} labels")
    n_pos = sum(1 for y in labels if y)
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # average 1-based rank of the tie block
        i = j + 1
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def log_loss(probs: Sequence[float], labels: Sequence[bool], eps: float = 1e-7) -> float:
    """Mean binary cross-entropy in nats, ``-mean(y log p + (1 - y) log(1 - p))``, with ``p`` clipped
    to ``[eps, 1 - eps]``; NaN for no labels."""
    if len(probs) != len(labels):
        raise ValueError(f"log_loss: {len(probs)} probabilities but {len(labels)} labels")
    if not labels:
        return float("nan")
    total = 0.0
    for p, y in zip(probs, labels):
        p = min(max(float(p), eps), 1.0 - eps)
        total -= math.log(p) if y else math.log(1.0 - p)
    return total / len(labels)


def policy_fingerprint(policy: Policy) -> str:
    """A short hash of a policy's name and every parameter and buffer (identity of a non-warm-started policy)."""
    h = hashlib.sha256(policy.name.encode())
    for name, t in sorted(policy.model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return "weights:" + h.hexdigest()[:16]


@dataclass
class _Example:
    """One labelled completion: prompt + completion ids (cut after the last step), the input position
    of each step's last token, their labels, and the index of the problem draw it answers."""

    ids: list[int]
    positions: list[int]
    labels: list[bool]
    draw: int


def _collate(examples: Sequence[_Example], pad_id: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Right-padded ``(ids [B, L], attention [B, L], rows [N], cols [N], labels [N])`` of the steps."""
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(examples), width), dtype=torch.long)
    rows, cols, labels = [], [], []
    for i, e in enumerate(examples):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        attn[i, : len(e.ids)] = 1
        rows += [i] * len(e.positions)
        cols += e.positions
        labels += [float(y) for y in e.labels]
    return (ids.to(device), attn.to(device), torch.tensor(rows, device=device),
            torch.tensor(cols, device=device), torch.tensor(labels, device=device))


# --------------------------------------------------------------------------------------------------
# the model


class LearnedPRM(BackboneHead):
    """A step classifier: the policy's backbone (a copy) and a linear head on each step's last token.

    The logit of a step is read from the hidden state of the step's last token (the state after the
    whole step was read); ``sigmoid(logit)`` is the probability that the step is correct.
    """

    def step_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                    cols: torch.Tensor) -> torch.Tensor:
        """Logits [N] of the steps whose last tokens sit at input positions ``(rows[i], cols[i])``.

        Args:
            input_ids: [B, L]; attention_mask: [B, L].
            rows: [N] long batch rows; cols: [N] long input positions.
        """
        return self.outputs_at(input_ids, attention_mask, rows, cols)

    def score(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        num_prompt_tokens: int,
        grades: Sequence[Grade],
        offsets: Sequence[Sequence[tuple[int, int]]],
        mask: torch.Tensor,
    ) -> list[list[float]]:
        """Probability of correctness of every step of every completion (no grad, eval mode).

        Args:
            input_ids: [B, P + T] prompt block (width P) then completion block, as in a rollout.
            attention_mask: [B, P + T].
            num_prompt_tokens: P.
            grades: B grades; their ``steps`` say where the steps are (never whether they are correct).
            offsets: B lists of per-token character offsets of the completions.
            mask: [B, T] completion mask (its row sums are the active lengths).

        Returns:
            B lists, one probability in [0, 1] per step of ``grades[b].steps``, in order (0.5 for a
            step no sampled token covers: such a step gets no reward anyway).
        """
        lengths = mask.sum(dim=1).long().tolist()
        rows, cols, where = [], [], []
        out: list[list[float]] = []
        for b, (grade, offs) in enumerate(zip(grades, offsets)):
            ends = step_end_tokens(grade, offs, lengths[b])
            out.append([0.5] * len(ends))
            for k, t in enumerate(ends):
                if t >= 0:
                    rows.append(b)
                    cols.append(num_prompt_tokens + t)
                    where.append((b, k))
        if not rows:
            return out
        was_training = self.training
        self.eval()
        device = input_ids.device
        with torch.no_grad():
            logits = self.step_logits(input_ids, attention_mask, torch.tensor(rows, device=device),
                                      torch.tensor(cols, device=device))
        self.train(was_training)
        for (b, k), p in zip(where, torch.sigmoid(logits.float()).tolist()):
            out[b][k] = float(p)
        return out


# --------------------------------------------------------------------------------------------------
# building


def _sample_examples(policy: Policy, task: Task, spec: LearnedPRMSpec, device: torch.device,
                     progress: bool) -> list[_Example]:
    from ablate.models.rollout import generate_rollouts

    n_problems = math.ceil(spec.samples / spec.group_size)
    problems = task.sample("train", n_problems, seed=spec.seed)
    gen = torch.Generator(device=device).manual_seed(spec.seed * 1_000_003 + 17)
    chunk = max(1, 256 // spec.group_size)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_problems * spec.group_size, desc="learned PRM: sampling", unit="completion", leave=False)
    examples: list[_Example] = []
    for start in range(0, n_problems, chunk):
        part = problems[start : start + chunk]
        r = generate_rollouts(policy, [p.prompt for p in part], group_size=spec.group_size,
                              max_new_tokens=spec.max_new_tokens, temperature=spec.temperature, generator=gen,
                              compute_old_logp=False)
        lengths = r.lengths.tolist()
        for b, (g, text) in enumerate(zip(r.group_ids.tolist(), r.texts)):
            grade = task.grade(part[g], text)
            prompt_ids = r.prompt_ids[b][r.prompt_mask[b] > 0].tolist()
            ids = prompt_ids + r.completion_ids[b, : lengths[b]].tolist()
            ends = step_end_tokens(grade, r.offsets[b], lengths[b])
            kept = [(len(prompt_ids) + t, s.correct) for s, t in zip(grade.steps, ends) if t >= 0]
            if kept:  # tokens after the last step cannot change its score: drop them
                ids = ids[: max(c for c, _ in kept) + 1]
            examples.append(_Example(ids, [c for c, _ in kept], [y for _, y in kept], start + g))
        if bar is not None:
            bar.update(len(r.texts))
    if bar is not None:
        bar.close()
    return examples


def _split(examples: list[_Example], spec: LearnedPRMSpec) -> tuple[list[_Example], list[_Example]]:
    """(train, held-out): all G completions of a ``heldout_fraction`` of the problem draws are held out.

    Draws are distinct problems unless the task's train split has fewer problems than were drawn
    (then problems repeat, on both sides, as they do in the RL batches the PRM will score).
    """
    draws = sorted({e.draw for e in examples})
    random.Random(spec.seed).shuffle(draws)
    n_out = max(1, round(spec.heldout_fraction * len(draws))) if len(draws) > 1 else 0
    held = set(draws[:n_out])
    train = [e for e in examples if e.draw not in held and e.positions]
    heldout = [e for e in examples if e.draw in held and e.positions]
    return train, heldout


def _predict(prm: LearnedPRM, examples: list[_Example], pad_id: int, device: torch.device) -> list[float]:
    probs: list[float] = []
    prm.eval()
    with torch.no_grad():
        for start in range(0, len(examples), 256):
            ids, attn, rows, cols, _ = _collate(examples[start : start + 256], pad_id, device)
            probs += torch.sigmoid(prm.step_logits(ids, attn, rows, cols)).tolist()
    return probs


def fit_linear_probe(features: torch.Tensor, labels: torch.Tensor, *, l2: float = 1e-3,
                     max_iter: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """L2-regularised logistic regression, the head's starting point (linear probing before fine-tuning).

    Minimises ``mean BCE(z @ w + b, y) + l2 * |w|^2`` over standardised features ``z`` with L-BFGS, then
    folds the standardisation back, so that ``features @ weight + bias`` gives the same logits.
    Fitting the head on frozen features first and fine-tuning afterwards (LP-FT: Kumar et al., 2022,
    "Fine-Tuning can Distort Pretrained Features") starts fine-tuning from an informative head
    instead of a zero one, which matters when correct steps are rare.

    Args:
        features: [N, H] hidden states (any float dtype; computed in float32).
        labels: [N] 0/1.

    Returns:
        ``(weight [H], bias [])`` in float32, for the raw (unstandardised) features.
    """
    x = features.detach().float()
    y = labels.detach().float()
    mu = x.mean(dim=0)
    sd = x.std(dim=0, unbiased=False).clamp_min(1e-6)
    z = (x - mu) / sd  # (N, H)
    w = torch.zeros(x.shape[1], device=x.device, requires_grad=True)
    prior = float(y.mean().clamp(1e-4, 1 - 1e-4))
    b = torch.tensor(math.log(prior / (1 - prior)), device=x.device, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    weight = (w / sd).detach()
    bias = (b - (w * mu / sd).sum()).detach()
    return weight, bias


def _probe_head(prm: LearnedPRM, train: list[_Example], pad_id: int, device: torch.device) -> None:
    """Set ``prm.head`` to a logistic-regression probe of the frozen backbone's step features."""
    feats, labels = [], []
    prm.eval()
    with torch.no_grad():
        for start in range(0, len(train), 256):
            ids, attn, rows, cols, y = _collate(train[start : start + 256], pad_id, device)
            feats.append(prm.hidden_states(ids, attn)[rows, cols].float())
            labels.append(y)
    weight, bias = fit_linear_probe(torch.cat(feats), torch.cat(labels))
    with torch.no_grad():
        prm.head.weight.copy_(weight.view_as(prm.head.weight))
        prm.head.bias.copy_(bias.view_as(prm.head.bias))


def _check_both_classes(n_completions: int, train_labels: list[bool]) -> None:
    """Raise when the train steps are all correct or all incorrect (nothing to learn)."""
    if len(set(train_labels)) < 2:
        found = (f"all {len(train_labels)} steps found are {'correct' if train_labels[0] else 'incorrect'}"
                 if train_labels else "no reasoning step was found")
        raise AblateError(
            f"reward.prm.source=learned: in the {n_completions} completions sampled from the start policy {found}, "
            "so a step classifier has nothing to learn; warm-start the policy into the band where it is right "
            "some of the time (warmstart.enabled=true, warmstart.target_min), raise reward.prm.learned_samples, "
            "or use reward.prm.source=oracle"
        )


def _fit(prm: LearnedPRM, train: list[_Example], spec: LearnedPRMSpec, pad_id: int, device: torch.device,
         progress: bool) -> tuple[list[float], list[dict[str, float]]]:
    """Train ``prm`` on ``train`` for ``spec.steps`` AdamW steps of ``spec.batch_size`` examples (binary
    cross-entropy of each step's logit; linear warmup then cosine decay; gradient norm clipped at 1).

    Returns:
        ``(loss of every step, history)``: the history holds ``{"step", "loss"}`` (the mean loss of the
        last ``steps // 10`` steps) ten times over the run and at its end.
    """
    optim = torch.optim.AdamW(prm.parameters(), lr=spec.lr, weight_decay=0.0)
    warm = max(1, spec.steps // 10)
    # linear warmup (the probe-initialised head must not be thrown off by the first steps), cosine decay
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim,
        lambda s: min((s + 1) / warm, 0.5 * (1 + math.cos(math.pi * min(s, spec.steps) / max(spec.steps, 1)))),
    )
    order_gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + 29)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=spec.steps, desc="learned PRM: training", unit="step", leave=False)
    perm: list[int] = []
    losses: list[float] = []
    history: list[dict[str, float]] = []
    every = max(1, spec.steps // 10)
    prm.train()
    for step in range(1, spec.steps + 1):
        if len(perm) < min(spec.batch_size, len(train)):
            perm += torch.randperm(len(train), generator=order_gen).tolist()
        take, perm = perm[: spec.batch_size], perm[spec.batch_size :]
        ids, attn, rows, cols, labels = _collate([train[i] for i in take], pad_id, device)
        logits = prm.step_logits(ids, attn, rows, cols)  # (N,)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(prm.parameters(), 1.0)
        optim.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % every == 0 or step == spec.steps:
            history.append({"step": float(step), "loss": sum(losses[-every:]) / len(losses[-every:])})
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    if bar is not None:
        bar.close()
    return losses, history


def _train(policy: Policy, task: Task, spec: LearnedPRMSpec, device: torch.device,
           progress: bool) -> tuple[LearnedPRM, LearnedPRMReport]:
    """Sample labelled steps from ``policy``, fit a frozen :class:`LearnedPRM` on them and report it."""
    t0 = time.perf_counter()
    examples = _sample_examples(policy, task, spec, device, progress)
    t1 = time.perf_counter()
    train, heldout = _split(examples, spec)
    train_labels = [y for e in train for y in e.labels]
    _check_both_classes(len(examples), train_labels)
    pad_id = policy.pad_token_id
    torch.manual_seed(spec.seed)
    prm = LearnedPRM(policy.model).to(device)
    _probe_head(prm, train, pad_id, device)
    probe_auc = roc_auc(_predict(prm, heldout, pad_id, device), [y for e in heldout for y in e.labels])
    losses, history = _fit(prm, train, spec, pad_id, device, progress)
    prm.eval()
    for p in prm.parameters():
        p.requires_grad_(False)

    held_labels = [y for e in heldout for y in e.labels]
    probs = _predict(prm, heldout, pad_id, device)
    prior = sum(train_labels) / len(train_labels)
    majority = prior >= 0.5
    n_held = max(len(held_labels), 1)
    tail = losses[-max(1, spec.steps // 10) :]
    final_loss = sum(tail) / len(tail) if tail else float("nan")
    t2 = time.perf_counter()
    report = LearnedPRMReport(
        key=spec.key(),
        completions=len(examples),
        train_steps_labelled=len(train_labels),
        heldout_steps_labelled=len(held_labels),
        train_positive_rate=prior,
        heldout_positive_rate=sum(held_labels) / n_held,
        heldout_accuracy=sum((p >= 0.5) == y for p, y in zip(probs, held_labels)) / n_held,
        heldout_auc=roc_auc(probs, held_labels),
        train_auc=roc_auc(_predict(prm, train, pad_id, device), train_labels),
        probe_heldout_auc=probe_auc,
        majority_accuracy=sum(y == majority for y in held_labels) / n_held,
        heldout_log_loss=log_loss(probs, held_labels),
        prior_log_loss=log_loss([prior] * len(held_labels), held_labels),
        final_loss=final_loss,
        sample_seconds=t1 - t0,
        train_seconds=t2 - t1,
        seconds=t2 - t0,
        history=history,
    )
    return prm, report


def train_learned_prm(
    policy: Policy,
    task: Task,
    spec: LearnedPRMSpec,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[LearnedPRM, LearnedPRMReport]:
    """Build or reuse the learned PRM described by ``spec``, trained on samples of ``policy``.

    Args:
        policy: the start policy (the warm start); it is only sampled from, never changed.
        task: the task whose train problems are sampled and whose step checker labels the steps; its
            name must be ``spec.task`` (the spec names the cache entry).
        spec: every setting (its :meth:`LearnedPRMSpec.key` names the cache entry).
        cache_dir: cache root (default :func:`ablate.cache.default_cache_dir`); entries live in
            ``<cache_dir>/prm/<key>/``.
        device: where to train and where the returned PRM lives.
        progress: show progress bars while sampling and training.

    Returns:
        ``(prm, report)``: the :class:`LearnedPRM` in eval mode with frozen parameters, and its
        :class:`LearnedPRMReport` (``report.cached`` says whether it came from the cache).

    Raises:
        AblateError: ``task`` is not ``spec.task``, or the training samples' steps are all correct or
            all incorrect (or absent).
    """
    from ablate.cache import default_cache_dir, file_lock

    if getattr(task, "name", spec.task) != spec.task:
        raise AblateError(f"train_learned_prm: the task is {task.name!r} but the spec names {spec.task!r}")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = spec.key()
    final = root / "prm" / key
    device = torch.device(device)

    def load_cached() -> tuple[LearnedPRM, LearnedPRMReport]:
        report = LearnedPRMReport(**json.loads((final / REPORT_FILE).read_text()))
        report.cached = True
        report.path = str(final)
        with torch.random.fork_rng(devices=[]):  # the head's throwaway init must not move the global RNG
            prm = LearnedPRM(policy.model)
        prm.load_state_dict(torch.load(final / WEIGHTS_FILE, map_location="cpu", weights_only=True))
        prm.to(device).eval()
        for p in prm.parameters():
            p.requires_grad_(False)
        return prm, report

    if (final / REPORT_FILE).exists():
        return load_cached()
    with file_lock(root / "prm" / f"{key}.lock"):
        if (final / REPORT_FILE).exists():  # built by another process while we waited
            return load_cached()
        # the global RNG is left as it was, so a trial draws the same numbers whether its PRM was
        # trained now or read from the cache
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            prm, report = _train(policy, task, spec, device, progress)
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save({k: v.detach().cpu() for k, v in prm.state_dict().items()}, tmp / WEIGHTS_FILE)
        (tmp / SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True, default=str))
        (tmp / REPORT_FILE).write_text(json.dumps(report.to_dict(), indent=2))
        os.replace(tmp, final)
        report.path = str(final)
        return prm, report


def learned_prm_for_trial(
    config: TrialConfig,
    policy: Policy,
    task: Task,
    warmstart_report: Mapping[str, Any],
    *,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[LearnedPRM, dict[str, Any]]:
    """The learned PRM of a trial (``reward.prm.source=learned``), built or read from the cache.

    The spec comes from ``config``: ``reward.prm.learned_*``, ``rollout.max_new_tokens``, the task
    section, and the warm start's seed (``warmstart.seed``, else the trial seed), so that trials that
    share a warm start share its PRM. The policy is identified by its warm-start key when it was
    warm-started, else by a fingerprint of its weights.

    Returns:
        ``(prm, report as a dict)``.
    """
    ws_key = warmstart_report.get("key") if warmstart_report else None
    prm_cfg = config.reward.prm
    spec = LearnedPRMSpec(
        policy=f"warmstart:{ws_key}" if ws_key else policy_fingerprint(policy),
        task=config.task.name,
        difficulty=getattr(task, "difficulty", config.task.difficulty),
        task_options=task_options(config.task),
        task_seed=int(getattr(task, "seed", config.task.data_seed)),
        samples=prm_cfg.learned_samples,
        max_new_tokens=config.rollout.max_new_tokens,
        steps=prm_cfg.learned_steps,
        batch_size=prm_cfg.learned_batch_size,
        lr=prm_cfg.learned_lr,
        seed=config.warmstart.seed if config.warmstart.seed is not None else config.seed,
    )
    prm, report = train_learned_prm(
        policy, task, spec, cache_dir=config.warmstart.cache_dir, device=device, progress=progress
    )
    return prm, report.to_dict()
