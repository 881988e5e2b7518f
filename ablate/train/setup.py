"""Everything a trial holds before its first step: :func:`setup_trial` builds a :class:`TrialState`.

Order matters for reproducibility: torch's global seed is set from ``(seed, "init")`` before the
task, the policy, the learned PRM, the critic's head and the optimizer are built, always in this order.
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ablate.config import TrialConfig, autocast_dtype, parameter_dtype, resolve_device, rollout_autocast_dtype
from ablate.config.schema import task_options
from ablate.models import Policy, load_policy
from ablate.models.checkpoint import ATTN_IMPLEMENTATION
from ablate.models.heads import BackboneHead
from ablate.models.precision import use_float32_lm_head
from ablate.rewards import ComponentSpec, reward_components
from ablate.rewards.learned_prm import LearnedPRM, learned_prm_for_trial
from ablate.tasks import TASKS, Problem, Task
from ablate.train.seeds import derive_seed, trial_stream


class Critic(BackboneHead):
    """A value function: a copy of the policy's backbone with a scalar head (:class:`BackboneHead`).

    ``values[b, t]`` is the value of the state in which completion token ``t`` is chosen (the hidden
    state at input position ``P + t - 1``, the one whose logits sample token ``t``), as GAE expects.
    """

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_prompt_tokens: int) -> torch.Tensor:
        """[B, P + T] ids and mask → values [B, T] (float32; 0 where the completion mask is 0)."""
        values = self.completion_outputs(input_ids, attention_mask, num_prompt_tokens, state_before=True)  # (B, T)
        return values * attention_mask[:, num_prompt_tokens:].to(values.dtype)


@dataclass
class TrialState:
    """One trial's models, data and optimizer, and the counters a checkpoint saves.

    Attributes:
        config: the trial configuration.
        device: where the models live; amp_dtype: the trainer's autocast dtype, or None for full precision.
        rollout_amp_dtype: the rollout's autocast dtype (``rollout.dtype``), or None for full precision.
        measures_mismatch: the update recomputes the behaviour log-probs in the trainer's precision and
            logs ``mismatch/*``: the rollout's precision differs from the trainer's, or
            ``loss.rollout_correction`` is on. False otherwise, so that the defaults cost no extra forward.
        task: the task; train_pool / eval_problems: its train problems (sampled from each step) and
            the fixed eval problems (they depend on ``task.*`` only, never on the trial seed).
        policy: the policy being trained; warmstart_report: its warm start's report (empty when none ran).
        prm / prm_report: the learned PRM (``reward.prm.source=learned``), frozen, and its report; None / {}.
        ref_model: the frozen reference model of the KL term (``kl.placement != none``), else None.
        critic: the value function (``critic.enabled``), else None.
        optimizer / scheduler: AdamW over the policy (and critic) parameters, linear warmup.
        components: the reward table (:func:`ablate.rewards.reward_components`).
        on_policy: one epoch of one minibatch without KL, and no mismatch measured: the update's own
            detached log-probs are the behaviour log-probs, so the rollout skips its log-prob forward (as TRL does).
        beta: the current KL coefficient (adapted per step with ``kl.adaptive``).
        tokens_so_far / samples_so_far: generated tokens and completions of all steps so far.
        pool: the indices into ``train_pool`` that steps still draw from (all of them, unless
            ``algo.drop_solved_at`` removed solved prompts).
    """

    config: TrialConfig
    device: torch.device
    amp_dtype: torch.dtype | None
    rollout_amp_dtype: torch.dtype | None
    measures_mismatch: bool
    task: Task
    train_pool: list[Problem]
    eval_problems: list[Problem]
    policy: Policy
    warmstart_report: dict[str, Any]
    prm: LearnedPRM | None
    prm_report: dict[str, Any]
    ref_model: nn.Module | None
    critic: Critic | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    components: dict[str, ComponentSpec]
    on_policy: bool
    beta: float
    tokens_so_far: int = 0
    samples_so_far: int = 0
    pool: list[int] = field(default_factory=list)

    @property
    def model(self) -> nn.Module:
        """The policy's causal LM (the module the update trains)."""
        return self.policy.model


def _autocast_to(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager[Any]:
    return nullcontext() if dtype is None else torch.autocast(device_type=device.type, dtype=dtype)


def autocast(state: TrialState) -> AbstractContextManager[Any]:
    """The trainer's autocast context (a no-op in full precision)."""
    return _autocast_to(state.device, state.amp_dtype)


def rollout_autocast(state: TrialState) -> AbstractContextManager[Any]:
    """The rollout's autocast context (``rollout.dtype``; the trainer's when null)."""
    return _autocast_to(state.device, state.rollout_amp_dtype)


def build_task(config: TrialConfig) -> Task:
    """The task of ``config`` (``task.name`` with its difficulty, data seed and options)."""
    kwargs: dict[str, Any] = task_options(config.task)
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
        from ablate.train.warmstart import WarmStartSpec, warm_start

        ws = config.warmstart
        spec = WarmStartSpec(
            task=config.task.name,
            model=config.model.name,
            difficulty=config.task.difficulty,
            task_options=task_options(config.task),
            seed=ws.seed if ws.seed is not None else config.seed,
            target_min=ws.target_min,
            target_max=ws.target_max,
            max_steps=ws.max_steps,
            batch_size=ws.batch_size,
            lr=ws.lr,
            max_new_tokens=config.rollout.max_new_tokens,
        )
        policy, report = warm_start(spec, cache_dir=ws.cache_dir, device=device, dtype=parameter_dtype(config),
                                    progress=progress, tokenizer=config.model.tokenizer)
        return policy, report.to_dict()
    return load_policy(config.model.name, seed=config.seed, device=device, tokenizer=config.model.tokenizer), {}


def _reference_model(config: TrialConfig, model: nn.Module) -> nn.Module | None:
    """A frozen copy of the start policy's model when the KL term needs one (``kl.placement != none``)."""
    if config.kl.placement == "none":
        return None
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


#: The parameter names transformers' Trainer keeps out of weight decay (``Trainer.get_decay_parameter_names``:
#: biases and normalisation weights; tests/test_train.py checks these give its names on every zoo model).
NO_DECAY_PATTERNS = (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")


def decayed_parameter_names(model: nn.Module) -> set[str]:
    """The parameters of ``model`` that ``optim.decay_params: weights`` decays: transformers' rule (no
    parameter of an ``nn.LayerNorm``, none whose name matches :data:`NO_DECAY_PATTERNS`)."""
    from transformers.trainer_pt_utils import get_parameter_names

    return set(get_parameter_names(model, [nn.LayerNorm], list(NO_DECAY_PATTERNS)))


def _param_groups(model: nn.Module, o: Any, lr: float) -> list[dict[str, Any]]:
    """AdamW's groups over ``model``'s trainable parameters: one (every parameter decayed, or weight decay
    off), or, with ``optim.decay_params: weights``, the decayed ones and the rest at weight decay 0."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if o.weight_decay == 0 or o.decay_params == "all":
        return [{"params": [p for _, p in params], "lr": lr}]
    decay = decayed_parameter_names(model)
    groups = [{"params": [p for n, p in params if n in decay], "lr": lr},
              {"params": [p for n, p in params if n not in decay], "lr": lr, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _optimizer(
    config: TrialConfig, model: nn.Module, critic: Critic | None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the trainable policy parameters (``optim.lr``) and the critic (``critic_lr``), each split
    by ``optim.decay_params`` when weight decay is on (:func:`_param_groups`), with a linear warmup over ``optim.warmup_steps`` optimizer steps; ``optim.implementation`` picks torch's
    for-loop, foreach or fused AdamW (auto: torch's default)."""
    o = config.optim
    groups = _param_groups(model, o, o.lr)
    if critic is not None:
        groups += _param_groups(critic, o, config.critic_lr)
    impl = {"auto": {}, "for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    optimizer = torch.optim.AdamW(groups, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay,
                                  **impl[o.implementation])
    warm = o.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
    return optimizer, scheduler


def setup_trial(config: TrialConfig, progress: bool = False) -> TrialState:
    """Build the :class:`TrialState` of ``config``: task and problem pools, the (warm-started) policy,
    the learned PRM, the reference model, the critic, the optimizer and its scheduler.

    Sets torch's thread count when ``config.threads > 0`` and torch's global seed from ``(seed, "init")``.
    """
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    device = resolve_device(config)
    amp_dtype = autocast_dtype(config, device)
    rollout_amp_dtype = rollout_autocast_dtype(config, device)
    measures_mismatch = rollout_amp_dtype != amp_dtype or config.loss.rollout_correction != "none"
    torch.manual_seed(derive_seed(*trial_stream(config), "init"))
    task = build_task(config)
    train_pool = task.sample("train", config.task.train_size, seed=config.task.data_seed)
    eval_problems = task.sample("eval", config.eval.n_problems, seed=config.task.data_seed)
    policy, warmstart_report = build_policy(config, device, progress=progress)
    if config.model.attention != ATTN_IMPLEMENTATION:
        policy.model.set_attn_implementation(config.model.attention)
    if config.model.lm_head_dtype == "float32":
        use_float32_lm_head(policy.model)
    prm: LearnedPRM | None = None  # trained on the start policy
    prm_report: dict[str, Any] = {}
    if "prm" in config.reward.components and config.reward.prm.source == "learned":
        prm, prm_report = learned_prm_for_trial(
            config, policy, task, warmstart_report, device=device, progress=progress
        )
    ref_model = _reference_model(config, policy.model)
    critic = Critic(policy.model).to(device) if config.critic.enabled else None
    optimizer, scheduler = _optimizer(config, policy.model, critic)
    return TrialState(
        config=config, device=device, amp_dtype=amp_dtype, rollout_amp_dtype=rollout_amp_dtype,
        measures_mismatch=measures_mismatch, task=task, train_pool=train_pool,
        eval_problems=eval_problems, policy=policy, warmstart_report=warmstart_report, prm=prm,
        prm_report=prm_report, ref_model=ref_model, critic=critic, optimizer=optimizer, scheduler=scheduler,
        components=reward_components(config),
        on_policy=config.single_pass_update and not measures_mismatch,
        beta=config.kl.beta, pool=list(range(len(train_pool))),
    )
