"""Batched sampling of G completions per prompt: the rollout tensors of DESIGN.md.

Usage::

    gen = torch.Generator().manual_seed(0)
    r = generate_rollouts(policy, prompts, group_size=8, max_new_tokens=48, temperature=1.0, generator=gen)
    r.completion_ids  # [B, T] right-padded; B = len(prompts) * 8, T <= 48
    r.mask            # [B, T] 1.0 on generated tokens (EOS included)
    r.old_logp        # [B, T] behaviour log-probs, exactly as token_logprobs computes them

    # in the trainer, the same function at the same temperature gives ratio == 1 before any update:
    logp = token_logprobs(policy.model, r.input_ids, r.attention_mask,
                          num_prompt_tokens=r.num_prompt_tokens, temperature=r.logp_temperature)

Sampling: softmax of ``logits / temperature``, restricted to the nucleus of mass ``top_p`` (Holtzman
et al., 2020, "The Curious Case of Neural Text Degeneration"), drawn by inverting the cumulative
distribution with one uniform number per row from the given generator; ``temperature == 0`` is
greedy (argmax). A row stops at its first EOS token (or pad token: :meth:`Policy.decode_with_offsets`
ends a completion there too); later tokens are pad with mask 0, and the loop ends when every row has
stopped.

Behaviour log-probs: after sampling, one no-grad forward of :func:`token_logprobs` over the whole
rollout at the sampling temperature (1.0 for greedy). So ``old_logp`` is the log-prob of the full
tempered softmax, as the training forward computes it — not of the top-p-truncated distribution the
token was drawn from (the convention of TRL and verl; with ``top_p < 1`` the ratio is therefore a
ratio of untruncated policies). With ``behaviour_logp="sampler"`` the same quantity is taken from the
decoder's logits at each step instead (no forward; equal up to float rounding), as trainers that use an
inference engine's log-probs do.

The model is put in eval mode (no dropout) for sampling and the log-prob forward, and its mode is
restored afterwards. On CPU the same generator seed gives the same rollout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ablate.errors import AblateError
from ablate.models.batching import active_batcher
from ablate.models.decode_graph import graph_sampler, padded_width
from ablate.models.fast_decode import fast_decoder_unsupported_reason, make_decoder
from ablate.models.logprobs import token_logprobs
from ablate.models.policy import Policy
from ablate.models.sampling import sample_next

__all__ = ["PromptCompletionLayout", "Rollout", "generate_rollouts", "left_pad", "sample_completions", "sample_next"]


class PromptCompletionLayout:
    """The model-input view of prompt ids [B, P] (left-padded) followed by completion ids [B, T].

    Shared by :class:`Rollout` and the trainer's scored batches: subclasses hold ``prompt_ids``,
    ``prompt_mask``, ``completion_ids`` and ``mask``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    mask: torch.Tensor

    @property
    def num_prompt_tokens(self) -> int:
        """P, the width of the prompt block."""
        return int(self.prompt_ids.shape[1])

    @property
    def input_ids(self) -> torch.Tensor:
        """[B, P + T] prompt then completion ids, the input of :func:`token_logprobs`."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[B, P + T] long attention mask: ``prompt_mask`` then ``mask``."""
        return torch.cat([self.prompt_mask, self.mask.long()], dim=1)


@dataclass
class Rollout(PromptCompletionLayout):
    """G completions for each of a list of prompts, in the layout the trainer consumes.

    Rows are grouped: row ``b`` answers prompt ``group_ids[b]``, and the G rows of a prompt are
    consecutive. B = len(prompts) * G.

    Attributes:
        prompt_ids: [B, P] long, left-padded with the pad id.
        prompt_mask: [B, P] long, 1 on prompt tokens.
        completion_ids: [B, T] long, right-padded with the pad id after the first EOS.
        mask: [B, T] float32, 1.0 on generated tokens (the EOS token included), 0.0 on padding.
        old_logp: [B, T] float32, behaviour log-prob of each sampled token (0.0 on padding); None
            when the rollout was made with ``compute_old_logp=False``.
        group_ids: [B] long, index into ``prompts`` of the prompt each row answers.
        truncated: [B] bool, no EOS within ``max_new_tokens``.
        prompts: the prompt strings, in group order.
        texts: the decoded completions (EOS and padding dropped), one per row.
        offsets: per row, T ``(start, end)`` character offsets of each completion token into its text
            (padding and EOS get empty spans), from :meth:`Policy.decode_with_offsets`.
        temperature: the sampling temperature (0.0 = greedy).
        logp_temperature: the temperature ``old_logp`` was computed at (``temperature``, or 1.0 for greedy).
        top_p: the nucleus mass used for sampling.
        timing: ``generate_s`` (prefill and decode loop), ``logprob_s`` (the old_logp forward),
            ``decode_text_s`` (texts and offsets), ``steps`` (decode steps run), ``tokens`` (generated
            tokens, mask sum), ``fast`` (1.0 if the lean decoder ran).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor | None
    group_ids: torch.Tensor
    truncated: torch.Tensor
    prompts: list[str]
    texts: list[str]
    offsets: list[list[tuple[int, int]]]
    temperature: float
    logp_temperature: float
    top_p: float
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def lengths(self) -> torch.Tensor:
        """[B] long, number of generated tokens per row (EOS included)."""
        return self.mask.sum(-1).long()


def left_pad(sequences: list[list[int]], pad_id: int, device: torch.device | str = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists to ``ids`` [N, P] and ``mask`` [N, P] (long), P = the longest length."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def _check_args(prompts: list[str], group_size: int, max_new_tokens: int, temperature: float, top_p: float,
                behaviour_logp: str) -> None:
    if behaviour_logp not in ("recompute", "sampler"):
        raise AblateError(f"generate_rollouts: behaviour_logp={behaviour_logp!r} must be 'recompute' or 'sampler'")
    if not prompts:
        raise AblateError("generate_rollouts: prompts is empty; pass at least one prompt string")
    if group_size < 1:
        raise AblateError(f"generate_rollouts: group_size={group_size} must be >= 1 (completions per prompt)")
    if max_new_tokens < 1:
        raise AblateError(f"generate_rollouts: max_new_tokens={max_new_tokens} must be >= 1")
    if temperature < 0:
        raise AblateError(f"generate_rollouts: temperature={temperature} must be >= 0 (0 = greedy)")
    if not 0.0 < top_p <= 1.0:
        raise AblateError(f"generate_rollouts: top_p={top_p} must be in (0, 1] (1 = no nucleus truncation)")


def _max_positions(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


@torch.no_grad()
def sample_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    stop_ids: list[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    fast: bool | None = None,
    compile: bool = False,
    cuda_graph: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The decode loop: sample up to ``max_new_tokens`` per row, stopping each row at a stop id.

    The model must already be in eval mode. Rows that have stopped keep receiving ``pad_id`` (mask 0);
    the loop exits as soon as every row has stopped.

    Args:
        model: a Hugging Face causal LM.
        prompt_ids: [B, P] left-padded; prompt_mask: [B, P].
        stop_ids: token ids that end a row (EOS, and pad when it differs); the stop token is kept.
        fast, compile: decoder choice, see :func:`ablate.models.fast_decode.make_decoder`.
        cuda_graph: the loop as a replayed CUDA graph (:mod:`ablate.models.decode_graph`), where the
            lean decoder runs the model outside a population; run eagerly over the same static
            buffers off CUDA.

    Returns:
        ``(completion_ids [B, T] long, mask [B, T] float32, steps)`` with T = steps <= max_new_tokens.
    """
    out, mask, steps, _ = _decode_loop(model, prompt_ids, prompt_mask, max_new_tokens=max_new_tokens,
                                       stop_ids=stop_ids, pad_id=pad_id, temperature=temperature, top_p=top_p,
                                       generator=generator, fast=fast, compile=compile, cuda_graph=cuda_graph,
                                       logp_temperature=None)
    return out, mask, steps


@torch.no_grad()
def _decode_loop(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    stop_ids: list[int],
    pad_id: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    fast: bool | None,
    compile: bool,
    logp_temperature: float | None,
    cuda_graph: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
    """:func:`sample_completions`, plus the sampler's log-prob of each sampled token when
    ``logp_temperature`` is given: ``log_softmax(logits / logp_temperature)`` of the decoder's float32
    logits at the token, [B, T] float32, 0.0 on padding (None otherwise)."""
    B = prompt_ids.shape[0]
    device = prompt_ids.device
    if cuda_graph and fast is not False and active_batcher() is None and fast_decoder_unsupported_reason(model) is None:
        width = padded_width(prompt_ids.shape[1], max_new_tokens, _max_positions(model))
        extra = width - prompt_ids.shape[1]
        if extra:
            prompt_ids = torch.nn.functional.pad(prompt_ids, (extra, 0), value=pad_id)
            prompt_mask = torch.nn.functional.pad(prompt_mask, (extra, 0), value=0)
        sampler = graph_sampler(model, batch=B, width=width, max_new_tokens=max_new_tokens, temperature=temperature,
                                top_p=top_p, logp_temperature=logp_temperature, stop_ids=stop_ids, pad_id=pad_id)
        return sampler.sample(model, prompt_ids, prompt_mask, generator)
    decoder = make_decoder(model, prompt_ids, prompt_mask, max_new_tokens, fast=fast, compile=compile)
    out = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=device)
    logp = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=device) if logp_temperature is not None else None
    stops = torch.tensor(stop_ids, dtype=torch.long, device=device)
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    logits = decoder.prefill()
    steps = 0
    for t in range(max_new_tokens):
        tokens = sample_next(logits, temperature=temperature, top_p=top_p, generator=generator)
        tokens = tokens.masked_fill(finished, pad_id)
        out[:, t] = tokens
        mask[:, t] = (~finished).float()
        if logp is not None:
            scaled = logits.float() / logp_temperature if logp_temperature != 1.0 else logits.float()
            token_logp = torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            logp[:, t] = token_logp.masked_fill(finished, 0.0)
        finished |= torch.isin(tokens, stops)
        steps = t + 1
        if t + 1 == max_new_tokens or bool(finished.all()):
            break
        logits = decoder.step(tokens, ~finished)
    return out[:, :steps], mask[:, :steps], steps, (logp[:, :steps] if logp is not None else None)


def generate_rollouts(
    policy: Policy,
    prompts: list[str],
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    fast: bool | None = None,
    compile: bool = False,
    compute_old_logp: bool = True,
    behaviour_logp: str = "recompute",
    cuda_graph: bool = False,
) -> Rollout:
    """Sample ``group_size`` completions for each prompt and return the :class:`Rollout` tensors.

    Args:
        policy: the policy (its model is set to eval mode during sampling, then restored).
        prompts: prompt strings; each is rendered by :meth:`Policy.encode_prompt`.
        group_size: G, completions per prompt (rows ``g*G .. g*G+G-1`` answer prompt g).
        max_new_tokens: the most tokens generated per completion.
        temperature: sampling temperature; 0 means greedy (argmax) decoding.
        top_p: nucleus mass in (0, 1]; 1 disables truncation.
        generator: the random generator (on the model's device); None uses torch's global RNG.
        fast: None: the lean KV-cache decoder when the architecture supports it, else the generic
            transformers-cache decoder; False: always generic; True: require the lean one.
        compile: ``torch.compile`` the lean decoder's step (pays compile time once; off by default).
        compute_old_logp: run the behaviour log-prob forward (default). A trainer whose update is
            on-policy (one epoch, one minibatch) may skip it and use ``logp.detach()`` of its own
            forward instead (the ratio is then 1 by construction); ``old_logp`` is None then.
        behaviour_logp: ``old_logp`` from one no-grad forward of :func:`token_logprobs` (``"recompute"``,
            default) or from the decoder's logits at each sampled token (``"sampler"``: no forward; equal up
            to float rounding, ~1e-6, the lean decoder's attention kernel being another).
        cuda_graph: the decode loop through captured CUDA graphs, see :func:`sample_completions`.

    Returns:
        A :class:`Rollout` with B = len(prompts) * group_size rows.

    Raises:
        AblateError: invalid arguments, prompt plus ``max_new_tokens`` longer than the model's
            position limit, or ``fast=True`` for an architecture the lean decoder does not support.
    """
    _check_args(prompts, group_size, max_new_tokens, temperature, top_p, behaviour_logp)
    prompt_ids, prompt_mask, group_ids = _encode_prompts(policy, prompts, group_size, max_new_tokens)
    stop_ids = sorted({policy.eos_token_id, policy.pad_token_id})
    logp_temperature = temperature if temperature > 0 else 1.0
    completion_ids, mask, old_logp, sampled = _sample(
        policy.model, prompt_ids, prompt_mask, max_new_tokens=max_new_tokens, stop_ids=stop_ids,
        pad_id=policy.pad_token_id, temperature=temperature, top_p=top_p, generator=generator, fast=fast,
        compile=compile, logp_temperature=logp_temperature if compute_old_logp else None,
        behaviour_logp=behaviour_logp, cuda_graph=cuda_graph,
    )
    last = completion_ids[:, -1]
    truncated = (mask[:, -1] > 0) & ~torch.isin(last, torch.tensor(stop_ids, device=policy.device))
    t2 = time.perf_counter()
    texts, offsets = _decode_texts(policy, completion_ids)
    timing = {"generate_s": sampled["generate_s"], "logprob_s": sampled["logprob_s"],
              "decode_text_s": time.perf_counter() - t2, "steps": sampled["steps"], "tokens": float(mask.sum().item()),
              "fast": float(fast is not False and fast_decoder_unsupported_reason(policy.model) is None)}
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        mask=mask,
        old_logp=old_logp,
        group_ids=group_ids,
        truncated=truncated,
        prompts=list(prompts),
        texts=texts,
        offsets=offsets,
        temperature=float(temperature),
        logp_temperature=float(logp_temperature),
        top_p=float(top_p),
        timing=timing,
    )


def _encode_prompts(
    policy: Policy, prompts: list[str], group_size: int, max_new_tokens: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``prompt_ids`` [B, P] left-padded, ``prompt_mask`` [B, P] and ``group_ids`` [B], each prompt
    repeated ``group_size`` times (B = len(prompts) * group_size).

    Raises:
        AblateError: the longest prompt plus ``max_new_tokens`` exceeds the model's position limit.
    """
    device = policy.device
    encoded = [policy.encode_prompt(p) for p in prompts]
    limit = _max_positions(policy.model)
    longest = max(len(e) for e in encoded)
    if limit is not None and longest + max_new_tokens > limit:
        raise AblateError(
            f"generate_rollouts: the longest prompt has {longest} tokens and max_new_tokens={max_new_tokens}, "
            f"more than the model's {limit} positions; lower max_new_tokens or shorten the prompts"
        )
    ids, pmask = left_pad(encoded, policy.pad_token_id, device)
    prompt_ids = ids.repeat_interleave(group_size, dim=0)  # (B, P)
    prompt_mask = pmask.repeat_interleave(group_size, dim=0)  # (B, P)
    group_ids = torch.arange(len(prompts), device=device).repeat_interleave(group_size)  # (B,)
    return prompt_ids, prompt_mask, group_ids


def _sample(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    logp_temperature: float | None,
    behaviour_logp: str = "recompute",
    **sampling: Any,  # keyword arguments of sample_completions
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """Sample completions in eval mode (the model's mode is restored), then the behaviour log-probs at
    ``logp_temperature`` (none when None): one forward over the rollout (``behaviour_logp="recompute"``)
    or the sampler's own, from the decode loop's logits (``"sampler"``).

    Returns:
        ``(completion_ids [B, T], mask [B, T], old_logp [B, T] or None, timing)`` with timing's
        ``generate_s``, ``logprob_s`` (seconds) and ``steps`` (decode steps run).
    """
    was_training = model.training
    if was_training:  # a transformers model's eval()/train() walks every module: ~1 ms each at the zoo's sizes
        model.eval()
    try:
        t0 = time.perf_counter()
        sampler = logp_temperature is not None and behaviour_logp == "sampler"
        completion_ids, mask, steps, old_logp = _decode_loop(
            model, prompt_ids, prompt_mask, logp_temperature=logp_temperature if sampler else None, **sampling)
        t1 = time.perf_counter()
        if logp_temperature is not None and not sampler:
            with torch.no_grad():
                old_logp = token_logprobs(
                    model,
                    torch.cat([prompt_ids, completion_ids], dim=1),
                    torch.cat([prompt_mask, mask.long()], dim=1),
                    num_prompt_tokens=prompt_ids.shape[1],
                    temperature=logp_temperature,
                )  # (B, T)
        t2 = time.perf_counter()
    finally:
        if was_training:
            model.train()
    return completion_ids, mask, old_logp, {"generate_s": t1 - t0, "logprob_s": t2 - t1, "steps": float(steps)}


def _decode_texts(policy: Policy, completion_ids: torch.Tensor) -> tuple[list[str], list[list[tuple[int, int]]]]:
    """The text of each row of ``completion_ids`` [B, T] and its per-token character offsets."""
    texts: list[str] = []
    offsets: list[list[tuple[int, int]]] = []
    for row in completion_ids.tolist():
        text, offs = policy.decode_with_offsets(row)
        texts.append(text)
        offsets.append(offs)
    return texts, offsets
