"""Held-out evaluation of a trial's policy on its fixed eval problems."""

from __future__ import annotations

from typing import Any

from ablate.models.evaluate import ProblemRecord, evaluate_with_records
from ablate.train.seeds import seeded_generator, trial_stream
from ablate.train.setup import TrialState, autocast


def eval_problem_rows(step: int, records: list[ProblemRecord]) -> list[dict[str, Any]]:
    """The records of the evaluation at ``step`` as plain rows: ``step, problem, correct, step_accuracy,
    format_ok, length, truncated, partial`` (flags as 0/1; ``problem``: the index in the eval problems)."""
    return [
        {"step": int(step), "problem": r.problem, "correct": int(r.correct), "step_accuracy": r.step_accuracy,
         "format_ok": int(r.format_ok), "length": r.length, "truncated": int(r.truncated), "partial": r.partial}
        for r in records
    ]


def evaluate_trial(state: TrialState, step: int) -> tuple[dict[str, float], list[ProblemRecord]]:
    """Evaluate the policy on the eval problems after RL step ``step`` (0: the start policy).

    Returns:
        The ``eval/*`` metrics (accuracy, step accuracy, format rate, partial credit, length in
        tokens, truncated fraction, and ``eval/pass_at_k`` when ``eval.pass_k > 1``) and one record
        per problem (``records[i]`` is ``state.eval_problems[i]``).
    """
    c = state.config
    with autocast(state):
        m, records = evaluate_with_records(
            state.policy, state.task, state.eval_problems,
            max_new_tokens=c.rollout.max_new_tokens,
            pass_k=c.eval.pass_k,
            temperature=c.rollout.temperature,
            top_p=c.rollout.top_p,
            generator=seeded_generator(state.device, *trial_stream(c), "eval", step),
            greedy=c.eval.greedy,
            cuda_graph=c.rollout.cuda_graph,
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
