"""The sections of a trial configuration: one frozen pydantic model per dotted prefix (``loss.*``, ``kl.*``).

Every field carries a one-line description with its allowed values, why you would pick each, and
the paper it comes from; ``docs/config.md`` is generated from them (``python -m ablate.config.docs``).
"""

from __future__ import annotations

import json
import typing
from typing import Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from ablate.config.validators import check_json_mapping, check_kl_estimator, check_model_name, registered

__all__ = [
    "AlgoConfig",
    "CriticConfig",
    "EvalConfig",
    "FinalAnswerRewardConfig",
    "FormatRewardConfig",
    "KLConfig",
    "LossConfig",
    "MissingEOSRewardConfig",
    "ModelConfig",
    "OptimConfig",
    "PRMRewardConfig",
    "PartialRewardConfig",
    "RewardConfig",
    "RolloutConfig",
    "Section",
    "SoftOverlongRewardConfig",
    "TaskConfig",
    "TrainConfig",
    "WarmstartConfig",
    "one_line",
]


class Section(BaseModel):
    """Base of every section: immutable, unknown keys rejected, defaults validated, no NaN/inf."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    def __hash__(self) -> int:
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))


def one_line(text: str) -> str:
    """Join a description written over several source lines."""
    return " ".join(text.split())


class TaskConfig(Section):
    """``task``: what the policy learns to solve (see ``ablate tasks``)."""

    name: typing.Annotated[str, registered("task")] = Field(
        "addition",
        description=one_line("""Task to train and evaluate on, by registered name (`ablate tasks` lists them with an
        example); `jsonl` reads your own problems from a JSON-lines file named in task.options."""),
    )
    difficulty: int | None = Field(
        None,
        ge=1,
        description=one_line("""The task's difficulty knob (digits of an addition, operations of a chain, numbers of a
        countdown): larger is harder; null = the task's default (`ablate tasks` shows each task's knob
        and range). Pick it so that the warm-started policy lands in the warm start's accuracy band."""),
    )
    train_size: int = Field(
        10_000,
        ge=1,
        strict=True,
        description=one_line("""Problems in the train pool that RL prompts are drawn from (generated with
        task.data_seed, disjoint from the eval split; for jsonl, at most the file's train prompts). Small
        pools let RL memorize."""),
    )
    eval_size: int = Field(
        500,
        ge=1,
        strict=True,
        description="Problems in the held-out eval split; eval.n_problems of them are evaluated.",
    )
    data_seed: int = Field(
        0,
        ge=0,
        strict=True,
        description=one_line("""Seed of the problem generator, kept apart from the trial seed so that every arm and
        seed of a study trains and is evaluated on the same splits (paired comparisons)."""),
    )
    options: typing.Annotated[dict[str, Any], AfterValidator(check_json_mapping)] = Field(
        default_factory=dict,
        description=one_line("""Task-specific settings passed to the task, e.g. {path: data.jsonl, extract: last_number}
        for jsonl; see `ablate tasks` for each task's options."""),
    )
    dataset: str | None = Field(
        None,
        min_length=1,
        description=one_line("""The dataset of a task that hosts many, passed to it as its dataset option: for
        reasoning_gym the generator's name (e.g. basic_arithmetic; task.options then hold the generator's
        configuration). null: the task has one."""),
    )


class ModelConfig(Section):
    """``model``: the policy network (see ``ablate models``)."""

    name: typing.Annotated[str, AfterValidator(check_model_name)] = Field(
        "tiny-llama",
        description=one_line("""Policy model: a zoo name (`ablate models` lists them with sizes; the tiny ones train
        on 2 CPU cores) or the path of a local Hugging Face causal-LM checkpoint directory (model plus
        tokenizer). The trial key records the path, not the weights."""),
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description=one_line("""Compute precision. auto: bfloat16 autocast on CUDA, float32 elsewhere; float32: never
        autocast (bit-reproducible on one processor model, not across models; slower on GPU); bfloat16:
        autocast on every device (on CPU see model.attention). Weights and optimizer state stay float32 in every mode."""),
    )
    lm_head_dtype: Literal["float32"] | None = Field(
        None,
        description=one_line("""Precision of the LM head (the projection to vocabulary logits) wherever the policy runs
        (rollout, update, evaluation). null: the same as model.dtype; float32: the head is computed in
        float32 even under bfloat16 autocast, which shrinks the rollout/trainer log-prob mismatch at the
        cost of a float32 [tokens x vocabulary] matmul (ScaleRL, Khatri et al. 2025, "FP32 precision at the
        LM head"). Changes nothing when the model already runs in float32."""),
    )
    attention: Literal["sdpa", "eager"] = Field(
        "sdpa",
        description=one_line("""Attention kernel of the model's forward passes (update, behaviour log-probs, reference
        and critic; the lean rollout decoder has its own). sdpa: torch's scaled_dot_product_attention;
        eager: transformers' matmul + softmax attention. The two agree to float rounding, not bitwise (a
        test compares log-probs and gradients). On CPU, torch's sdpa is slow under bfloat16 autocast:
        CPU time per RL step, model.dtype=bfloat16 with eager / float32 with sdpa, quickstart settings,
        AMD EPYC, median of 10 interleaved steps: 0.90 tiny-llama, 0.76 small-llama, 1.10 micro-llama
        (bfloat16 with sdpa: 1.07, 0.87, 1.55; benchmarks/bench_precision.py). bfloat16 changes the
        arithmetic; studies/cpu_bf16.yaml found bfloat16 with eager equivalent to float32 within 5 points
        (16 seeds, tiny-llama)."""),
    )
    tokenizer: Literal["saved", "auto"] = Field(
        "saved",
        description=one_line("""How the tokenizer of a loaded checkpoint (a cached warm start, or a checkpoint directory
        as model.name) is loaded. saved: as it was saved (the zoo's character tokenizer from its tokenizer.json,
        checked against the ids recorded for a probe text), so a trial sees the prompts its warm start was
        trained and evaluated on; auto: transformers' AutoTokenizer, which (transformers 5) gives a qwen2
        checkpoint Qwen2Tokenizer, whose byte-level pre-tokenizer silently drops every space and newline of
        a prompt: what every trial from tiny-qwen2's cached warm start computed before issue 54 (basic_arithmetic
        in generalization: 0.006 at step 0 from a warm start that scored 0.203), kept to reproduce those
        trials. Left out of the trial key where it cannot matter (no checkpoint loaded, a Llama or GPT-2 zoo
        model, or the digit-and-operator prompts of addition, chain and countdown)."""),
    )


class WarmstartConfig(Section):
    """``warmstart``: supervised fine-tuning on reference solutions before RL, cached on disk."""

    enabled: bool = Field(
        True,
        strict=True,
        description=one_line("""SFT the model on the task's reference solutions until its eval accuracy is in
        [target_min, target_max] before RL. A randomly initialised zoo model almost never earns a reward,
        so RL would have no signal; false suits pretrained checkpoints that already solve some problems."""),
    )
    target_min: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description=one_line("""Lower end of the warm start's target eval accuracy: RL needs reward variance inside
        groups, and below ~0.1 most GRPO groups are all-wrong and give no gradient."""),
    )
    target_max: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description=one_line("""Upper end of the target eval accuracy: above it little headroom is left for RL, so
        arms of a study can hardly differ."""),
    )
    max_steps: int = Field(
        2000,
        ge=1,
        strict=True,
        description="Most SFT optimizer steps, whether or not the accuracy band is reached.",
    )
    batch_size: int = Field(32, ge=1, strict=True, description="Reference solutions per SFT optimizer step.")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate of the warm start.")
    seed: int | None = Field(
        0,
        ge=0,
        description=one_line("""Which warm start each trial starts from. An integer (shared): one warm start, trained
        with that seed, built once and cached, shared by every arm and seed of a study; seed-to-seed
        variation then measures RL noise alone, from one start policy (the usual choice: cheap, and
        arms are compared from the same start). null (per trial): each trial seed starts from its own
        warm start, trained with the trial seed and cached per seed, so that seed-to-seed variation
        also covers the start policy and a finding holds over start policies, not for one of them; it
        costs one warm start per seed. A learned PRM (reward.prm.source=learned) follows the same
        warm-start seed."""),
    )
    cache_dir: str | None = Field(
        None,
        description=one_line("""Where warm starts are cached (keyed by a hash of everything that determines them);
        null = the default cache folder ($ABLATE_CACHE, else ~/.cache/ablate). Not part of the trial key."""),
    )


class RolloutConfig(Section):
    """``rollout``: how completions are sampled at each RL step."""

    group_size: int = Field(
        8,
        ge=1,
        strict=True,
        description=one_line("""Completions sampled per prompt (G). Group estimators (grpo, dr_grpo, rloo, grpo_process)
        compare each completion with the rest of its group, so they need G >= 2; a larger G gives a
        lower-variance baseline and fewer all-equal groups at G times the sampling cost (DeepSeekMath
        uses 64, DAPO 16)."""),
    )
    prompts_per_step: int = Field(
        8,
        ge=1,
        strict=True,
        description="Prompts per RL step: a step trains on prompts_per_step x group_size completions (64).",
    )
    max_new_tokens: int = Field(
        64,
        ge=1,
        strict=True,
        description=one_line("""Longest completion in tokens; a completion that reaches it without EOS is truncated
        (see the missing_eos and soft_overlong rewards, reward.overlong_filter). Also Dr. GRPO's normalizer by default
        (loss.max_len)."""),
    )
    temperature: float = Field(
        1.0,
        gt=0,
        description=one_line("""Sampling temperature; the behaviour log-probs use the same scaling, so the ratio is 1
        before the first update. 1.0 samples the policy itself (what the policy gradient assumes);
        lower explores less."""),
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description=one_line("""Nucleus sampling: sample only from the smallest set of tokens whose probability
        reaches top_p. 1.0 = off; below 1 the samples come from a truncated distribution, so the
        training objective is slightly off-policy."""),
    )
    dtype: Literal["float32", "bfloat16"] | None = Field(
        None,
        description=one_line("""Precision of the rollout (sampling and its behaviour log-probs), apart from the
        trainer's (model.dtype). null: the same as the trainer; bfloat16: sample under bfloat16 autocast
        (weights stay float32) while the trainer may run in float32, as a bf16 inference engine (vLLM, SGLang)
        next to an fp32 trainer; float32: sample without autocast. A different precision makes the rollout
        slightly off-policy: the trainer then recomputes the behaviour log-probs of the sampled tokens in its
        own precision (they become PPO's old log-probs) and logs the mismatch (mismatch/*); see
        loss.rollout_correction (Yao et al. 2025, "Your efficient RL framework secretly brings you
        off-policy RL training"). Speed: on an Intel Xeon with AMX-BF16 (one thread), bfloat16 autocast made
        a whole RL step 1.95-2.33x slower than float32 for every zoo model up to small-llama (median of 10
        steps each, benchmarks/RESULTS.md): on CPU it is for studying the mismatch, not for speed."""),
    )
    behaviour_logp: Literal["recompute", "sampler"] = Field(
        "recompute",
        description=one_line("""Where PPO's old (behaviour) log-probs come from. recompute: one no-grad forward over
        each finished rollout, as the training forward computes them (TRL, verl's default). sampler: the
        log-softmax of the decode loop's own logits at each sampled token, as an inference engine reports
        them; no extra forward, equal to the recomputed values up to float rounding (~1e-6; the decoder's
        attention kernel differs from the training forward's), so the first minibatch's ratios are 1 up to
        that rounding. Unused when the update is on-policy (one epoch, one minibatch, no KL, no precision
        mismatch): the update's own log-probs are used then. With rollout.dtype set, the sampler's values
        are in the rollout's precision, like the recomputed ones. It saves one forward per rollout;
        studies/behaviour_logp.yaml found it equivalent to recompute within 5 points of accuracy
        (-0.35 [-1.25, 0.547], paired 95% CI, 8 seeds; the same accuracy in 6 of them)."""),
    )
    cuda_graph: bool = Field(
        False,
        strict=True,
        description=one_line("""Run the decode loop as one captured CUDA graph per step (ablate/models/decode_graph.py):
        one launch per generated token instead of a few hundred, for Llama-family models on CUDA (the
        lean decoder's models; others, and populations, decode as usual). The draws are the same; the
        attention runs over the whole preallocated cache and prompts are left-padded to a multiple of 16
        tokens, so results differ from the eager loop in float rounding: part of the trial key when
        true. A worker process captures a graph once per model shape and decode shape (batch, prompt
        bucket, max_new_tokens, sampling options), over its own copy of the weights, and replays it at
        every later rollout of that shape, the next trials' included (the model's weights are copied in
        first; perf/graph_capture_s: the seconds this trial spent capturing so far, 0 where it reused
        earlier trials' graphs). Off CUDA the same static loop runs eagerly, without speed-up (what the
        CPU tests check)."""),
    )


class FinalAnswerRewardConfig(Section):
    """``reward.final_answer``: correctness of the final answer, on the last active token."""

    weight: float = Field(
        1.0,
        description="Scale of the final-answer reward: weight x (1 if the answer is correct else 0).",
    )


class PRMRewardConfig(Section):
    """``reward.prm``: a process reward for each reasoning step, on the last token of the step."""

    weight: float = Field(1.0, description="Scale of every step reward of the process reward model.")
    source: Literal["oracle", "noisy", "learned"] = Field(
        "oracle",
        description=one_line("""Where step labels come from. oracle: the task's exact step checker (an upper bound on
        what a PRM can give); noisy: oracle labels flipped with probability flip_prob (to study how PRM
        quality matters); learned: a small classifier on the policy's architecture trained on oracle-
        labelled warm-start samples (a realistic PRM, Lightman et al. 2024)."""),
    )
    flip_prob: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="Probability that a step label is flipped when source is noisy (0.5 = no information).",
    )
    correct_reward: float = Field(1.0, description="Reward of a step judged correct, before the weight.")
    incorrect_reward: float = Field(
        0.0,
        description="Reward of a step judged wrong, before the weight (e.g. -1 to punish wrong steps).",
    )
    normalize: bool = Field(
        True,
        strict=True,
        description=one_line("""Divide each step reward by the reference solution's number of steps, so that a fully
        correct solution's step rewards sum to correct_reward (comparable to final_answer); false gives
        long solutions more total reward."""),
    )
    learned_samples: int = Field(
        2048,
        ge=8,
        strict=True,
        description=one_line("""source=learned: completions sampled from the start policy at temperature 1 on train
        problems (4 per problem), whose steps the task's step checker labels to train the PRM; a fifth of
        the problems is held out to measure it."""),
    )
    learned_steps: int = Field(
        200,
        ge=0,
        strict=True,
        description=one_line("""source=learned: fine-tuning steps of the whole PRM (binary cross-entropy per step),
        after its head was fitted as a linear probe on the frozen start policy; 0 = the probe alone."""),
    )
    learned_batch_size: int = Field(
        64, ge=1, strict=True, description="source=learned: completions per optimizer step of the PRM classifier."
    )
    learned_lr: float = Field(
        3e-4,
        gt=0.0,
        description=one_line("""source=learned: AdamW learning rate of the PRM (its backbone starts from the start
        policy's weights, its head from the linear probe). The trained PRM is cached beside the warm
        starts, keyed by the start policy, the task, these settings and the warm-start seed."""),
    )


class FormatRewardConfig(Section):
    """``reward.format``: whether the completion follows the task's format (tags, delimiters)."""

    weight: float = Field(
        0.1,
        description=one_line("""Scale of the format reward; small next to final_answer so that it shapes the format
        without outweighing correctness."""),
    )
    mode: Literal["sequence", "local"] = Field(
        "sequence",
        description=one_line("""sequence: one reward for the whole completion's format, on its last token; local: a
        penalty on the tokens where the format breaks (a token-level signal)."""),
    )


class PartialRewardConfig(Section):
    """``reward.partial``: partial credit (e.g. fraction of correct digits), on the last token."""

    weight: float = Field(0.5, description="Scale of the partial-credit reward (a fraction in [0, 1]).")


class MissingEOSRewardConfig(Section):
    """``reward.missing_eos``: a penalty for completions cut at the length limit without EOS."""

    weight: float = Field(
        1.0,
        description=one_line("""Scale of the missing-EOS penalty: -weight on the last token of a completion that hit
        rollout.max_new_tokens without EOS. Discourages rambling without touching finished answers."""),
    )


class SoftOverlongRewardConfig(Section):
    """``reward.soft_overlong``: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13)."""

    weight: float = Field(1.0, description="Scale of the soft overlong penalty (which goes from 0 to -1).")
    buffer: int = Field(
        16,
        ge=1,
        strict=True,
        description=one_line("""DAPO's L_cache: a completion longer than rollout.max_new_tokens - buffer gets a penalty
        growing linearly to -1 at max_new_tokens (at most max_new_tokens; DAPO uses 4k of 20k tokens)."""),
    )


class RewardConfig(Section):
    """``reward``: which reward components are summed into ``token_rewards``, and their settings."""

    components: tuple[typing.Annotated[str, registered("reward component")], ...] = Field(
        ("final_answer",),
        description=one_line("""Reward components summed into token_rewards [B, T], each placed at the token it credits:
        final_answer (last token), prm (last token of each step), kl (every token; listed exactly when
        kl.placement is reward), format (last token, or local), partial (last token), missing_eos and
        soft_overlong (length penalties, last token). The reward-granularity factor of a study."""),
    )
    final_answer: FinalAnswerRewardConfig = Field(
        default_factory=FinalAnswerRewardConfig, description="Settings of the final_answer component."
    )
    prm: PRMRewardConfig = Field(default_factory=PRMRewardConfig, description="Settings of the prm component.")
    format: FormatRewardConfig = Field(
        default_factory=FormatRewardConfig, description="Settings of the format component."
    )
    partial: PartialRewardConfig = Field(
        default_factory=PartialRewardConfig, description="Settings of the partial component."
    )
    missing_eos: MissingEOSRewardConfig = Field(
        default_factory=MissingEOSRewardConfig, description="Settings of the missing_eos component."
    )
    soft_overlong: SoftOverlongRewardConfig = Field(
        default_factory=SoftOverlongRewardConfig, description="Settings of the soft_overlong component."
    )
    overlong_filter: bool = Field(
        False,
        strict=True,
        description=one_line("""DAPO's overlong filtering: truncated completions (no EOS) are masked out of the loss,
        so that a correct reasoning cut off by the length limit is not punished as wrong."""),
    )
    overlong_baseline: Literal["exclude", "include"] = Field(
        "exclude",
        description=one_line("""With overlong_filter: whether a truncated completion's reward still counts in its
        group's baseline (the group mean and std of the advantage). exclude: it leaves the statistics as well
        as the loss, so [correct, correct, correct, truncated] gives the correct ones advantage 0; include:
        DAPO's and TRL's semantics (mask_truncated_completions): it stays in the mean and std and only its
        loss is masked, so the correct ones get a positive advantage. The filters of algo.dynamic_sampling
        and algo.zero_variance_filter decide on the same rows (algo.filter_on)."""),
    )

    @field_validator("components", mode="before")
    @classmethod
    def _one_name_is_a_list(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value


class AlgoConfig(Section):
    """``algo``: the advantage estimator and the shape of the PPO update."""

    advantage: typing.Annotated[str, registered("advantage estimator")] = Field(
        "grpo",
        description=one_line("""Advantage estimator. grpo (DeepSeekMath, Shao et al. 2024): (R - group mean) / group
        std; dr_grpo (Liu et al. 2025): R - group mean, without the std that favours too easy and too hard
        prompts; rloo (Ahmadian et al. 2024): R minus the mean of the other G-1; grpo_process (DeepSeekMath
        process supervision): group-normalized step rewards summed to go, needs prm; gae (Schulman et al.
        2016): from a learned value function, needs critic.enabled."""),
    )
    adv_mean: Literal["group", "batch"] = Field(
        "group",
        description=one_line("""Scope of the mean that algo.advantage=grpo subtracts from each completion's reward R.
        group: the mean of its prompt's group (GRPO, Dr. GRPO, Lite PPO; TRL always uses it); batch: the mean
        of every completion of the step's rollout batch (the one batch the advantages are computed on, after
        dynamic sampling, never a minibatch or micro-batch), a group of one then still gets an advantage.
        Only grpo reads it (other estimators refuse batch); batch with adv_std=group is refused (undefined
        for groups whose rewards agree). Recipes: GRPO = group/group, Dr. GRPO (Liu et al. 2025) =
        group/none, Lite PPO ("Tricks or Traps?", Liu et al. 2025) = group/batch, batch z-score =
        batch/batch."""),
    )
    adv_std: Literal["group", "batch", "none"] = Field(
        "group",
        description=one_line("""What algo.advantage=grpo divides (R - mean) by, as TRL's GRPOConfig.scale_rewards.
        group: the unbiased std of the prompt's group plus 1e-6 (GRPO, Shao et al. 2024; TRL "group"), which
        over-weights prompts that are nearly always solved or failed; batch: the unbiased std of the raw rewards
        of the whole rollout batch plus 1e-6 (Lite PPO, Liu et al. 2025 "Tricks or Traps?"; TRL "batch";
        ScaleRL's batch-level normalization as TRL reads it), so every group is scaled alike and an easy
        prompt's small differences stay small; none: no division (Dr. GRPO; TRL "none"; grpo with none =
        dr_grpo). TRL adds 1e-4 instead of 1e-6 (ROLL 1e-6). Advantages are 0, never NaN, for groups whose
        rewards all agree and groups of one (with adv_mean=group), and for a batch whose rewards all agree
        (with a batch scope). Only grpo reads it; other estimators refuse values other than group."""),
    )
    gamma: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description=one_line("""Discount of gae and of rewards-to-go; 1.0 is standard for LLM RL (short episodes, no
        time preference)."""),
    )
    lam: float = Field(
        0.95,
        ge=0.0,
        le=1.0,
        description=one_line("""GAE lambda: 1.0 = Monte-Carlo returns minus values (unbiased, high variance), 0 =
        one-step TD (low variance, biased by the critic). Used by gae only."""),
    )
    whiten: bool = Field(
        False,
        strict=True,
        description=one_line("""Normalize gae advantages to zero mean and unit std over the step's active tokens
        (PPO practice); the group estimators normalize per group already."""),
    )
    dynamic_sampling: bool = Field(
        False,
        strict=True,
        description=one_line("""DAPO dynamic sampling (Yu et al. 2025): drop groups whose rewards are all equal (zero
        advantage, no gradient) and sample more prompts until the step is full again."""),
    )
    zero_variance_filter: bool = Field(
        False,
        strict=True,
        description=one_line("""ScaleRL's zero-variance filtering (Khatri et al. 2025): drop the groups whose rewards
        are all equal (zero advantage, no gradient) from the step's batch without sampling more, unlike
        dynamic_sampling; the loss is then normalized over the groups kept. A step in which every group has
        zero variance trains on them as they are (all advantages 0)."""),
    )
    constant_groups: Literal["zero", "rounding"] = Field(
        "zero",
        description=one_line("""grpo with a group std (adv_std group): a group whose completions all scored the same.
        zero: advantage exactly 0 (no gradient), as the group estimators promise; rounding: the arithmetic
        before issue 30, where the group mean's rounding divided by an std of the same size plus 1e-6 gave
        such a group a small non-zero advantage when its score is not exact in binary (all 0.1: -0.0074
        was observed); kept to reproduce the committed reports with non-binary rewards, which pin it. Left
        out of the trial key where it cannot matter (another estimator or scope, or a final-answer reward
        alone with an integer weight)."""),
    )
    filter_on: Literal["used", "all"] = Field(
        "used",
        description=one_line("""Which rows' rewards dynamic_sampling and zero_variance_filter judge a group's
        variance by. used: the rows whose rewards enter the advantages (under reward.overlong_filter with
        overlong_baseline exclude, the completions that were not truncated), so a kept group always has a
        non-zero advantage; all: every row's raw reward, as before issue 30, when a group such as
        [correct, correct, correct, truncated] was kept with every advantage 0 yet stayed in the loss's
        normalizer (kept to reproduce dapo_ladder's 4-seed report, in git history before its issue 30 rerun). Matters only with overlong_filter
        and one of the two filters on; elsewhere it is left out of the trial key."""),
    )
    drop_solved_at: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description=one_line("""ScaleRL's no-positive-resampling (Khatri et al. 2025, who use 0.9): a train prompt
        whose group answers at least this fraction correctly in a step leaves the training pool for the rest
        of the trial; null keeps every prompt. The pool never empties (its last prompt stays); its size is
        logged as data/pool_size."""),
    )
    max_resample_rounds: int = Field(
        3,
        ge=0,
        strict=True,
        description="Most extra sampling rounds per step with dynamic_sampling; the step then trains on what it has.",
    )
    ppo_epochs: int = Field(
        1,
        ge=1,
        strict=True,
        description=one_line("""Passes over each step's rollouts. With ppo_epochs = 1 and minibatches = 1 every ratio
        is exactly 1 and clipping never binds."""),
    )
    minibatches: int = Field(
        2,
        ge=1,
        strict=True,
        description=one_line("""Optimizer steps per epoch: the step's completions are split into this many minibatches
        (it must divide prompts_per_step x group_size). After the first, the policy has moved, so ratios
        leave 1 and the clipping choices matter."""),
    )
    grad_accum: int = Field(
        1,
        ge=1,
        strict=True,
        description=one_line("""Micro-batches per minibatch, accumulated into one optimizer step. Memory and padding:
        with more than one, the minibatch's rows are sorted by completion length into the micro-batches and
        each runs on the positions its own rows use (length buckets: less padded work). The loss is
        normalized by the whole minibatch's token and sequence counts, so results do not change beyond
        float rounding (not part of the trial key)."""),
    )


class LossConfig(Section):
    """``loss``: the policy loss: surrogate, importance-ratio level, clipping, aggregation."""

    surrogate: typing.Annotated[str, registered("policy loss surrogate")] = Field(
        "ppo",
        description=one_line("""Policy loss. ppo: the clipped surrogate max(-A r, -A clip(r)) (Schulman et al. 2017);
        cispo: a clipped, stop-gradient importance weight times A log p, so that clipped tokens still get
        a gradient (MiniMax-M1, 2025); sapo: a smooth sigmoid gate instead of the hard clip."""),
    )
    ratio_level: typing.Annotated[str, registered("ratio level")] = Field(
        "token",
        description=one_line("""Importance ratio. token: one ratio per token (PPO, GRPO); sequence: GSPO (Zheng et al.
        2025), the length-normalized sequence ratio clipped per sequence; sequence_token: GSPO-token, the
        same value with a per-token gradient. Sequence ratios need tiny clip ranges (~3e-4)."""),
    )
    clip_low: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description=one_line("""The ratio is clipped below at 1 - clip_low: PPO's epsilon, 0.2. GSPO uses 3e-4 with
        sequence ratios."""),
    )
    clip_high: float = Field(
        0.2,
        gt=0.0,
        description=one_line("""The ratio is clipped above at 1 + clip_high: 0.2 in PPO; DAPO's clip-higher (0.28)
        lets unlikely tokens grow, against entropy collapse; GSPO uses 4e-4."""),
    )
    dual_clip: float | None = Field(
        None,
        gt=1.0,
        description=one_line("""Dual-clip PPO (Ye et al. 2020): for negative advantages the loss is also capped at
        -A c, so that a huge ratio cannot blow up the update; typically 3; null = off."""),
    )
    aggregation: typing.Annotated[str, registered("loss aggregation")] = Field(
        "seq-mean-token-mean",
        description=one_line("""How per-token losses become one number (the loss-granularity factor). seq-mean-token-
        mean: mean per sequence, then over sequences, each completion weighs the same (GRPO); token-mean:
        mean over all active tokens, each token weighs the same (DAPO); seq-mean-token-sum: token sum per
        sequence, mean over sequences (with loss.ratio_level=sequence this is LUSPO, Liu et al. 2026, arXiv
        2602.05261, TRL loss_type=luspo: GSPO with each sequence's loss scaled by its length);
        seq-mean-token-sum-norm: token sum / max_len, mean over sequences
        (Dr. GRPO, no length bias); prompt-mean: token mean per prompt group, then over groups (DAPO,
        ScaleRL); balanced-mean: Balanced Aggregation (Zeng et al. 2026, arXiv 2605.04077, as its abstract
        defines it): in each group the token mean of the positive-advantage completions and that of the
        negative ones, weighted by their counts, then the mean over groups with a non-zero advantage."""),
    )
    max_len: int | None = Field(
        None,
        ge=1,
        description=one_line("""The constant normalizer of seq-mean-token-sum-norm (Dr. GRPO); null =
        rollout.max_new_tokens, as in Dr. GRPO. Never the padded width of a batch, which varies."""),
    )
    sapo_tau_pos: float = Field(
        1.0,
        gt=0.0,
        description="SAPO's gate temperature for positive advantages (paper default 1.0); surrogate=sapo only.",
    )
    sapo_tau_neg: float = Field(
        1.05,
        gt=0.0,
        description=one_line("""SAPO's gate temperature for negative advantages (paper default 1.05: a slightly
        sharper gate, negative updates being the less stable); surrogate=sapo only."""),
    )
    cispo_lower_bound: bool = Field(
        False,
        strict=True,
        description=one_line("""CISPO: also clamp the importance weight below at 1 - clip_low (MiniMax-M1 caps it only
        above, at 1 + clip_high); surrogate=cispo only."""),
    )
    entropy_coef: float = Field(
        0.0,
        ge=0.0,
        description=one_line("""Weight of the entropy bonus subtracted from the loss, aggregated like the policy loss;
        0 = off (GRPO, DAPO use none); ~1e-3 slows entropy collapse."""),
    )
    rollout_correction: Literal["none", "tis", "mis"] = Field(
        "none",
        description=one_line("""Correction of the rollout/trainer mismatch, per token, with the constant weight
        w = exp(trainer old log-prob - rollout log-prob) multiplied into the policy loss before aggregation
        (TRL's convention: a masked token keeps its place in the denominator). none: no weight; tis: truncated
        importance sampling, w capped above at rollout_correction_cap (Yao et al. 2025; TRL token_truncate,
        verl rollout_is=token); mis: masked importance sampling, w kept inside [rollout_correction_floor,
        rollout_correction_cap] and 0 outside (IcePop, Ring-1T 2025; TRL token_mask). Either one makes the
        trainer recompute the old log-probs (one extra forward per step)."""),
    )
    rollout_correction_cap: float = Field(
        2.0,
        gt=1.0,
        description=one_line("""Upper bound C of the mismatch weight: tis truncates w at C (2 in Yao et al. and verl's
        example), mis masks tokens with w > C (IcePop uses 5). Must be > 1."""),
    )
    rollout_correction_floor: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description=one_line("""Lower bound of the mismatch weight, in (0, 1): tis raises w to it (TRL's clip_min),
        mis masks tokens with w below it (IcePop uses 0.5). null: tis has no lower bound (Yao et al.), mis
        masks below 1 / rollout_correction_cap (verl's default lower bound)."""),
    )


class KLConfig(Section):
    """``kl``: a KL penalty to the frozen reference policy (the warm-started model)."""

    placement: Literal["none", "reward", "loss"] = Field(
        "none",
        description=one_line("""none: no KL term (DAPO, Dr. GRPO); reward: -beta x KL on every token of token_rewards,
        so that it flows through the advantages (InstructGPT-style PPO; then list kl in reward.components);
        loss: beta x KL added to the loss with the policy loss's aggregation (GRPO)."""),
    )
    beta: float = Field(
        0.04,
        ge=0.0,
        description=one_line("""KL coefficient (the initial one when adaptive): DeepSeekMath's GRPO uses 0.04 in the
        loss; InstructGPT ~0.02 in the reward."""),
    )
    estimator: typing.Annotated[str, AfterValidator(check_kl_estimator)] = Field(
        "auto",
        description=one_line("""KL estimator (Schulman, "Approximating KL divergence", 2020). k1: log-ratio, unbiased
        value; k2: half squared log-ratio, whose gradient is the reverse-KL gradient; k3: exp(-x) + x - 1,
        unbiased and non-negative; auto: k1 in the reward, k3 in the loss (the usual pairs)."""),
    )
    adaptive: bool = Field(
        False,
        strict=True,
        description=one_line("""Adaptive KL controller (Ziegler et al. 2019): after each step beta is multiplied by
        1 + clip(KL / target - 1, -0.2, 0.2) x n / horizon, steering the KL toward target."""),
    )
    target: float = Field(
        6.0,
        gt=0.0,
        description="Target KL of the adaptive controller, in nats per sequence (summed over tokens), as Ziegler et al.",
    )
    horizon: int = Field(
        10_000,
        ge=1,
        strict=True,
        description="Horizon of the adaptive controller in sequences: larger adapts beta more slowly.",
    )


class CriticConfig(Section):
    """``critic``: a learned value function, for ``algo.advantage=gae``."""

    enabled: bool = Field(
        False,
        strict=True,
        description=one_line("""Train a value function alongside the policy. Required by algo.advantage=gae and
        rejected with the group estimators, which never read values."""),
    )
    value_clip: float | None = Field(
        0.2,
        gt=0.0,
        description=one_line("""PPO value clipping: the loss is the larger of the squared errors of the new value and
        of the value clipped to old value +- value_clip; null = plain squared error (Andrychowicz et al.
        2020 found clipping does not help)."""),
    )
    vf_coef: float = Field(
        0.5,
        ge=0.0,
        description="Weight of the value loss added to the policy loss (CleanRL 0.5, TRL's PPO 0.1).",
    )
    lr: float | None = Field(None, gt=0.0, description="Learning rate of the critic's parameters; null = optim.lr.")


class OptimConfig(Section):
    """``optim``: the AdamW optimizer of the RL phase."""

    lr: float = Field(
        2e-5,
        gt=0.0,
        description=one_line("""AdamW learning rate of the RL phase. 2e-5 suits the tiny zoo models (measured: on the
        default warm start, 1e-4 destroys greedy accuracy within ten steps while 2e-5 raises it); ~1e-6
        to 1e-5 for pretrained checkpoints."""),
    )
    betas: tuple[float, float] = Field(
        (0.9, 0.999),
        description="AdamW's (beta1, beta2), each in [0, 1): momentum of the gradient and of its square.",
    )
    eps: float = Field(1e-8, gt=0.0, description="AdamW's epsilon, added to the denominator.")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay of AdamW; 0 = off.")
    decay_params: Literal["weights", "all"] = Field(
        "weights",
        description=one_line("""Which parameters optim.weight_decay decays. weights: every trainable parameter but
        biases and normalisation weights (transformers' Trainer rule, which TRL's GRPOTrainer applies); all:
        every trainable parameter (what ablate did before issue 55). Left out of the trial key while
        optim.weight_decay is 0."""),
    )
    max_grad_norm: float | None = Field(
        1.0,
        gt=0.0,
        description="Clip the global gradient norm to this before each optimizer step; null = no clipping.",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        strict=True,
        description="Linear learning-rate warm-up over this many optimizer steps, then constant; 0 = off.",
    )
    implementation: Literal["auto", "for-loop", "foreach", "fused"] = Field(
        "auto",
        description=one_line("""How torch's AdamW runs its update: auto = torch's default (a loop over the parameters
        on CPU, foreach on CUDA); for-loop, foreach (one multi-tensor op per step), fused (one kernel;
        CPU and CUDA). The same algorithm with its arithmetic in another order: results differ in
        rounding, so a value other than auto is part of the trial key. Measured on one CPU core over
        128M parameters shaped like SmolLM2-135M's: the loop's first step 13.0 s, fused 1.0 s (later
        steps 0.7-0.8 s and 0.15 s); at the zoo's sizes the optimizer step is ~3% of an update."""),
    )

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):
            raise ValueError(f"each beta must be in [0, 1), got {list(value)}")
        return value


class TrainConfig(Section):
    """``train``: the length and bookkeeping of the RL run."""

    steps: int = Field(
        100,
        ge=1,
        strict=True,
        description="RL steps (rollout, score, update); study budgets usually set this.",
    )
    checkpoint_every: int = Field(
        25,
        ge=0,
        strict=True,
        description=one_line("""Save a resumable checkpoint every N steps; 0 = never (an interrupted trial restarts
        from scratch). Not part of the trial key: resuming gives the same result."""),
    )
    log_every: int = Field(
        1,
        ge=1,
        strict=True,
        description="Log training metrics every N steps. Not part of the trial key.",
    )
    packed: bool = Field(
        False,
        strict=True,
        description=one_line("""Train as a member of a population: trials of one model shape run in one process, their
        forward, backward and decode steps batched over stacked weights (ablate run --pack K; alone, a
        population of one). Each member keeps its own weights, optimizer, random streams, run and
        checkpoint; the batched matmuls round differently from the solo ones, so packed trials have their own
        keys. Llama-family models (see ablate models); other computations run per member."""),
    )


class EngineConfig(Section):
    """``engine``: the trainer that runs the trial (see ablate.engines.base)."""

    name: Literal["ablate", "trl"] = Field(
        "ablate",
        description=one_line("""Which trainer trains the trial. ablate: this package's own trainer (every option);
        trl: TRL's GRPOTrainer (pip install 'ablate[trl]'), given the same model, warm start, prompts, sequence
        rewards and evaluation, with the options it cannot honour refused at validation (the map to
        GRPOConfig is below). The store, queue, resume, MLflow run, evaluation, objective and report are the
        same."""),
    )
    processes: int = Field(
        1,
        ge=1,
        strict=True,
        description=one_line("""Processes that train one trial together (engine trl only): the trial runs under
        torch.distributed (torchrun; gloo on CPU, NCCL on GPU), each process generating and training on its
        share of every minibatch, gradients averaged; rank 0 evaluates and logs. 1 = the worker's own process.
        It changes the arithmetic (reductions across processes), so values above 1 are part of the trial key."""),
    )
    positions: Literal["mask", "trl"] = Field(
        "mask",
        description=one_line("""Position ids of TRL's loss forward (engine trl). mask: the ones generation used, counted
        over the attention mask (ablate's convention), so a left-padded prompt is trained at the positions it was
        sampled at; trl: TRL's own forward, which passes none, so a row with k left pads is trained k positions
        later (up to 0.33 nats per token on tiny-gpt2's learned positions; rounding on RoPE): what trl trials
        computed before issue 55. Left out of the trial key where inert: engine ablate, or addition on a zoo
        model with the character tokenizer (every prompt one length)."""),
    )
    prompts: Literal["chat", "text"] = Field(
        "chat",
        description=one_line("""How TRL gets the prompts of a model with a chat template (engine trl). chat: as one
        user message, which TRL renders with the chat template as ablate's warm start and evaluation do; text:
        the raw prompt text, untemplated (what trl trials of such models sampled from before issue 55). Left
        out of the trial key where inert: engine ablate, or a zoo model with the character tokenizer (no chat
        template)."""),
    )


class EvalConfig(Section):
    """``eval``: held-out evaluation during and after training."""

    every: int = Field(
        10,
        ge=0,
        strict=True,
        description="Evaluate every N RL steps, and always before the first and after the last; 0 = only those.",
    )
    n_problems: int = Field(
        500,
        ge=1,
        strict=True,
        description=one_line("""Eval-split problems per evaluation (at most task.eval_size), drawn with task.data_seed:
        the same problems for every seed, and every arm that leaves task.* alone. The standard error of an accuracy near 50% is
        0.5 / sqrt(n): 5 points at 100, 3.5 at 200, 2.2 at 500; the cost is proportional (measured in
        docs/metrics.md: 1.6 s per evaluation of 500 problems for tiny-llama on 2-digit addition, one
        CPU thread)."""),
    )
    pass_k: int = Field(
        1,
        ge=1,
        strict=True,
        description=one_line("""Also report pass@k from k samples per problem at rollout.temperature (the unbiased
        estimator of Chen et al. 2021); 1 = off."""),
    )
    greedy: bool = Field(
        True,
        strict=True,
        description=one_line("""Headline accuracy from greedy decoding (deterministic, less noise between seeds);
        false = one sample at rollout.temperature (the policy that is actually trained)."""),
    )
