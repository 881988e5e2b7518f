"""SFT warm start: a zoo model trained on a task's reference solutions to an imperfect accuracy.

RL needs a start policy that already writes the task's format and is right some of the time, so that
the final-answer reward is not all zeros and there is headroom to improve. :func:`warm_start` trains
a zoo model with teacher forcing on reference completions (``prompt → solution + EOS``, loss on the
completion tokens only), evaluates greedy accuracy on the eval split every ``eval_every`` steps, and
stops as soon as it reaches ``target_min`` (or after ``max_steps``); evaluations are frequent
enough that it lands inside ``[target_min, target_max]`` (the report says whether it did).

The result is cached on disk, keyed by a hash of everything that determines it (task, difficulty and
options, model, seed, every training setting, and a format version): asking again returns the cached
checkpoint in about a second. Several processes asking for the same warm start at once build it once:
the builder holds an exclusive file lock (:mod:`ablate.cache`), writes into a temporary folder and renames it into place,
so a reader never sees a half-written checkpoint.

The policy returned is the cache entry loaded back, also right after building it: a trial computes
the same whether its warm start was built in its own process or long before (before issue 54 the builder
got the in-memory policy and every later trial the loaded one, whose tokenizer differed for tiny-qwen2).
Its report's ``eval_accuracy`` is the accuracy of that policy on ``task.sample("eval", eval_problems,
seed=seed)`` of the task built with seed ``seed``: a trial with ``task.data_seed`` equal to the warm start's
seed and ``rollout.max_new_tokens`` equal to ``max_new_tokens`` evaluates the same problems first
(smaller samples are prefixes of larger ones), so its step-0 records on them reproduce that number
(tests/test_warmstart_eval.py). The number is the one the stopping rule selected on (the first of many
evaluations of the same problems to reach ``target_min``), so it runs high against other problems.

Run it alone with ``ablate warmstart --task addition --model tiny-llama``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.cache import default_cache_dir, file_lock, spec_dict, spec_key
from ablate.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: Bump when the procedure changes in a way that changes its result (invalidates the cache).
FORMAT_VERSION = 1


@dataclass(frozen=True)
class WarmStartSpec:
    """Everything that determines a warm start (and so its cache key).

    Attributes:
        task: registered task name.
        model: zoo model name.
        difficulty: the task's difficulty knob (None: the task's default).
        task_options: extra task options.
        seed: seed of initialisation, data order and evaluation sampling.
        target_min: stop as soon as greedy eval accuracy reaches this (imperfect on purpose: RL
            needs reward variance inside groups, and headroom to improve).
        target_max: the upper end of the accepted band (above it little headroom is left).
        max_steps: stop here even if the target is not reached (the report says so).
        batch_size: reference solutions per SFT step.
        lr: AdamW learning rate (constant after a short warmup).
        warmup_steps: linear learning-rate warmup.
        eval_every: SFT steps between evaluations.
        eval_problems: eval-split problems in each evaluation.
        max_new_tokens: generation limit during evaluation.
    """

    task: str = "addition"
    model: str = "tiny-llama"
    difficulty: int | None = None
    task_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    target_min: float = 0.2
    target_max: float = 0.6
    max_steps: int = 2000
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 20
    eval_every: int = 25
    eval_problems: int = 128
    max_new_tokens: int = 48

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.target_min < self.target_max <= 1.0:
            problems.append(
                f"warmstart: need 0 <= target_min < target_max <= 1, got [{self.target_min}, {self.target_max}]"
            )
        for name in ("max_steps", "batch_size", "eval_every", "eval_problems", "max_new_tokens"):
            if int(getattr(self, name)) < 1:
                problems.append(f"warmstart.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            problems.append(f"warmstart.lr must be > 0, got {self.lr}")
        if problems:
            raise ConfigError("; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return spec_dict(self)

    def key(self) -> str:
        """Stable cache key: sha256 of the canonical JSON of the spec and the format version."""
        return spec_key(self, FORMAT_VERSION)


@dataclass
class WarmStartReport:
    """What a warm start reached: the metrics of its last evaluation and how it got there."""

    key: str
    steps: int
    reached_target: bool  # the final eval accuracy lies in [target_min, target_max]
    eval_accuracy: float
    step_accuracy: float
    format_rate: float
    seconds: float
    history: list[dict[str, float]]
    cached: bool = False
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sft_batch(policy, problems, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher-forcing tensors for ``prompt → solution + EOS``.

    Returns:
        ``(input_ids [B, L], attention_mask [B, L], labels [B, L])``, right-padded, with labels -100
        on prompt and padding tokens so that only completion tokens (EOS included) are learned.
    """
    import torch

    rows, label_rows = [], []
    for p in problems:
        prompt = policy.encode_prompt(p.prompt)
        completion = list(policy.tokenizer.encode(p.solution, add_special_tokens=False)) + [policy.eos_token_id]
        rows.append(prompt + completion)
        label_rows.append([-100] * len(prompt) + completion)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), policy.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, lab) in enumerate(zip(rows, label_rows)):
        ids[i, : len(r)] = torch.tensor(r)
        labels[i, : len(lab)] = torch.tensor(lab)
        attn[i, : len(r)] = 1
    return ids.to(device), attn.to(device), labels.to(device)


def _train(spec: WarmStartSpec, device: torch.device, progress: bool) -> tuple[Any, WarmStartReport]:
    import torch

    from ablate.models import load_policy
    from ablate.models.evaluate import evaluate
    from ablate.tasks import TASKS

    torch.manual_seed(spec.seed)
    kwargs: dict[str, Any] = dict(spec.task_options)
    if spec.difficulty is not None:
        kwargs["difficulty"] = spec.difficulty
    task = TASKS.get(spec.task)(seed=spec.seed, **kwargs)
    policy = load_policy(spec.model, seed=spec.seed, device=device)
    if getattr(policy, "use_chat_template", False):
        raise ConfigError(f"warmstart: model {spec.model!r} is pretrained; warm start only trains zoo models")
    model = policy.model
    optim = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / max(1, spec.warmup_steps)))
    eval_problems = task.sample("eval", spec.eval_problems, seed=spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=spec.max_steps, desc=f"warm start {spec.model} on {spec.task}", unit="step", leave=False)
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    last: dict[str, float] = {}
    step = 0
    for step in range(1, spec.max_steps + 1):
        model.train()
        problems = task.sample("train", spec.batch_size, seed=spec.seed * 1_000_003 + step)
        ids, attn, labels = sft_batch(policy, problems, device)
        out = model(input_ids=ids, attention_mask=attn, labels=labels)
        optim.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{out.loss.item():.3f}", acc=f"{last.get('accuracy', 0.0):.2f}")
        if step % spec.eval_every == 0 or step == spec.max_steps:
            last = evaluate(policy, task, eval_problems, max_new_tokens=spec.max_new_tokens, generator=gen)
            history.append({"step": float(step), "loss": float(out.loss.item()), **last})
            if last["accuracy"] >= spec.target_min:
                break
    if bar is not None:
        bar.close()
    model.eval()
    report = WarmStartReport(
        key=spec.key(),
        steps=step,
        reached_target=spec.target_min <= float(last.get("accuracy", 0.0)) <= spec.target_max,
        eval_accuracy=float(last.get("accuracy", 0.0)),
        step_accuracy=float(last.get("step_accuracy", 0.0)),
        format_rate=float(last.get("format_rate", 0.0)),
        seconds=time.perf_counter() - start,
        history=history,
    )
    return policy, report


def warm_start(
    spec: WarmStartSpec,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    progress: bool = False,
    tokenizer: str = "saved",
):
    """Build or reuse the warm start described by ``spec``.

    Args:
        spec: what to train (its :meth:`WarmStartSpec.key` names the cache entry).
        cache_dir: cache root (default :func:`default_cache_dir`); entries live in
            ``<cache_dir>/warmstart/<key>/``.
        device: where to train and where the returned policy lives.
        dtype: the returned policy's parameter dtype (None: float32, a trial's, see
            :func:`ablate.config.parameter_dtype`), whatever the cache entry holds: an entry built while
            torch's default dtype was float64 holds float64 weights, which would otherwise load as
            float64 and silently drop a study's bfloat16-rollout mismatch. The entry is written as trained.
        progress: show a progress bar while training.
        tokenizer: how the entry's tokenizer loads (``model.tokenizer``): ``saved`` (the character
            tokenizer the warm start was trained and evaluated with) or ``auto`` (transformers'
            ``AutoTokenizer``; see :mod:`ablate.models.checkpoint`). Not part of the cache key: the entry
            is the same.

    Returns:
        ``(policy, report)``: the warm-started :class:`~ablate.models.Policy`, loaded from the cache entry
        (also when this call built it), and its :class:`WarmStartReport` (``report.cached`` says whether
        the entry was there before this call).
    """
    import torch

    from ablate.models import load_policy

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / "warmstart" / spec.key()
    device = torch.device(device)
    dtype = dtype if dtype is not None else torch.float32

    def load_cached(cached: bool = True):
        report = WarmStartReport(**json.loads((final / "report.json").read_text()))
        report.cached = cached
        report.path = str(final)
        return load_policy(str(final / "policy"), device=device, dtype=dtype, tokenizer=tokenizer), report

    if (final / "report.json").exists():
        return load_cached()
    with file_lock(root / "warmstart" / f"{spec.key()}.lock"):
        if (final / "report.json").exists():  # built by another process while we waited
            return load_cached()
        policy, report = _train(spec, device, progress)
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        from ablate.models import save_policy

        save_policy(policy, tmp / "policy")
        (tmp / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True, default=str))
        (tmp / "report.json").write_text(json.dumps(report.to_dict(), indent=2))
        os.replace(tmp, final)
        del policy
        return load_cached(cached=False)  # the policy every later trial gets, not the one in memory
