"""How a trial maps onto TRL's ``GRPOTrainer`` (``engine.name: trl``): the ``GRPOConfig`` arguments of a
trial, the options TRL cannot honour (refused at validation), and the table ``docs/config.md`` shows.

Pure: nothing here imports TRL, so that ``ablate validate`` refuses an unmappable trial without it.
:func:`grpo_arguments` applies the map and :data:`TRL_MAP` says it in words; both are kept in one
place so that the table cannot drift from the code (``python -m ablate.config.docs`` renders it).

The unit of ``train.steps`` differs: one ablate RL step (a rollout, then ``algo.ppo_epochs`` x
``algo.minibatches`` optimizer steps) is :func:`optimizer_steps_per_rl_step` of TRL's global steps,
so a trial of ``train.steps`` RL steps is ``max_steps = train.steps x that`` in TRL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.config.device import autocast_dtype
from ablate.config.problems import ConfigProblem

if TYPE_CHECKING:
    from ablate.config.schema import TrialConfig

__all__ = ["AGGREGATION_LOSS_TYPES", "TRL_MAP", "TRL_REWARDS", "MapRow", "config_docs", "grpo_arguments", "loss_type",
           "trl_bf16", "optimizer_steps_per_rl_step", "reward_weights", "trl_refusals"]

#: ablate's loss aggregation -> TRL's ``loss_type`` with the same normalizer (one process, no gradient
#: accumulation: TRL's bnpo divides by the micro-batch's tokens as ablate's token-mean divides by the
#: minibatch's; dr_grpo by ``max_completion_length`` x sequences; luspo sums each sequence's tokens).
AGGREGATION_LOSS_TYPES: dict[str, str] = {
    "seq-mean-token-mean": "grpo",
    "token-mean": "bnpo",
    "seq-mean-token-sum-norm": "dr_grpo",
    "seq-mean-token-sum": "luspo",
}

#: The sequence-level reward components the TRL engine hands to TRL as reward functions (their weights
#: become ``reward_weights``); every other component is placed on tokens or needs the trainer's state.
TRL_REWARDS: tuple[str, ...] = ("final_answer", "partial", "format")

#: ablate's advantage estimators TRL computes: grpo (group mean, std by ``scale_rewards``) and dr_grpo
#: (the group mean alone, TRL's ``scale_rewards="none"``).
_ESTIMATORS = ("grpo", "dr_grpo")


@dataclass(frozen=True)
class MapRow:
    """One row of the map: ablate's option(s), the ``GRPOConfig`` field(s), how one becomes the other, and
    ``verdict``: *exact* (TRL computes what ablate does, to rounding; tests/test_trl_engine.py), *by design*
    (it differs, as ``how`` says) or *refused* (validation names it), per value where they differ."""

    ablate: str
    trl: str
    how: str
    verdict: str = "exact"


#: The map in words (docs/config.md); :func:`grpo_arguments` is the code that applies it.
TRL_MAP: tuple[MapRow, ...] = (
    MapRow("loss.aggregation", "loss_type",
           "seq-mean-token-mean → grpo; token-mean → bnpo (one process) or dapo (several, with one minibatch); "
           "seq-mean-token-sum-norm → dr_grpo; seq-mean-token-sum → luspo; prompt-mean, balanced-mean: refused", verdict="exact; refused: prompt-mean, balanced-mean"),
    MapRow("loss.ratio_level", "importance_sampling_level", "token → token; sequence (GSPO) → sequence; "
           "sequence_token: refused", verdict="exact; refused: sequence_token"),
    MapRow("loss.clip_low, loss.clip_high", "epsilon, epsilon_high", "as they are (surrogate ppo only; "
           "loss.dual_clip refused: TRL's delta caps the ratio, not the negative-advantage loss)", verdict="exact; refused: loss.dual_clip, surrogates but ppo"),
    MapRow("kl.placement, kl.beta, kl.estimator", "beta, use_bias_correction_kl",
           "loss → beta = kl.beta with TRL's k3 (estimator auto or k3), use_bias_correction_kl = false; "
           "none → beta = 0; reward (token-level KL rewards), kl.adaptive: refused", verdict="exact; refused: reward placement, k1/k2 in the loss, adaptive"),
    MapRow("algo.advantage, algo.adv_std", "scale_rewards",
           "grpo with adv_std group/batch/none → group/batch/none; dr_grpo → none; "
           "adv_mean batch, rloo, gae, grpo_process: refused", verdict="by design: TRL adds 1e-4 to the group std, ablate 1e-6; refused: the other estimators"),
    MapRow("algo.ppo_epochs", "num_iterations", "as it is; by design, with algo.minibatches > 1: TRL splits a "
           "generation batch into minibatches once and replays that split every epoch, ablate reshuffles each "
           "epoch (the same completions, in another grouping from epoch 2 on)", verdict="exact at 1 minibatch; by design with several"),
    MapRow("algo.minibatches", "steps_per_generation, per_device_train_batch_size",
           "steps_per_generation = minibatches; per-device batch = prompts x group / minibatches / "
           "engine.processes; gradient_accumulation_steps = 1"),
    MapRow("engine.processes", "(the launcher)", "N > 1: torchrun --standalone --nproc_per_node N (gloo on CPU, "
           "NCCL on GPU); rank 0 evaluates, logs and writes the history beside TRL's checkpoints", verdict="exact with 1 process; by design above (reductions over ranks)"),
    MapRow("rollout.group_size, rollout.prompts_per_step", "num_generations, generation_batch_size",
           "num_generations = group_size; a generation batch = prompts_per_step x group_size completions"),
    MapRow("rollout.max_new_tokens, rollout.temperature, rollout.top_p",
           "max_completion_length, temperature, top_p", "as they are; top_k = 0"),
    MapRow("train.steps", "max_steps", "train.steps x ppo_epochs x minibatches (TRL counts optimizer steps)", verdict="exact"),
    MapRow("train.checkpoint_every", "save_steps", "checkpoint_every x ppo_epochs x minibatches"),
    MapRow("reward.components and weights", "reward_funcs, reward_weights",
           "final_answer, partial, format (mode sequence) as TRL reward functions with their weights; a plugin "
           "component as one too, its token rewards summed per completion (exact under grpo and dr_grpo, which sum "
           "them too; a plugin that reads log-probs gets none); prm, kl, local format, missing_eos, soft_overlong, "
           "overlong_filter: refused", verdict="exact; refused: token-placed built-ins"),
    MapRow("optim.lr, optim.betas, optim.eps, optim.weight_decay, optim.max_grad_norm",
           "learning_rate, adam_beta1/2, adam_epsilon, weight_decay, max_grad_norm",
           "exact: as they are, optim = adamw_torch, lr_scheduler_type = constant; both decay every parameter but "
           "biases and norm weights (optim.decay_params: weights, transformers' rule; all: refused); "
           "max_grad_norm null (no clipping) = TRL's 0"),
    MapRow("loss.entropy_coef", "entropy_coef", "as it is with loss.aggregation token-mean (TRL's entropy "
           "bonus is a token mean); with another aggregation: refused", verdict="exact with token-mean on 1 process; refused otherwise"),
    MapRow("engine.positions", "(a forward pre-hook on the policy and reference)",
           "exact to rounding: mask passes the position ids counted over the attention mask, what generation used "
           "(a left-padded prompt is trained where it was sampled); trl: TRL's own forward (none passed)"),
    MapRow("model.dtype", "bf16 (with fp16 off)",
           "bf16 mixed precision where ablate autocasts to bfloat16 (auto: on CUDA only; bfloat16: on every device), "
           "off for float32; float32 weights and optimizer state either way, as ablate's (accelerate autocasts the "
           "model's forward, in generation and in the loss; ablate autocasts its own forward calls)",
           verdict="same precision; values to bfloat16 rounding"),
    MapRow("seed, stream", "seed", "the trial's random stream (the same seed gives the same TRL run)"),
    MapRow("model, warmstart, task, eval", "model, processing_class, train_dataset, callbacks",
           "the same (warm-started) model and tokenizer, the task's train problems as a datasets.Dataset, "
           "ablate's greedy evaluation on the same held-out problems every eval.every RL steps"),
)


def reward_weights(c: TrialConfig) -> dict[str, float]:
    """Each reward component's weight (``reward.<name>.weight``; a plugin component's is 1), in
    ``reward.components`` order."""
    return {name: float(getattr(c.reward, name).weight) if hasattr(c.reward, name) else 1.0
            for name in c.reward.components}


def optimizer_steps_per_rl_step(c: TrialConfig) -> int:
    """TRL global (optimizer) steps per ablate RL step: ``algo.ppo_epochs x algo.minibatches``."""
    return c.algo.ppo_epochs * c.algo.minibatches


def trl_bf16(c: TrialConfig, device_type: str) -> bool:
    """Whether TRL's trainer runs in bf16 mixed precision (``TrainingArguments.bf16``) for trial ``c`` on a
    device of type ``device_type`` ("cpu", "cuda", ...): exactly where ablate autocasts to bfloat16, by its
    one rule (:func:`ablate.config.device.autocast_dtype`: ``model.dtype`` bfloat16 on every device, auto
    on CUDA)."""
    import torch

    return autocast_dtype(c, torch.device(device_type)) is not None


def _kl_beta(c: TrialConfig) -> float:
    return float(c.kl.beta) if c.kl.placement == "loss" else 0.0


def _scale_rewards(c: TrialConfig) -> str:
    return "none" if c.algo.advantage == "dr_grpo" else c.algo.adv_std


def loss_type(c: TrialConfig) -> str:
    """TRL's ``loss_type`` of trial ``c`` (:data:`AGGREGATION_LOSS_TYPES`; token-mean over several processes is
    dapo, which divides by the generation batch's tokens across processes, as ablate divides by the
    minibatch's when the generation batch is one minibatch)."""
    if c.loss.aggregation == "token-mean" and c.engine.processes > 1:
        return "dapo"
    return AGGREGATION_LOSS_TYPES[c.loss.aggregation]


def grpo_arguments(c: TrialConfig) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments of trial ``c`` that decide what it computes (the TRL engine adds
    where it writes, its device and its bookkeeping). Assumes :func:`trl_refusals` found nothing."""
    k = optimizer_steps_per_rl_step(c)
    return {
        "loss_type": loss_type(c),
        "importance_sampling_level": c.loss.ratio_level,
        "epsilon": float(c.loss.clip_low),
        "epsilon_high": float(c.loss.clip_high),
        "beta": _kl_beta(c),
        "use_bias_correction_kl": False,
        "scale_rewards": _scale_rewards(c),
        "num_iterations": c.algo.ppo_epochs,
        "steps_per_generation": c.algo.minibatches,
        "per_device_train_batch_size": c.completions_per_step // c.algo.minibatches // c.engine.processes,
        "gradient_accumulation_steps": 1,
        "num_generations": c.rollout.group_size,
        "max_completion_length": c.rollout.max_new_tokens,
        "temperature": float(c.rollout.temperature),
        "top_p": float(c.rollout.top_p),
        "top_k": 0,
        "max_steps": c.train.steps * k,
        "save_steps": max(1, c.train.checkpoint_every * k),
        "reward_weights": list(reward_weights(c).values()),
        "learning_rate": float(c.optim.lr),
        "adam_beta1": float(c.optim.betas[0]),
        "adam_beta2": float(c.optim.betas[1]),
        "adam_epsilon": float(c.optim.eps),
        "weight_decay": float(c.optim.weight_decay),
        # null (no clipping) is transformers' 0 ("set to 0 to disable"); ablate clips to inf, which changes nothing
        "max_grad_norm": float(c.optim.max_grad_norm) if c.optim.max_grad_norm is not None else 0.0,
        "optim": "adamw_torch",
        "lr_scheduler_type": "constant",
        "entropy_coef": float(c.loss.entropy_coef),
        "mask_truncated_completions": False,
        "multi_objective_aggregation": "sum_then_normalize",
    }


def _refuse(problems: list[ConfigProblem], path: str, what: str, fix: str = "") -> None:
    problems.append(ConfigProblem(path, (
        f"engine.name=trl: TRL's GRPOTrainer cannot honour {what}; engine.name=ablate supports it"
        + (f" (or {fix})" if fix else ""))))


def _reward_refusals(c: TrialConfig, out: list[ConfigProblem]) -> None:
    from ablate.registry import BUILTIN_NAMES

    # a plugin component is a TRL reward function too: its [B, T] rewards summed per completion (issue 55)
    others = [n for n in c.reward.components if n not in TRL_REWARDS and n in BUILTIN_NAMES["reward component"]]
    if others:
        _refuse(out, "reward.components", f"the reward components {', '.join(others)} (TRL's reward functions "
                f"give one reward per completion; it takes {', '.join(TRL_REWARDS)})")
    if "format" in c.reward.components and c.reward.format.mode != "sequence":
        _refuse(out, "reward.format.mode", f"reward.format.mode={c.reward.format.mode} (a token-placed format "
                "penalty)", "reward.format.mode=sequence")
    if c.reward.overlong_filter:
        _refuse(out, "reward.overlong_filter", "reward.overlong_filter=true as ablate defines it")


def _advantage_refusals(c: TrialConfig, out: list[ConfigProblem]) -> None:
    a = c.algo
    if a.advantage not in _ESTIMATORS:
        _refuse(out, "algo.advantage", f"algo.advantage={a.advantage}", "algo.advantage=grpo or dr_grpo")
    if a.adv_mean != "group":
        _refuse(out, "algo.adv_mean", f"algo.adv_mean={a.adv_mean} (TRL subtracts the group's mean)")
    if a.whiten:
        _refuse(out, "algo.whiten", "algo.whiten=true")
    for flag in ("dynamic_sampling", "zero_variance_filter"):
        if getattr(a, flag):
            _refuse(out, f"algo.{flag}", f"algo.{flag}=true (TRL does not resample or drop groups)")
    if a.drop_solved_at is not None:
        _refuse(out, "algo.drop_solved_at", "algo.drop_solved_at (TRL's sampler draws from every prompt)")
    if c.critic.enabled:
        _refuse(out, "critic.enabled", "a critic (GAE with a value function)")


def _loss_refusals(c: TrialConfig, out: list[ConfigProblem]) -> None:
    lo = c.loss
    if lo.surrogate != "ppo":
        _refuse(out, "loss.surrogate", f"loss.surrogate={lo.surrogate} as ablate defines it", "loss.surrogate=ppo")
    if lo.dual_clip is not None:
        _refuse(out, "loss.dual_clip", "loss.dual_clip (TRL's delta caps the ratio instead)")
    if lo.aggregation not in AGGREGATION_LOSS_TYPES:
        _refuse(out, "loss.aggregation", f"loss.aggregation={lo.aggregation}",
                f"one of {', '.join(AGGREGATION_LOSS_TYPES)}")
    if lo.ratio_level not in ("token", "sequence"):
        _refuse(out, "loss.ratio_level", f"loss.ratio_level={lo.ratio_level}", "token or sequence")
    if lo.aggregation == "seq-mean-token-sum-norm" and lo.max_len not in (None, c.rollout.max_new_tokens):
        _refuse(out, "loss.max_len", "a Dr. GRPO constant other than rollout.max_new_tokens", "loss.max_len=null")
    if lo.entropy_coef != 0.0 and lo.aggregation != "token-mean":
        _refuse(out, "loss.entropy_coef", f"an entropy bonus aggregated by {lo.aggregation} (TRL's is a token "
                "mean)", "loss.aggregation=token-mean")
    if lo.rollout_correction != "none":
        _refuse(out, "loss.rollout_correction", f"loss.rollout_correction={lo.rollout_correction}")
    if c.kl.placement == "reward":
        _refuse(out, "kl.placement", "kl.placement=reward (a per-token KL reward)", "kl.placement=loss")
    if c.kl.placement == "loss" and c.kl.estimator not in ("auto", "k3"):
        _refuse(out, "kl.estimator", f"kl.estimator={c.kl.estimator} in the loss (TRL uses k3)", "kl.estimator=k3")
    if c.kl.adaptive:
        _refuse(out, "kl.adaptive", "an adaptive KL coefficient")


def _run_refusals(c: TrialConfig, out: list[ConfigProblem]) -> None:
    if c.train.packed:
        _refuse(out, "train.packed", "a packed population (ablate run --pack)")
    if c.rollout.dtype is not None:
        _refuse(out, "rollout.dtype", "a rollout precision apart from the trainer's")
    if c.rollout.behaviour_logp != "recompute":
        _refuse(out, "rollout.behaviour_logp", f"rollout.behaviour_logp={c.rollout.behaviour_logp}")
    if c.rollout.cuda_graph:
        _refuse(out, "rollout.cuda_graph", "ablate's CUDA-graph decode")
    if c.model.lm_head_dtype is not None:
        _refuse(out, "model.lm_head_dtype", "model.lm_head_dtype as ablate applies it")
    minibatch = c.completions_per_step // c.algo.minibatches
    if minibatch % c.engine.processes:
        _refuse(out, "engine.processes", f"minibatches of {minibatch} completions split "
                f"over {c.engine.processes} processes", "a process count that divides the minibatch")
    if c.engine.processes > 1 and c.loss.aggregation == "token-mean" and c.algo.minibatches > 1:
        _refuse(out, "engine.processes", "token-mean over several processes with algo.minibatches > 1 (TRL's "
                "dapo then divides by the mean tokens per minibatch, not the minibatch's own)", "algo.minibatches=1")
    if c.engine.processes > 1 and c.loss.entropy_coef:
        _refuse(out, "loss.entropy_coef", "an entropy bonus over several processes (TRL's is a mean of each "
                "process's token mean, not the minibatch's token mean)", "engine.processes=1")
    if c.optim.warmup_steps:
        _refuse(out, "optim.warmup_steps", "ablate's warmup schedule ((s+1)/warmup; TRL's is s/warmup)")
    if c.optim.weight_decay > 0 and c.optim.decay_params == "all":
        _refuse(out, "optim.decay_params", "optim.decay_params=all (transformers never decays biases and norm "
                "weights)", "optim.decay_params=weights")


def config_docs() -> list[str]:
    """The ``engine.name: trl`` section of ``docs/config.md``: :data:`TRL_MAP`, the rows the code applies."""
    from ablate.config.docs import cell

    out = ["## engine.name: trl — the map to TRL's GRPOConfig\n"]
    out.append("A trial with `engine.name: trl` is trained by TRL's `GRPOTrainer` (`pip install 'ablate[trl]'`). "
               "Its options become `GRPOConfig` arguments by these rows (`ablate/engines/trl_map.py`, the code "
               "that applies them); an option TRL cannot honour is refused at `ablate validate` (exit 2), never "
               "ignored. Where the two trainers' definitions differ, benchmarks/RESULTS.md's equivalence table "
               "says so.\n")
    out.append("| ablate | GRPOConfig | how | exact, by design or refused |")
    out.append("|---|---|---|---|")
    out.extend(f"| `{cell(r.ablate)}` | `{cell(r.trl)}` | {cell(r.how)} | {cell(r.verdict)} |" for r in TRL_MAP)
    out.append("")
    return out


def trl_refusals(c: TrialConfig) -> list[ConfigProblem]:
    """The options of ``c`` that TRL's GRPOTrainer cannot honour (empty unless ``engine.name=trl``).

    Each problem names the option, says that the trl engine cannot honour it and that engine.name=ablate
    can; ``ablate validate`` and ``ablate run`` refuse such a trial with exit 2 before anything is written.
    """
    out: list[ConfigProblem] = []
    if c.engine.name != "trl":
        return out
    for check in (_reward_refusals, _advantage_refusals, _loss_refusals, _run_refusals):
        check(c, out)
    return out
