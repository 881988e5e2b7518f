"""Evaluation of a policy on a task: greedy accuracy, step accuracy, format rate, length, pass@k.

Usage::

    task = TASKS.get("addition")(difficulty=3, seed=0)
    metrics = evaluate(policy, task, task.sample("eval", 200, seed=0), pass_k=4, num_samples=8,
                       generator=torch.Generator().manual_seed(0))
    # {"accuracy": ..., "step_accuracy": ..., "format_rate": ..., "partial": ..., "mean_length": ...,
    #  "truncated_rate": ..., "num_problems": 200.0, "pass@4": ...}
    metrics, records = evaluate_with_records(policy, task, problems)
    # records[i]: a ProblemRecord of problems[i] (correct, step_accuracy, format_ok, partial, length,
    # truncated); the greedy metrics are their means

The per-problem records let an analysis pair arms and seeds problem by problem (the trainer logs them
as the ``eval_problems.csv`` artifact of a trial, see :mod:`ablate.tracking`).

Greedy metrics decode with temperature 0 through :func:`generate_rollouts` (the same sampling code
as training rollouts); pass@k draws ``num_samples`` completions per problem at ``temperature`` and
uses the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
Code"). Grading goes through :meth:`Task.grade`, which never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ablate.errors import AblateError
from ablate.models.policy import Policy
from ablate.models.rollout import generate_rollouts
from ablate.tasks.base import Grade, Problem, Task


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021, eq. 1).

    ``pass@k = 1 - C(n - c, k) / C(n, k)``, computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` for
    numerical stability. Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise AblateError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass(frozen=True)
class ProblemRecord:
    """The graded completion of one eval problem (greedy, or one sample when ``greedy=False``).

    Attributes:
        problem: the problem's position in the ``problems`` evaluated (the trainer evaluates
            ``task.sample("eval", eval.n_problems, seed=task.data_seed)``, whose smaller sizes are
            prefixes of larger ones, so an index names the same problem in every trial of a study).
        correct: the final answer is correct (:attr:`Grade.answer_correct`).
        step_accuracy: correct steps over the reference's step count (:attr:`Grade.step_accuracy`).
        format_ok: the completion follows the task's format exactly.
        partial: partial credit in [0, 1].
        length: generated tokens, EOS included.
        truncated: no EOS within the generation budget.
    """

    problem: int
    correct: bool
    step_accuracy: float
    format_ok: bool
    partial: float
    length: int
    truncated: bool


def problem_records(grades: Sequence[Grade], lengths: Sequence[int],
                    truncated: Sequence[bool]) -> list[ProblemRecord]:
    """One :class:`ProblemRecord` per graded completion, numbered from 0 in the order given."""
    if not len(grades) == len(lengths) == len(truncated):
        raise AblateError(f"problem_records: {len(grades)} grades, {len(lengths)} lengths, {len(truncated)} "
                          "truncated flags; give one of each per problem")
    return [
        ProblemRecord(problem=i, correct=bool(g.answer_correct), step_accuracy=float(g.step_accuracy),
                      format_ok=bool(g.format_ok), partial=float(g.partial), length=int(n), truncated=bool(t))
        for i, (g, n, t) in enumerate(zip(grades, lengths, truncated))
    ]


def summarize_grades(grades: Sequence[Grade], lengths: Sequence[int] | None = None,
                     truncated: Sequence[bool] | None = None) -> dict[str, float]:
    """Mean metrics over graded completions (one per problem).

    Returns:
        ``accuracy`` (answer correct), ``step_accuracy`` (:attr:`Grade.step_accuracy`), ``format_rate``
        (format ok), ``partial`` (partial credit), ``num_problems``; plus ``mean_length`` (generated
        tokens, EOS included) and ``truncated_rate`` (no EOS within the budget) when given.
    """
    n = len(grades)
    if n == 0:
        raise AblateError("evaluate: no problems to grade; pass at least one problem")
    out = {
        "accuracy": sum(g.answer_correct for g in grades) / n,
        "step_accuracy": sum(g.step_accuracy for g in grades) / n,
        "format_rate": sum(g.format_ok for g in grades) / n,
        "partial": sum(g.partial for g in grades) / n,
        "num_problems": float(n),
    }
    if lengths is not None:
        out["mean_length"] = float(sum(lengths)) / n
    if truncated is not None:
        out["truncated_rate"] = sum(bool(t) for t in truncated) / n
    return out


def evaluate(
    policy: Policy,
    task: Task,
    problems: Sequence[Problem],
    *,
    batch_size: int = 64,
    max_new_tokens: int = 128,
    pass_k: int = 1,
    num_samples: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    fast: bool | None = None,
) -> dict[str, float]:
    """Greedy metrics of ``policy`` on ``problems``, and pass@k when ``pass_k > 1``.

    The metrics of :func:`evaluate_with_records`, without the per-problem records.

    Args:
        policy: the policy to evaluate (its training mode is restored afterwards).
        task: grades each completion.
        problems: e.g. ``task.sample("eval", n, seed=...)``.
        batch_size: completions decoded per batch (greedy: problems per batch; pass@k: about
            ``batch_size // num_samples`` problems per batch).
        max_new_tokens: the generation budget per completion.
        pass_k: k of pass@k; 1 skips sampling (greedy accuracy is reported as ``accuracy``).
        num_samples: n samples per problem for the pass@k estimator; default ``pass_k`` (then pass@k
            is the fraction of problems with at least one correct sample among k).
        temperature, top_p: sampling settings of the pass@k samples (temperature > 0).
        generator: random generator of the pass@k samples (greedy decoding draws nothing).
        fast: decoder choice, see :func:`generate_rollouts`.

    Returns:
        :func:`summarize_grades` of the greedy completions, plus ``"pass@{k}"`` when ``pass_k > 1``.
    """
    metrics, _ = evaluate_with_records(
        policy, task, problems, batch_size=batch_size, max_new_tokens=max_new_tokens, pass_k=pass_k,
        num_samples=num_samples, temperature=temperature, top_p=top_p, generator=generator, fast=fast,
    )
    return metrics


def evaluate_with_records(
    policy: Policy,
    task: Task,
    problems: Sequence[Problem],
    *,
    batch_size: int = 64,
    max_new_tokens: int = 128,
    pass_k: int = 1,
    num_samples: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    fast: bool | None = None,
    greedy: bool = True,
    cuda_graph: bool = False,
) -> tuple[dict[str, float], list[ProblemRecord]]:
    """Greedy metrics of ``policy`` on ``problems`` and one record per problem.

    Arguments as :func:`evaluate`; ``greedy=False`` grades one sample per problem at ``temperature``
    / ``top_p`` (drawn from ``generator``, before any pass@k samples) instead of the greedy completion;
    ``cuda_graph``: decode through captured CUDA graphs (see :func:`generate_rollouts`).

    Returns:
        ``(metrics, records)``: the metrics of :func:`evaluate`, and ``records[i]``, the
        :class:`ProblemRecord` of the graded (greedy or sampled) completion of ``problems[i]``. The
        metrics (all but pass@k) are the records' means (``accuracy`` = mean of ``correct``, ``format_rate`` of ``format_ok``,
        ``mean_length`` of ``length``, ``truncated_rate`` of ``truncated``, ...).
    """
    if batch_size < 1:
        raise AblateError(f"evaluate: batch_size={batch_size} must be >= 1")
    if pass_k < 1:
        raise AblateError(f"evaluate: pass_k={pass_k} must be >= 1")
    n = num_samples if num_samples is not None else pass_k
    if n < pass_k:
        raise AblateError(f"evaluate: num_samples={n} must be >= pass_k={pass_k} (the estimator needs n >= k)")
    if (pass_k > 1 or not greedy) and not temperature > 0:
        raise AblateError(f"evaluate: temperature={temperature} must be > 0 for pass@k or sampled (greedy=False) "
                          "evaluation")
    problems = list(problems)
    if not problems:
        raise AblateError("evaluate: no problems to grade; pass at least one problem")

    grades: list[Grade] = []
    lengths: list[int] = []
    truncated: list[bool] = []
    for start in range(0, len(problems), batch_size):
        batch = problems[start : start + batch_size]
        r = generate_rollouts(policy, [p.prompt for p in batch], group_size=1, max_new_tokens=max_new_tokens,
                              temperature=0.0 if greedy else temperature, top_p=1.0 if greedy else top_p,
                              generator=None if greedy else generator, fast=fast, compute_old_logp=False,
                              cuda_graph=cuda_graph)
        grades += [task.grade(p, text) for p, text in zip(batch, r.texts)]
        lengths += r.lengths.tolist()
        truncated += r.truncated.tolist()
    metrics = summarize_grades(grades, lengths, truncated)
    records = problem_records(grades, lengths, truncated)

    if pass_k > 1:
        per_batch = max(1, batch_size // n)
        scores: list[float] = []
        for start in range(0, len(problems), per_batch):
            batch = problems[start : start + per_batch]
            r = generate_rollouts(policy, [p.prompt for p in batch], group_size=n, max_new_tokens=max_new_tokens,
                                  temperature=temperature, top_p=top_p, generator=generator, fast=fast,
                                  compute_old_logp=False, cuda_graph=cuda_graph)
            for i, p in enumerate(batch):
                correct = sum(task.grade(p, r.texts[i * n + j]).answer_correct for j in range(n))
                scores.append(pass_at_k(n, correct, pass_k))
        metrics[f"pass@{pass_k}"] = sum(scores) / len(scores)
    return metrics, records
