"""The one loop of a trial, to be read top to bottom: :func:`prepare_trial`, then :func:`train_prepared`
(:func:`ablate.train.trial.run_trial` runs both, or hands a packed trial to its population)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ablate.config import TrialConfig
from ablate.models.batching import at
from ablate.train.batch import StepBatch
from ablate.train.checkpoint import Resume, checkpoint_path, resume, save_checkpoint
from ablate.train.evaluate import eval_problem_rows, evaluate_trial
from ablate.train.setup import TrialState, setup_trial
from ablate.train.stats import sample_table
from ablate.train.step import train_step

#: ``log(metrics, step)``: how a trial reports every logged step and evaluation.
LogFn = Callable[[dict[str, float], int], None]


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
        """The result as nested plain dicts and lists (``dataclasses.asdict``)."""
        return asdict(self)


class _ProgressBar:
    """A tqdm bar over the trial's steps showing the step's reward and the last eval accuracy (or nothing)."""

    def __init__(self, config: TrialConfig, first_step: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=config.train.steps, initial=first_step - 1, desc=f"trial {config.trial_key()}",
                            unit="step")

    def update(self, metrics: dict[str, float], history: list[tuple[int, dict[str, float]]]) -> None:
        """Advance one step, showing its ``reward/total`` and the last logged ``eval/accuracy``."""
        if self.bar is None:
            return
        self.bar.update(1)
        last_acc = next((m["eval/accuracy"] for _, m in reversed(history) if "eval/accuracy" in m), float("nan"))
        self.bar.set_postfix(reward=f"{metrics['reward/total']:.3f}", eval_acc=f"{last_acc:.3f}")

    def close(self) -> None:
        """Close the bar (if shown)."""
        if self.bar is not None:
            self.bar.close()


def _evaluate(state: TrialState, step: int, eval_rows: list[dict[str, Any]]) -> dict[str, float]:
    """The ``eval/*`` metrics after ``step`` with ``perf/eval_s``; appends the per-problem rows to ``eval_rows``."""
    t = time.perf_counter()
    at(step, "eval")
    metrics, records = evaluate_trial(state, step)
    eval_rows += eval_problem_rows(step, records)
    metrics["perf/eval_s"] = time.perf_counter() - t
    return metrics


def _result(state: TrialState, step: int, history: list[tuple[int, dict[str, float]]], start_time: float,
            resumed_from: int | None, last_batch: StepBatch | None, eval_rows: list[dict[str, Any]]) -> TrialResult:
    """The :class:`TrialResult` after ``step``: ``final`` holds the last logged value of every metric."""
    final: dict[str, float] = {}
    for _, m in history:
        final.update(m)
    return TrialResult(
        key=state.config.trial_key(), steps=step, final=final, history=history,
        seconds=time.perf_counter() - start_time, resumed_from=resumed_from, warmstart=state.warmstart_report,
        samples=sample_table(last_batch) if last_batch is not None else [],
        learned_prm=dict(state.prm_report), eval_problems=eval_rows,
    )


@dataclass
class PreparedTrial:
    """A trial set up and ready for its loop: :func:`prepare_trial`'s result, :func:`train_prepared`'s input."""

    state: TrialState
    ckpt: Path | None
    start: Resume
    start_time: float
    progress: bool


def prepare_trial(config: TrialConfig, *, workdir: str | os.PathLike[str] | None = None,
                  progress: bool = False) -> PreparedTrial:
    """Set up ``config``'s trial (:func:`setup_trial`) and load its checkpoint from ``workdir`` if any."""
    start_time = time.perf_counter()
    state = setup_trial(config, progress=progress)
    ckpt = checkpoint_path(workdir)
    return PreparedTrial(state, ckpt, resume(state, ckpt), start_time, progress)


def train_prepared(run: PreparedTrial, log: LogFn | None = None, *, stop_after: int | None = None) -> TrialResult:
    """The loop of a :func:`prepare_trial`'d trial: evaluations, RL steps, checkpoints (see :func:`run_trial`)."""
    state, ckpt, start, c = run.state, run.ckpt, run.start, run.state.config
    history, eval_rows = start.history, start.eval_rows

    def emit(metrics: dict[str, float], step: int) -> None:
        history.append((step, metrics))
        if log is not None:
            log(metrics, step)

    if start.step is None:  # the start policy, evaluated once; its size (a report's scale trend reads it)
        size = float(sum(p.numel() for p in state.policy.model.parameters()))
        emit({**_evaluate(state, 0, eval_rows), "compute/tokens": 0.0, "compute/samples": 0.0, "model/params": size}, 0)

    bar = _ProgressBar(c, start.next_step, run.progress)
    last_batch, done, step = None, 0, start.next_step - 1
    for step in range(start.next_step, c.train.steps + 1):
        t0 = time.perf_counter()
        metrics, last_batch = train_step(state, step)
        metrics["perf/eval_s"] = 0.0
        if (c.eval.every and step % c.eval.every == 0) or step == c.train.steps:
            metrics.update(_evaluate(state, step, eval_rows))
        metrics["perf/step_s"] = time.perf_counter() - t0
        if step % c.train.log_every == 0 or "eval/accuracy" in metrics:
            emit(metrics, step)
        bar.update(metrics, history)
        done += 1
        stopping = stop_after is not None and done >= stop_after
        if ckpt is not None and c.train.checkpoint_every and (step % c.train.checkpoint_every == 0 or stopping):
            save_checkpoint(state, ckpt, step, history, eval_rows)
        if stopping:
            break
    bar.close()
    return _result(state, step, history, run.start_time, start.step, last_batch, eval_rows)
