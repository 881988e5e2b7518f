"""The task's sequence rewards as TRL reward functions, and ablate's rollout metrics read off what TRL
generated (the TRL engine's counterpart of :func:`ablate.train.stats.rollout_metrics`).

TRL calls every reward function once per generation batch with the batch's prompts, decoded completions
(special tokens dropped: no EOS), completion token ids (EOS included when one was generated) and the
dataset's extra columns — here ``problem``, the index of the train problem. :class:`TrlScorer` grades each
completion once per batch (:meth:`ablate.tasks.Task.grade`, the grader ablate's own trainer uses), gives
each component's unweighted value (TRL applies ``reward_weights``), and keeps the batch's rollout
metrics until the engine logs its RL step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ablate.tasks import Grade, Problem, Task

#: A TRL reward function: ``f(prompts=..., completions=..., completion_ids=..., problem=..., **kw)``.
RewardFn = Callable[..., list[float]]


def component_value(name: str, grade: Grade) -> float:
    """One sequence-level component's unweighted reward for a graded completion (as ablate's components:
    final_answer 1/0, partial the task's credit in [0, 1], format 1 when well-formed (mode sequence))."""
    if name == "final_answer":
        return float(grade.answer_correct)
    if name == "partial":
        return float(grade.partial)
    if name == "format":
        return float(grade.format_ok)
    raise ValueError(f"no sequence reward {name!r} for the trl engine")


#: The built-in components TRL takes, each one reward per completion read off the grade.
SEQUENCE_REWARDS: tuple[str, ...] = ("final_answer", "partial", "format")


def plugin_values(names: Sequence[str], policy: Any, grades: Sequence[Grade], ids: Sequence[Sequence[int]],
                  eos_id: int) -> dict[str, list[float]]:
    """Plugin reward components on a batch of TRL's completions: each one's [B, T] token rewards
    (:func:`ablate.rewards.compute_token_rewards` on a :class:`~ablate.rewards.RewardContext` of the
    completions: mask over their tokens, EOS included; offsets from the policy's incremental decoding; truncated
    where the last id is not EOS; no log-probs), summed per completion, unweighted."""
    import torch

    from ablate.rewards import RewardContext, compute_token_rewards

    t = max((len(x) for x in ids), default=0)
    mask = torch.tensor([[1.0] * len(x) + [0.0] * (t - len(x)) for x in ids])  # (B, T)
    offsets = [policy.decode_with_offsets([int(i) for i in x])[1] for x in ids]
    truncated = torch.tensor([not (x and int(x[-1]) == eos_id) for x in ids])
    ctx = RewardContext(mask=mask, grades=list(grades), offsets=offsets, truncated=truncated)
    _, parts = compute_token_rewards(ctx, {n: (1.0, {}) for n in names})
    return {n: [float(v) for v in parts[n].sum(dim=1)] for n in names}


def as_text(item: Any) -> str:
    """A prompt or completion as text: TRL passes strings, or, for conversational prompts (a chat-template
    model: :func:`ablate.engines.trl._dataset`), lists of ``{"role", "content"}`` messages, whose contents
    are joined."""
    if isinstance(item, str):
        return item
    return "".join(str(m.get("content", "")) for m in item)


def rank() -> int:
    """This process's rank in the trial's process group (0 when it trains alone)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gathered(values: list[Any]) -> list[Any]:
    """``values`` of every process of the trial, in rank order (``values`` itself when it trains alone).
    Every rank calls it at the same point: TRL calls the reward functions on all ranks for each batch."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, values)
    return [v for part in parts for v in part]


class Scored(NamedTuple):
    """One completion's figures, as the ranks of a trial gather them."""

    correct: bool
    format_ok: bool
    step_accuracy: float
    length: int
    ended: bool  # its ids end with EOS (else it was cut at the length limit)
    parts: dict[str, float]  # each component's weighted reward


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


@dataclass
class TrlScorer:
    """Grades TRL's completions once per generation batch; its :meth:`reward_functions` go to ``GRPOTrainer``.

    Attributes:
        task, pool: the task and its train problems (the dataset's ``problem`` column indexes ``pool``).
        weights: each component's weight (``reward.<name>.weight``), in ``reward.components`` order.
        eos_id: the tokenizer's EOS id (a completion whose ids end elsewhere was cut at the length limit).
        policy: the trial's policy, for a plugin component's per-token character offsets (None: no plugin).
        batches: the rollout metrics of each graded batch not yet taken by :meth:`take_metrics`.
        samples: the first completions of the last batch, as :func:`ablate.train.stats.sample_table` rows.
    """

    task: Task
    pool: list[Problem]
    weights: dict[str, float]
    eos_id: int
    policy: Any = None
    batches: list[dict[str, float]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    _key: tuple[Any, ...] | None = None
    _grades: list[Grade] = field(default_factory=list)
    _values: dict[str, list[float]] = field(default_factory=dict)

    def values(self, completions: Sequence[str], problem: Sequence[int], completion_ids: Sequence[Sequence[int]],
               prompts: Sequence[str]) -> dict[str, list[float]]:
        """Each component's unweighted reward per completion of a batch (computed on the first call for it,
        reused by the other components): a built-in's from the grade (:func:`component_value`), a plugin's
        its token rewards summed (:func:`plugin_values`)."""
        key = (tuple(completions), tuple(int(i) for i in problem))
        if key != self._key:
            self._key = key
            self._grades = [self.task.grade(self.pool[int(i)], c) for i, c in zip(problem, completions, strict=True)]
            self._values = {n: [component_value(n, g) for g in self._grades] for n in self.weights
                            if n in SEQUENCE_REWARDS}
            plugins = [n for n in self.weights if n not in SEQUENCE_REWARDS]
            if plugins:
                self._values.update(plugin_values(plugins, self.policy, self._grades, completion_ids, self.eos_id))
            self._record(self._grades, completion_ids, completions, prompts)
        return self._values

    def _record(self, grades: list[Grade], ids: Sequence[Sequence[int]], texts: Sequence[str],
                prompts: Sequence[str]) -> None:
        """Keep the batch's rollout metrics (over every process's completions) and sample rows."""
        local = [Scored(g.answer_correct, g.format_ok, g.step_accuracy, len(x), bool(x) and int(x[-1]) == self.eos_id,
                        {n: w * self._values[n][i] for n, w in self.weights.items()})
                 for i, (g, x) in enumerate(zip(grades, ids, strict=True))]
        rows = gathered(local)
        lengths = [float(r.length) for r in rows]
        correct = [bool(r.correct) for r in rows]
        m = {"reward/total": _mean([sum(r.parts.values()) for r in rows])}
        m.update({f"reward/{n}": _mean([r.parts[n] for r in rows]) for n in self.weights})
        m["reward/accuracy"] = _mean([float(c) for c in correct])
        m["reward/format_rate"] = _mean([float(r.format_ok) for r in rows])
        m["reward/step_accuracy"] = _mean([float(r.step_accuracy) for r in rows])
        m["response/length"] = _mean(lengths)
        m["response/length_correct"] = _mean([n for n, c in zip(lengths, correct, strict=True) if c])
        m["response/length_incorrect"] = _mean([n for n, c in zip(lengths, correct, strict=True) if not c])
        m["response/truncated_frac"] = _mean([float(not r.ended) for r in rows])
        m["compute/tokens"], m["compute/samples"] = float(sum(lengths)), float(len(rows))
        self.batches.append(m)
        self.samples = [{"prompt": p, "completion": t, "correct": bool(r.correct),
                         **{f"reward/{n}": v for n, v in r.parts.items()}}
                        for p, t, r in zip(prompts[:16], texts[:16], local[:16])]

    def take_metrics(self) -> dict[str, float]:
        """The rollout metrics of the batches graded since the last call (summed counts, mean rates)."""
        batches, self.batches = self.batches, []
        if not batches:
            return {}
        out = {k: _mean([b[k] for b in batches]) for k in batches[0]}
        out["compute/tokens"] = sum(b["compute/tokens"] for b in batches)
        out["compute/samples"] = sum(b["compute/samples"] for b in batches)
        return out

    def reward_functions(self) -> list[RewardFn]:
        """One TRL reward function per component, named after it (TRL logs ``rewards/<name>/mean``)."""
        return [self._function(name) for name in self.weights]

    def _function(self, name: str) -> RewardFn:
        def reward(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], problem: list[int],
                   **_: Any) -> list[float]:
            texts, asked = [as_text(c) for c in completions], [as_text(p) for p in prompts]
            return list(self.values(texts, problem, completion_ids, asked)[name])

        reward.__name__ = name
        return reward
