"""Log-probabilities (and entropies) of sampled completion tokens, without a [B, T, V] log-softmax.

This module holds the ONE function that computes the log-probs a trainer differentiates and the
behaviour log-probs a rollout stores: :func:`token_logprobs` (and :func:`token_logprobs_and_entropy`).
Using the same function, at the same temperature, for both is what makes the importance ratio exactly
1 before the first update.

Layout of the inputs (the rollout layout of DESIGN.md)::

    input_ids      [B, L]   L = P + T
                   |<- P prompt tokens, left-padded ->|<- T completion tokens, right-padded ->|
    attention_mask [B, L]   0 on padding (left of the prompt and right of the completion)

Completion token ``t`` of row ``b`` sits at input position ``P + t`` and is predicted by the logits at
position ``P + t - 1``. Position ids are computed from the attention mask, so left padding does not
shift positions: a left-padded prompt gives the same log-probs as the unpadded one.

Memory: the naive computation ``log_softmax(logits.float(), -1).gather(...)`` materialises the logits
and a float32 log-softmax of shape [B, L, V] (and keeps them for backward). Here the model's trunk
gives hidden states [B, L, H]; only the active completion tokens are kept, and the vocabulary
projection, the log-sum-exp and the gather run over chunks of at most ``chunk_size`` tokens rows. With
gradients enabled each chunk is checkpointed (recomputed in backward), so neither pass holds more than
one chunk of [chunk, V] logits. Architectures whose logits are not ``lm_head(last_hidden_state)`` (e.g.
logit soft-capping) go through the full model forward instead; the chunking of the float32 math still
applies there, but the model's own [B, L, V] logits are materialised.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ablate.errors import AblateError

#: ``config.model_type`` values whose causal-LM logits are exactly ``get_output_embeddings()(h)`` with
#: ``h = model.base_model(...).last_hidden_state`` (no soft-capping, no logit scaling).
HIDDEN_PATH_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral", "gpt2"})

#: Default number of float32 logits held at once (rows x vocabulary), 2**23 = 32 MiB.
DEFAULT_CHUNK_ELEMENTS = 2**23


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, L] that count only attended tokens: ``cumsum(mask) - 1``, 0 on left padding.

    Args:
        attention_mask: [B, L], 1 on real tokens, 0 on padding.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp_(min=0)


def _uses_hidden_path(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in HIDDEN_PATH_MODEL_TYPES:
        return False
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return False
    return getattr(model, "base_model", None) is not None and model.get_output_embeddings() is not None


def _check_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, num_prompt_tokens: int,
                  temperature: float) -> None:
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise AblateError(
            f"token_logprobs: input_ids must be [B, L] and attention_mask the same shape; got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    if not 1 <= num_prompt_tokens <= input_ids.shape[1]:
        raise AblateError(
            f"token_logprobs: num_prompt_tokens={num_prompt_tokens} must be in [1, L={input_ids.shape[1]}] "
            "(the first completion token is predicted from the last prompt position)"
        )
    if not temperature > 0:
        raise AblateError(f"token_logprobs: temperature={temperature} must be > 0 (use 1.0 for greedy rollouts)")


def _chunk_math(
    project: Callable[[torch.Tensor], torch.Tensor], temperature: float, with_entropy: bool
) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]:
    """The per-chunk function: rows [n, H] (or logits [n, V]) and targets [n] -> logp [n] (, entropy [n])."""

    def fn(rows: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = project(rows).float()  # (n, V)
        if temperature != 1.0:
            logits = logits / temperature
        lse = torch.logsumexp(logits, dim=-1)  # (n,)
        logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
        if not with_entropy:
            return (logp,)
        probs = torch.softmax(logits, dim=-1)
        entropy = lse - (probs * logits).sum(-1)
        return logp, entropy

    return fn


def _token_logprobs_impl(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    num_prompt_tokens: int,
    temperature: float,
    chunk_size: int | None,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    _check_inputs(input_ids, attention_mask, num_prompt_tokens, temperature)
    B, L = input_ids.shape
    P = num_prompt_tokens
    T = L - P
    position_ids = position_ids_from_mask(attention_mask)
    active = attention_mask[:, P:].bool()  # (B, T)
    targets = input_ids[:, P:][active]  # (N,)

    if _uses_hidden_path(model):
        trunk = model.base_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )
        hidden = trunk.last_hidden_state if hasattr(trunk, "last_hidden_state") else trunk[0]  # (B, L, H)
        rows = hidden[:, P - 1 : L - 1][active]  # (N, H)
        project: Callable[[torch.Tensor], torch.Tensor] = model.get_output_embeddings()
        vocab = project.weight.shape[0]
    else:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits  # (B, L, V)
        rows = logits[:, P - 1 : L - 1][active]  # (N, V)
        vocab = logits.shape[-1]

        def project(x: torch.Tensor) -> torch.Tensor:
            return x

    n = rows.shape[0]
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_CHUNK_ELEMENTS // max(vocab, 1))
    if chunk_size < 1:
        raise AblateError(f"token_logprobs: chunk_size={chunk_size} must be >= 1 (rows per chunk)")
    fn = _chunk_math(project, temperature, with_entropy)
    use_ckpt = torch.is_grad_enabled() and rows.requires_grad and n > 0
    pieces: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, n, chunk_size):
        r, tg = rows[start : start + chunk_size], targets[start : start + chunk_size]
        pieces.append(checkpoint(fn, r, tg, use_reentrant=False) if use_ckpt else fn(r, tg))

    dtype = torch.float32
    logp = rows.new_zeros((B, T), dtype=dtype)
    entropy = rows.new_zeros((B, T), dtype=dtype) if with_entropy else None
    if pieces:
        logp = logp.masked_scatter(active, torch.cat([p[0] for p in pieces]))
        if with_entropy:
            entropy = entropy.masked_scatter(active, torch.cat([p[1] for p in pieces]))
    return logp, entropy


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    num_prompt_tokens: int,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Log-probs of the completion tokens under ``model``: ``logits/τ`` gathered minus their log-sum-exp.

    Equal to ``log_softmax(logits / τ, -1).gather(-1, tokens)`` (within 1e-5) without materialising the
    float32 [B, T, V] log-softmax; gradients flow to the model's parameters. The model's mode (train or
    eval) is left as it is: the caller decides about dropout.

    Args:
        model: a Hugging Face causal LM.
        input_ids: [B, L] prompt (left-padded to ``num_prompt_tokens``) then completion (right-padded).
        attention_mask: [B, L] 1 on real tokens; on the completion part it is the rollout ``mask``.
        num_prompt_tokens: P, the width of the prompt block; completion token t is at position P + t.
        temperature: τ > 0; the logits are divided by it (the sampling temperature of the rollout).
        chunk_size: token rows per chunk of the vocabulary projection; default: as many as fit in
            2**23 float32 logits.

    Returns:
        logp [B, T] float32, T = L - P; 0.0 where the completion mask is 0.
    """
    return _token_logprobs_impl(
        model, input_ids, attention_mask, num_prompt_tokens, temperature, chunk_size, with_entropy=False
    )[0]


def token_logprobs_and_entropy(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    num_prompt_tokens: int,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_logprobs` plus the entropy of each predictive distribution, in the same chunked pass.

    The entropy at completion position t is ``H = logsumexp(z) - Σ_v softmax(z)_v z_v`` with
    ``z = logits / τ`` at input position P + t - 1 (the distribution token t was sampled from).

    Returns:
        ``(logp [B, T], entropy [B, T])``, both float32 and 0.0 where the completion mask is 0.
    """
    logp, entropy = _token_logprobs_impl(
        model, input_ids, attention_mask, num_prompt_tokens, temperature, chunk_size, with_entropy=True
    )
    assert entropy is not None
    return logp, entropy


def naive_token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    num_prompt_tokens: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Reference implementation: full logits, float32 ``log_softmax`` over [B, T, V], then ``gather``.

    Used by the tests and the benchmark as the baseline :func:`token_logprobs` must equal; it
    materialises [B, L, V] logits and a [B, T, V] float32 log-softmax. Shapes as in :func:`token_logprobs`.
    """
    _check_inputs(input_ids, attention_mask, num_prompt_tokens, temperature)
    P = num_prompt_tokens
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    ).logits  # (B, L, V)
    logp_all = torch.log_softmax(logits[:, P - 1 : -1].float() / temperature, dim=-1)  # (B, T, V)
    logp = logp_all.gather(-1, input_ids[:, P:].unsqueeze(-1)).squeeze(-1)
    return logp * attention_mask[:, P:].to(logp.dtype)
