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
and a float32 log-softmax of shape [B, L, V], and autograd keeps them for backward. Here the model's
trunk gives hidden states [B, L, H]; only the active completion tokens are kept (N rows), and the
vocabulary projection, log-sum-exp and gather run over chunks of ``chunk_size`` rows inside one
autograd function (:class:`_ChunkedTokenLogprob`) that saves only the hidden rows and one log-sum-exp
per row: its backward recomputes each chunk's logits and turns them into the logit gradient in place
(``onehot - softmax``, plus the entropy term), so neither pass holds more than about two [chunk, V]
float32 buffers — the "fused linear cross-entropy" technique. Architectures whose logits are not
``lm_head(last_hidden_state)`` (e.g. logit soft-capping) go through the full model forward instead; the
chunked float32 math still applies there, but the model's own [B, L, V] logits are materialised.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ablate.errors import AblateError
from ablate.models.batching import active_batcher
from ablate.models.precision import is_float32_head

#: ``config.model_type`` values whose causal-LM logits are exactly ``get_output_embeddings()(h)`` with
#: ``h = model.base_model(...).last_hidden_state`` (no soft-capping, no logit scaling).
HIDDEN_PATH_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral", "gpt2"})

#: Default number of float32 logits per chunk (rows x vocabulary): 2**22, 16 MiB.
DEFAULT_CHUNK_ELEMENTS = 2**22


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


def _chunk_logits(rows: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  temperature: float, float32_head: bool = False) -> torch.Tensor:
    """Float32 ``(rows @ weight.T + bias) / temperature`` [n, V] (``rows`` are logits when weight is None).

    ``float32_head``: multiply in float32 with autocast off (``model.lm_head_dtype=float32``).
    """
    if weight is not None and float32_head:
        with torch.autocast(device_type=rows.device.type, enabled=False):
            z = F.linear(rows.float(), weight.float(), None if bias is None else bias.float())
    else:
        z = (F.linear(rows, weight, bias) if weight is not None else rows).float()
    if weight is None and z.data_ptr() == rows.data_ptr():
        z = z.clone()  # never modify the caller's logits in place
    if temperature != 1.0:
        z.div_(temperature)
    return z


class _ChunkedTokenLogprob(torch.autograd.Function):
    """``log softmax(rows @ W.T + b)[target]`` (and the entropy) per row, chunked, with a lean backward.

    Forward: rows [N, K], weight [V, K] or None (then rows are logits [N, V]), bias [V] or None,
    targets [N] -> logp [N], entropy [N] (zeros unless ``with_entropy``); ``float32_head``: the
    projection in float32 with autocast off (see :func:`_chunk_logits`). Saved for backward: rows,
    targets, the per-row log-sum-exp and entropy; nothing of size V per row.

    Backward, per chunk, with ``z`` the tempered logits, ``p = softmax(z)``, ``log p = z - lse``:
    ``d logp / dz = onehot(target) - p`` and ``d H / dz = -p * (log p + H)``; then ``dz/d logits = 1/τ``,
    ``d rows = d logits @ W`` and ``d W = d logits.T @ rows`` (accumulated in float32).
    """

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                targets: torch.Tensor, temperature: float, chunk: int, with_entropy: bool,
                float32_head: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        n = rows.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=rows.device)
        lse = torch.empty(n, dtype=torch.float32, device=rows.device)
        entropy = torch.zeros(n, dtype=torch.float32, device=rows.device)
        for s in range(0, n, chunk):
            z = _chunk_logits(rows[s : s + chunk], weight, bias, temperature, float32_head)  # (c, V)
            l_ = torch.logsumexp(z, dim=-1)
            lse[s : s + chunk] = l_
            logp[s : s + chunk] = z.gather(-1, targets[s : s + chunk, None]).squeeze(-1) - l_
            if with_entropy:
                p = torch.softmax(z, dim=-1)
                entropy[s : s + chunk] = l_ - (p * z).sum(-1)
        ctx.save_for_backward(rows, weight, bias, targets, lse, entropy)
        ctx.temperature, ctx.chunk, ctx.with_entropy = temperature, chunk, with_entropy
        ctx.float32_head = float32_head
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor | None, g_ent: torch.Tensor | None) -> tuple:
        rows, weight, bias, targets, lse, entropy = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        need_rows, need_w, need_b = ctx.needs_input_grad[:3]
        n = rows.shape[0]
        g_logp = g_logp if g_logp is not None else torch.zeros_like(lse)
        use_ent = ctx.with_entropy and g_ent is not None
        grad_rows = torch.empty_like(rows) if need_rows else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=rows.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=rows.device) if need_b else None
        for s in range(0, n, chunk):
            r, t = rows[s : s + chunk], targets[s : s + chunk, None]
            g = g_logp[s : s + chunk, None]
            logp_all = _chunk_logits(r, weight, bias, tau, ctx.float32_head).sub_(lse[s : s + chunk, None])  # (c, V)
            p = logp_all.exp()
            if use_ent:
                # -gH * p * (log p + H)  -  g * p
                gz = logp_all.add_(entropy[s : s + chunk, None]).mul_(p).mul_(-g_ent[s : s + chunk, None])
                gz.sub_(p.mul_(g))
            else:
                del logp_all
                gz = p.mul_(-g)
            gz.scatter_add_(-1, t, g)  # + g * onehot(target)
            if tau != 1.0:
                gz.div_(tau)
            if weight is None:
                if need_rows:
                    grad_rows[s : s + chunk] = gz
                continue
            gz_w = gz.to(weight.dtype)
            if need_rows:
                grad_rows[s : s + chunk] = gz_w @ weight
            if need_w:
                grad_w.addmm_(gz.t(), r.float())
            if need_b:
                grad_b += gz.sum(0)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_rows, grad_w, grad_b, None, None, None, None, None


def _token_logprobs_impl(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    num_prompt_tokens: int,
    temperature: float,
    chunk_size: int | None,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_inputs(input_ids, attention_mask, num_prompt_tokens, temperature)
    B, L = input_ids.shape
    P = num_prompt_tokens
    T = L - P
    position_ids = position_ids_from_mask(attention_mask)
    active = attention_mask[:, P:].bool()  # (B, T)
    targets = input_ids[:, P:][active]  # (N,)
    weight = bias = None
    float32_head = False
    if _uses_hidden_path(model):
        batcher = active_batcher()  # a population member's trunk runs batched with the others'
        hidden = batcher.trunk(model, input_ids, attention_mask, P) if batcher is not None else None
        if hidden is None:
            trunk = model.base_model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )
            hidden = trunk.last_hidden_state if hasattr(trunk, "last_hidden_state") else trunk[0]  # (B, L, H)
        rows = hidden[:, P - 1 : L - 1][active]  # (N, H)
        head = model.get_output_embeddings()
        weight, bias = head.weight, head.bias
        float32_head = is_float32_head(head)
        vocab = weight.shape[0]
    else:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits  # (B, L, V)
        rows = logits[:, P - 1 : L - 1][active]  # (N, V)
        vocab = logits.shape[-1]
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_CHUNK_ELEMENTS // max(vocab, 1))
    if chunk_size < 1:
        raise AblateError(f"token_logprobs: chunk_size={chunk_size} must be >= 1 (rows per chunk)")
    logp_rows, ent_rows = _ChunkedTokenLogprob.apply(
        rows, weight, bias, targets, float(temperature), int(chunk_size), with_entropy, float32_head
    )
    logp = logp_rows.new_zeros((B, T)).masked_scatter(active, logp_rows)
    entropy = ent_rows.new_zeros((B, T)).masked_scatter(active, ent_rows)
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
            2**22 float32 logits (16 MiB).

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
    scaled = logits[:, P - 1 : -1].float()
    if temperature != 1.0:
        scaled = scaled / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)  # (B, T, V)
    logp = logp_all.gather(-1, input_ids[:, P:].unsqueeze(-1)).squeeze(-1)
    return logp * attention_mask[:, P:].to(logp.dtype)
