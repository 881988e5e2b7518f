"""``engine.name: trl``: a trial trained by TRL's ``GRPOTrainer`` (``pip install 'ablate[trl]'``).

The trial gets what ablate's own trainer would: the same (warm-started) model and tokenizer
(:func:`ablate.train.setup.setup_trial`), the task's train problems as a ``datasets.Dataset`` of prompts,
the sequence rewards as TRL reward functions with their weights (:class:`TrlScorer`), and ablate's greedy
evaluation on the same held-out problems before the first step, every ``eval.every`` RL steps and after
the last (:func:`ablate.train.evaluate.evaluate_trial`), so ``eval/accuracy`` means the same on both
engines. ``GRPOConfig`` comes from :func:`ablate.engines.trl_map.grpo_arguments`.

One ablate RL step is ``algo.ppo_epochs x algo.minibatches`` TRL optimizer steps; :class:`StepLogger`
(a ``TrainerCallback``) logs each RL step once through the engine job's ``log``: ablate's rollout metrics,
the evaluation when due, and TRL's own metrics of its optimizer steps under ``trl/`` (their mean).

Checkpoints are TRL's (``<workdir>/trl/checkpoint-<global step>``, every ``train.checkpoint_every`` RL
steps), each with the trial's history beside it (``ablate_history.json``); a killed attempt resumes from
the last one with ``resume_from_checkpoint``, and logs only the steps after it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ablate.engines.base import ENGINES, EngineJob, LogFn
from ablate.engines.trl_map import (
    config_docs,
    grpo_arguments,
    optimizer_steps_per_rl_step,
    reward_weights,
    trl_bf16,
    trl_refusals,
)
from ablate.errors import ConfigError

if TYPE_CHECKING:  # the trainer's modules (torch) load when a trial trains, not when the engines register
    from ablate.config import ConfigProblem, TrialConfig
    from ablate.engines.trl_scoring import TrlScorer
    from ablate.train.loop import TrialResult
    from ablate.train.setup import TrialState

#: The folder under a trial's workdir where TRL keeps its checkpoints.
TRL_DIR = "trl"
#: The trial's history and evaluation rows, saved in each TRL checkpoint folder.
HISTORY_FILE = "ablate_history.json"
#: TRL's metrics are logged under this prefix (``trl/reward``, ``trl/clip_ratio/region_mean``, ...).
TRL_PREFIX = "trl/"
#: TRL logs these per call, not per step; they are left out of the trial's metrics.
_TRL_SKIPPED = frozenset({"epoch", "total_flos", "train_runtime", "train_samples_per_second",
                          "train_steps_per_second", "train_loss", "step_time"})


def require_trl() -> Any:
    """The ``trl`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        import trl
    except ImportError:
        raise ConfigError("engine.name=trl needs TRL: pip install 'ablate[trl]' (TRL >= 1.16 and datasets)") from None
    return trl


def last_checkpoint(workdir: Path | None) -> Path | None:
    """The newest TRL checkpoint under ``workdir`` that has the trial's history beside it, or None."""
    if workdir is None or not (workdir / TRL_DIR).is_dir():
        return None
    done = [p for p in (workdir / TRL_DIR).glob("checkpoint-*") if (p / HISTORY_FILE).exists()]
    return max(done, key=lambda p: int(p.name.rsplit("-", 1)[1]), default=None)


@dataclass
class StepLogger:
    """The trial's bookkeeping across TRL's optimizer steps (the body of the callback).

    Attributes:
        state: the trial's state (model, eval problems, config).
        scorer: the reward functions' scorer (rollout metrics per generation batch).
        log: the engine job's ``log(metrics, step)``.
        history, eval_rows: every logged step, and the evaluation rows (restored on resume).
        tokens, samples: generated tokens and completions so far (``compute/*``).
    """

    state: TrialState
    scorer: TrlScorer
    log: LogFn
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    eval_rows: list[dict[str, Any]] = field(default_factory=list)
    tokens: float = 0.0
    samples: float = 0.0
    _trl: list[dict[str, float]] = field(default_factory=list)
    _t0: float = field(default_factory=time.perf_counter)

    @property
    def per_step(self) -> int:
        return optimizer_steps_per_rl_step(self.state.config)

    def emit(self, metrics: dict[str, float], step: int) -> None:
        self.history.append((step, metrics))
        self.log(metrics, step)

    def evaluate(self, step: int) -> dict[str, float]:
        """ablate's evaluation after RL step ``step`` (``eval/*``, ``perf/eval_s``), the model back in train mode."""
        from ablate.train.evaluate import eval_problem_rows, evaluate_trial

        model, t = self.state.model, time.perf_counter()
        was_training = model.training
        metrics, records = evaluate_trial(self.state, step)
        model.train(was_training)
        self.eval_rows += eval_problem_rows(step, records)
        metrics["perf/eval_s"] = time.perf_counter() - t
        return metrics

    def start(self) -> None:
        """Step 0: the start policy's evaluation and size (as ablate's trainer logs it)."""
        size = float(sum(p.numel() for p in self.state.model.parameters()))
        self.emit({**self.evaluate(0), "compute/tokens": 0.0, "compute/samples": 0.0, "model/params": size}, 0)

    def optimizer_step(self, global_step: int, logs: dict[str, Any]) -> None:
        """TRL logged optimizer step ``global_step``; at an RL step's last one, log the RL step."""
        self._trl.append({k: float(v) for k, v in logs.items() if k not in _TRL_SKIPPED and _is_number(v)})
        if global_step % self.per_step:
            return
        step, c = global_step // self.per_step, self.state.config
        metrics = self.scorer.take_metrics()
        self.tokens += metrics.pop("compute/tokens", 0.0)
        self.samples += metrics.pop("compute/samples", 0.0)
        metrics.update({"compute/tokens": self.tokens, "compute/samples": self.samples})
        metrics.update(_mean_by_name(self._trl, TRL_PREFIX))
        self._trl = []
        metrics["perf/eval_s"] = 0.0
        if (c.eval.every and step % c.eval.every == 0) or step == c.train.steps:
            metrics.update(self.evaluate(step))
        metrics["perf/step_s"] = time.perf_counter() - self._t0
        self._t0 = time.perf_counter()
        if step % c.train.log_every == 0 or "eval/accuracy" in metrics:
            self.emit(metrics, step)

    def save(self, folder: Path) -> None:
        """Write the history beside a TRL checkpoint (atomically: a checkpoint without it is not resumed)."""
        data = {"history": [[s, m] for s, m in self.history], "eval_rows": self.eval_rows,
                "tokens": self.tokens, "samples": self.samples}
        tmp = folder / (HISTORY_FILE + ".tmp")
        tmp.write_text(json.dumps(data, allow_nan=True), encoding="utf-8")
        tmp.replace(folder / HISTORY_FILE)

    def restore(self, folder: Path) -> int:
        """Load the history saved beside checkpoint ``folder``; returns the RL step it ends at."""
        data = json.loads((folder / HISTORY_FILE).read_text(encoding="utf-8"))
        self.history = [(int(s), dict(m)) for s, m in data["history"]]
        self.eval_rows, self.tokens, self.samples = data["eval_rows"], data["tokens"], data["samples"]
        return int(folder.name.rsplit("-", 1)[1]) // self.per_step


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _mean_by_name(rows: list[dict[str, float]], prefix: str) -> dict[str, float]:
    names = sorted({k for r in rows for k in r})
    return {prefix + k: sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r) for k in names}


def _callback(steps: StepLogger) -> Any:
    """A ``transformers.TrainerCallback`` that hands TRL's logs and saves to ``steps``."""
    from transformers import TrainerCallback

    class AblateSteps(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if state.is_world_process_zero and logs is not None and "loss" in logs and state.global_step > 0:
                steps.optimizer_step(state.global_step, logs)

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                steps.save(folder)

    return AblateSteps()


def _dataset(state: TrialState) -> Any:
    """The train problems as TRL's dataset. A model whose prompts go through a chat template gets
    conversational prompts (one user message), which TRL renders with the same ``apply_chat_template`` call
    ablate's :meth:`~ablate.models.Policy.encode_prompt` makes: RL samples from the templated prompt the warm
    start and the evaluation use (issue 55; before, TRL got the raw text). Other models get the text, which
    TRL tokenizes as ablate does (the zoo tokenizer adds its BOS)."""
    from datasets import Dataset

    pool = state.train_pool
    chat = state.policy.use_chat_template and state.config.engine.prompts == "chat"
    prompts = [[{"role": "user", "content": p.prompt}] if chat else p.prompt for p in pool]
    return Dataset.from_dict({"prompt": prompts, "problem": list(range(len(pool)))})


def _grpo_config(c: Any, output_dir: Path, device: Any, save: bool) -> Any:
    """TRL's ``GRPOConfig`` of trial ``c`` (the map, then where it writes and how it logs)."""
    import dataclasses

    from trl import GRPOConfig

    from ablate.train.seeds import derive_seed, trial_stream

    # no activation checkpointing (ablate's trainer has none); transformers 5 renamed the option
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return GRPOConfig(
        output_dir=str(output_dir), **grpo_arguments(c),
        seed=derive_seed(*trial_stream(c), "trl") % (2**31), use_cpu=device.type == "cpu", bf16=trl_bf16(c, device.type),
        fp16=False,
        **{checkpointing: False}, disable_dropout=True, report_to=[], logging_steps=1, disable_tqdm=True,
        save_strategy="steps" if save else "no", save_only_model=False, save_total_limit=2, eval_strategy="no",
        dataloader_num_workers=0, log_completions=False, shuffle_dataset=True,
    )


def _save_reference(state: TrialState, folder: Path) -> None:
    """Save the start policy where TRL's reference model is loaded from (``beta > 0``: TRL builds it from
    the policy's ``config._name_or_path``), so the reference is the warm-started model, offline."""
    state.model.save_pretrained(folder)
    state.model.config._name_or_path = str(folder)


@contextlib.contextmanager
def quiet_deprecations() -> Iterator[None]:
    """TRL asks the model for ``is_gradient_checkpointing``, a name transformers 5 deprecates, at every step:
    a warning about TRL's code that no user of ablate can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
        yield


def build_trainer(state: TrialState, scorer: TrlScorer, output_dir: Path, *, save: bool,
                  callbacks: list[Any] | None = None) -> Any:
    """TRL's ``GRPOTrainer`` for the trial of ``state``: its model and a copy of its tokenizer, the train
    problems as a dataset, the scorer's reward functions and the mapped ``GRPOConfig``; TRL's printing
    and progress callbacks removed (the trial's log is ablate's). With ``kl.placement=loss`` the start
    policy is saved under ``output_dir/reference`` for TRL's reference model."""
    import copy

    from transformers import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    c = state.config
    if c.kl.placement == "loss":
        _save_reference(state, output_dir / "reference")
    trl_log = logging.getLogger("trl.trainer.grpo_trainer")
    level = trl_log.level
    trl_log.setLevel(logging.ERROR)  # its combination warnings repeat ablate's rules (acknowledged per study)
    try:
        with quiet_deprecations():
            trainer = GRPOTrainer(
                model=state.model, reward_funcs=scorer.reward_functions(),
                args=_grpo_config(c, output_dir, state.device, save=save), train_dataset=_dataset(state),
                processing_class=copy.deepcopy(state.policy.tokenizer), callbacks=callbacks or [],
            )
    finally:
        trl_log.setLevel(level)
    for quiet in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(quiet)
    quiet_tied_missing_keys(trainer)
    if c.engine.positions == "mask":
        for model in (trainer.model, getattr(trainer, "ref_model", None)):
            if model is not None:
                mask_positions(model)
    return trainer


def mask_positions(model: Any) -> Any:
    """``engine.positions: mask``: a forward pre-hook that gives a call with an attention mask and no position
    ids the positions generation used (:func:`ablate.models.logprobs.position_ids_from_mask`: counted over the
    mask), so TRL's loss forward trains a left-padded prompt where it was sampled. Generation passes its own
    position ids and is left alone; an unpadded batch gets ``0..L-1``, what the model would use anyway.
    Returns the hook's handle."""
    from ablate.models.logprobs import position_ids_from_mask

    def hook(module: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        mask = kwargs.get("attention_mask")
        if mask is not None and kwargs.get("position_ids") is None:
            kwargs["position_ids"] = position_ids_from_mask(mask)
        return args, kwargs

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def tied_missing_keys(model: Any, missing: list[str]) -> set[str]:
    """The ``missing`` keys of a checkpoint that name a parameter tied to one that was loaded (tied
    embeddings: ``lm_head.weight`` is ``embed_tokens.weight``, which the checkpoint holds once): restored."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    tied = set()
    for group in names.values():
        if any(n not in missing for n in group):
            tied.update(n for n in group if n in missing)
    return tied


def quiet_tied_missing_keys(trainer: Any) -> None:
    """Resuming from a checkpoint, transformers' Trainer warns "There were missing keys in the checkpoint
    model loaded: ['lm_head.weight']" for a model with tied embeddings, whose checkpoint saves the tied
    weight once: the key is restored through the weight it is tied to. Drop those keys from the warning;
    any other missing or unexpected key is still said."""
    issue = getattr(trainer, "_issue_warnings_after_load", None)
    if issue is None:  # another transformers: its own warning, unchanged
        return

    def without_tied(load_result: Any) -> None:
        missing = list(load_result.missing_keys)
        tied = tied_missing_keys(trainer.model, missing)
        issue(SimpleNamespace(missing_keys=[k for k in missing if k not in tied],
                              unexpected_keys=list(load_result.unexpected_keys)))

    trainer._issue_warnings_after_load = without_tied


def make_scorer(state: TrialState) -> TrlScorer:
    """The :class:`TrlScorer` of the trial of ``state`` (its components and weights, its EOS)."""
    from ablate.engines.trl_scoring import TrlScorer

    return TrlScorer(state.task, state.train_pool, reward_weights(state.config), state.policy.eos_token_id,
                     state.policy)


def train_here(job: EngineJob) -> TrialResult:
    """Train ``job`` in this process: the whole trial, or one rank of a trial of several processes (only
    rank 0 evaluates, logs and saves the history; the others train their share)."""
    from ablate.engines.trl_scoring import rank
    from ablate.train.loop import TrialResult
    from ablate.train.setup import setup_trial

    t0, c = time.perf_counter(), job.config
    state = setup_trial(c)
    scorer = make_scorer(state)
    steps = StepLogger(state, scorer, job.log)
    resume_from = last_checkpoint(job.workdir)
    resumed = steps.restore(resume_from) if resume_from is not None else None
    scratch = Path(tempfile.mkdtemp(prefix="ablate-trl-"))
    try:
        out_dir = job.workdir / TRL_DIR if job.workdir is not None else scratch / TRL_DIR
        save = job.workdir is not None and c.train.checkpoint_every > 0
        trainer = build_trainer(state, scorer, out_dir, save=save, callbacks=[_callback(steps)])
        if resumed is None and rank() == 0:
            steps.start()
        with quiet_deprecations():
            trainer.train(resume_from_checkpoint=str(resume_from) if resume_from is not None else None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    final: dict[str, float] = {}
    for _, m in steps.history:
        final.update(m)
    return TrialResult(key=c.trial_key(), steps=c.train.steps, final=final, history=steps.history,
                       seconds=time.perf_counter() - t0, resumed_from=resumed, warmstart=state.warmstart_report,
                       samples=scorer.samples, eval_problems=steps.eval_rows)


class TrlEngine:
    """TRL's ``GRPOTrainer`` as a trial engine (see the module's docstring)."""

    name = "trl"

    def has_checkpoint(self, workdir: Path | None) -> bool:
        """Whether a killed attempt left a TRL checkpoint (with its history) in ``workdir``."""
        return last_checkpoint(workdir) is not None

    def train(self, job: EngineJob) -> TrialResult:
        """Train ``job.config`` here, or with ``engine.processes > 1`` under torchrun (:mod:`ablate.engines.trl_ranks`)."""
        require_trl()
        if job.config.engine.processes > 1:
            from ablate.engines.trl_ranks import train_distributed

            return train_distributed(job)
        return train_here(job)

    def refusals(self, config: TrialConfig) -> list[ConfigProblem]:
        """What TRL's GRPOTrainer cannot honour (:func:`ablate.engines.trl_map.trl_refusals`)."""
        return trl_refusals(config)

    def config_docs(self) -> list[str]:
        """Its section of ``docs/config.md``: the map to ``GRPOConfig`` (:func:`ablate.engines.trl_map.config_docs`)."""
        return config_docs()


ENGINES.register("trl", TrlEngine())


__all__ = ["HISTORY_FILE", "TRL_DIR", "TRL_PREFIX", "StepLogger", "TrlEngine", "build_trainer", "last_checkpoint",
           "make_scorer", "quiet_tied_missing_keys", "require_trl", "tied_missing_keys", "train_here"]
