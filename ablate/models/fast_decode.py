"""Incremental decoders for batched sampling: a generic one for any Hugging Face causal LM, and a
lean one for Llama-family models over a preallocated KV cache.

Both answer the same two calls, so :mod:`ablate.models.rollout` samples through either:

- ``prefill() -> logits [B, V]``: run the left-padded prompts [B, P] and return the float32 logits of
  the next token (predicted at the last prompt position);
- ``step(tokens [B], active [B] | None) -> logits [B, V]``: append one token per row and return the
  next logits (rows not ``active`` any more may be skipped; their logits are then 0).

:class:`GenericDecoder` calls the model's own ``forward`` with a transformers cache, attention mask and
position ids; it works for every architecture (GPT-2, Llama, Qwen2, ...). At the zoo's sizes a large
part of its cost is per-step overhead inside transformers (mask construction, cache concatenation,
output dataclasses) rather than arithmetic.

:class:`FastLlamaDecoder` runs the model's own weights and modules (``embed_tokens``, RMSNorms,
projections, MLP activation, rotary tables) itself over a KV cache preallocated slot-major at
[P + max_new_tokens, B * kv_heads, head_dim]: per layer and step one matmul for q/k/v and one for
gate/up (weights concatenated once per rollout), the rotary embedding on q and k together, a write
into the cache slot, attention as elementwise products and sums streaming over the contiguous block
of filled slots, and the output and down projections. Rows that have stopped are dropped from the computation (the cache is compacted when a
quarter of the rows still computed have stopped). It supports ``LlamaForCausalLM``,
``Qwen2ForCausalLM`` and ``MistralForCausalLM`` without sliding-window attention and with a static
rotary embedding; :func:`fast_decoder_unsupported_reason` says why any other model falls back to the
generic decoder.

Same samples: the lean decoder uses the same operations as transformers where the order of floating
point operations matters (the concatenated matmuls give bitwise the products of the separate ones;
the rotary form is exact), but its attention kernel is not transformers' SDPA kernel, so logits agree
to float rounding (~1e-7), not bitwise. The tests check the logits within 1e-5 and that the sampled
tokens are identical for the same generator (with and without compaction); a token could only differ
if a uniform draw fell within ~1e-7 of a boundary of the cumulative distribution. The behaviour
log-probs of a rollout never depend on the decoder: they come from one full forward afterwards.

With ``compile=True`` the decode step runs through ``torch.compile`` over the full static cache length
(the additive mask hides the empty slots, so shapes never change; no row compaction). Compilation
costs seconds to a minute per new shape (batch, prompt width, max_new_tokens), cached on disk by
inductor, which is why it is off by default (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ablate.errors import AblateError
from ablate.models.batching import active_batcher
from ablate.models.logprobs import position_ids_from_mask

#: ``type(model).__name__`` of the causal LMs the lean decoder reimplements, with their layer classes.
FAST_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "LlamaDecoderLayer",
    "Qwen2ForCausalLM": "Qwen2DecoderLayer",
    "MistralForCausalLM": "MistralDecoderLayer",
}
#: rotary types whose cos/sin depend on the position only (a table computed once is exact).
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3"})


class Decoder(Protocol):
    """An incremental decoder over a batch of left-padded prompts (see the module docstring)."""

    def prefill(self) -> torch.Tensor:
        """Logits [B, V] (float32) of the first new token."""
        ...

    def step(self, tokens: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B] and return the logits [B, V] (float32) of the next token.

        ``active`` [B] bool marks the rows still generating; a decoder may skip the others (their
        logits are then 0) — their samples are discarded by the caller anyway.
        """
        ...


def _forward_params(model: nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


class GenericDecoder:
    """Incremental decoding through ``model.forward`` and a transformers cache (any causal LM).

    Args:
        model: a Hugging Face causal LM (in eval mode; the caller sets it).
        prompt_ids: [B, P] left-padded prompts.
        prompt_mask: [B, P] 1 on prompt tokens, 0 on the left padding.
        max_new_tokens: the most tokens :meth:`step` will be asked to append.
    """

    def __init__(self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                 max_new_tokens: int) -> None:
        self.model = model
        self.prompt_ids = prompt_ids
        B, P = prompt_ids.shape
        self.P = P
        params = _forward_params(model)
        # transformers 5 names the cache argument ``cache``; 4.x names it ``past_key_values``.
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.extra: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.mask = torch.ones((B, P + max_new_tokens), dtype=prompt_mask.dtype, device=prompt_mask.device)
        self.mask[:, :P] = prompt_mask
        self.next_pos = prompt_mask.long().sum(-1)  # (B,) position of the next token
        self.length = P
        self.cache: Any = None

    def _run(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        kwargs: dict[str, Any] = dict(self.extra)
        if self.cache is not None:
            kwargs[self.cache_kw] = self.cache
        out = self.model(
            input_ids=input_ids,
            attention_mask=self.mask[:, : self.length],
            position_ids=position_ids,
            use_cache=True,
            **kwargs,
        )
        cache = getattr(out, "cache", None)
        self.cache = cache if cache is not None else out.past_key_values
        return out.logits[:, -1].float()  # (B, V)

    def prefill(self) -> torch.Tensor:
        """Run the prompts; logits [B, V] of the first new token."""
        return self._run(self.prompt_ids, position_ids_from_mask(self.mask[:, : self.P]))

    def step(self, tokens: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B]; logits [B, V] of the next token (every row is computed)."""
        del active
        self.length += 1
        pos = self.next_pos.unsqueeze(-1)  # (B, 1)
        self.next_pos = self.next_pos + 1
        return self._run(tokens.unsqueeze(-1), pos)


def fast_decoder_unsupported_reason(model: nn.Module) -> str | None:
    """Why :class:`FastLlamaDecoder` cannot run ``model`` (None when it can)."""
    name = type(model).__name__
    if name not in FAST_ARCHITECTURES:
        return f"{name} is not one of {sorted(FAST_ARCHITECTURES)}"
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if base is None or layers is None or getattr(base, "rotary_emb", None) is None:
        return f"{name} has no model.layers / model.rotary_emb (an older transformers layout)"
    if any(type(layer).__name__ != FAST_ARCHITECTURES[name] for layer in layers):
        return f"{name} has layers other than {FAST_ARCHITECTURES[name]}"
    config = model.config
    rope_type = getattr(base.rotary_emb, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rotary type {rope_type!r} is position-dependent beyond a table"
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types) or (
        getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None)
    ):
        return "sliding-window attention"
    if name == "MistralForCausalLM" and getattr(config, "sliding_window", None):
        return "sliding-window attention"
    if getattr(config, "pretraining_tp", 1) not in (1, None):
        return "pretraining_tp > 1"
    return None


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, the same operations as transformers' ``apply_rotary_pos_emb``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


def _rms_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """The model's RMSNorm; through the fused ``F.rms_norm`` in float32 (the same values as the
    module's ``weight * x * rsqrt(mean(x^2) + eps)``; a test compares the logits), else the module."""
    eps = getattr(norm, "variance_epsilon", None)
    if x.dtype == torch.float32 and eps is not None and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, eps)
    return norm(x)


def _cat_bias(linears: list[nn.Linear]) -> torch.Tensor | None:
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat([lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
                      for lin in linears])


class _LayerWeights:
    """One decoder layer's weights, with q/k/v and gate/up concatenated (one matmul each).

    The concatenated weights are copies, taken at construction; :meth:`refresh` copies the layer's
    current weights into the same tensors (what a decoder kept across optimizer steps needs). The other
    weights are the layer's own parameters, which the optimizer updates in place.
    """

    def __init__(self, layer: nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.norm1, self.norm2 = layer.input_layernorm, layer.post_attention_layernorm
        self._qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        self.w_qkv = torch.cat([lin.weight for lin in self._qkv]).detach()
        self.b_qkv = _cat_bias(self._qkv)
        self.w_o, self.b_o = attn.o_proj.weight, attn.o_proj.bias
        self._gu = [mlp.gate_proj, mlp.up_proj]
        self.w_gu = torch.cat([lin.weight for lin in self._gu]).detach()
        self.b_gu = _cat_bias(self._gu)
        self.w_down, self.b_down = mlp.down_proj.weight, mlp.down_proj.bias
        self.act = mlp.act_fn
        self.inter = mlp.gate_proj.out_features

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the layer's current q/k/v and gate/up weights (and biases) into the concatenated tensors, in place."""
        torch.cat([lin.weight for lin in self._qkv], out=self.w_qkv)
        torch.cat([lin.weight for lin in self._gu], out=self.w_gu)
        for cat, linears in ((self.b_qkv, self._qkv), (self.b_gu, self._gu)):
            fresh = _cat_bias(linears)
            if cat is not None and fresh is not None:
                cat.copy_(fresh)


def layer_weights(model: nn.Module) -> list[_LayerWeights]:
    """The lean decoder's per-layer weights of ``model`` (q/k/v and gate/up concatenated, copies)."""
    return [_LayerWeights(layer) for layer in model.model.layers]


class FastLlamaDecoder:
    """Lean incremental decoding of a Llama-family model over a preallocated KV cache.

    The prompt (prefill) runs through the layers' own modules. Each decode step then takes, per layer,
    one matmul for q/k/v and one for gate/up (the weights concatenated once per rollout; the products
    are bitwise those of the separate projections), the rotary embedding on q and k together, a write
    into the slot-major cache, attention streamed over the filled slots, and the output and down
    projections — a few dozen tensor operations per layer, without transformers' per-call
    bookkeeping.

    Args:
        model: a model for which :func:`fast_decoder_unsupported_reason` returns None (eval mode).
        prompt_ids: [B, P] left-padded prompts.
        prompt_mask: [B, P] 1 on prompt tokens, 0 on the left padding.
        max_new_tokens: cache slots reserved after the prompt.
        compile: run the decode step through ``torch.compile`` over the full static cache.
    """

    def __init__(self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                 max_new_tokens: int, *, compile: bool = False, weights: list[_LayerWeights] | None = None) -> None:
        reason = fast_decoder_unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"FastLlamaDecoder cannot run this model: {reason}")
        base = model.model
        self.embed, self.layers, self.norm = base.embed_tokens, list(base.layers), base.norm
        self.lm_head = model.get_output_embeddings()
        # ``weights``: :func:`layer_weights` of this model, shared with other decoders of it (they are refreshed by
        # whoever keeps them across optimizer steps); by default concatenated now, for this rollout
        self.weights = weights if weights is not None else layer_weights(model)
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        cfg = model.config
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(getattr(cfg, "num_key_value_heads", None) or self.n_heads)
        self.rep = self.n_heads // self.n_kv
        B, P = prompt_ids.shape
        S = P + max_new_tokens
        self.B, self.P, self.S = B, P, S
        device = prompt_ids.device
        dtype = self.embed.weight.dtype
        # slot-major cache [S, B * Hkv, D]: the filled slots [:end] are one contiguous block, which
        # the decode-step attention streams through (faster on CPU than per-(row, head) matmuls)
        self.k_cache = [torch.zeros(S, B * self.n_kv, self.head_dim, dtype=dtype, device=device)
                        for _ in self.layers]
        self.v_cache = [torch.zeros_like(k) for k in self.k_cache]
        # cos/sin of every position, from the model's own rotary module (elementwise in the position,
        # so the table equals what the model computes step by step).
        positions = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
        probe = torch.zeros(1, 1, self.head_dim, dtype=dtype, device=device)
        cos, sin = base.rotary_emb(probe, positions)
        self.cos, self.sin = cos[0], sin[0]  # (S, D)
        half = self.head_dim // 2
        self.rot_perm = torch.cat([torch.arange(half, self.head_dim), torch.arange(half)]).to(device)
        sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(device=device, dtype=dtype)
        self.sin_signed = self.sin * sign  # rotate_half(x) * sin == x[perm] * (sign * sin), exactly
        # additive attention bias per cache slot and row [S, B]: 0 where a key may be attended, else -inf
        self.bias = torch.full((S, B), float("-inf"), dtype=dtype, device=device)
        self.rows: torch.Tensor | None = None  # rows of the full batch still computed (None: all)
        self.reset(prompt_ids, prompt_mask)
        self.compiled = None
        if compile:
            self.compiled = torch.compile(self._step_static, dynamic=False)

    def reset(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Start over with new prompts of the same shape [B, P], reusing the cache and tables in place
        (the attention bias, positions and slot are reset; :meth:`prefill` overwrites the prompt slots,
        and the bias hides every later slot until a step fills it). Not after rows were dropped."""
        if tuple(prompt_ids.shape) != (self.B, self.P) or tuple(prompt_mask.shape) != (self.B, self.P):
            raise ValueError(f"FastLlamaDecoder.reset: prompts of shape {tuple(prompt_ids.shape)}, "
                             f"the decoder holds {(self.B, self.P)}")
        if self.rows is not None:
            raise ValueError("FastLlamaDecoder.reset: stopped rows were dropped from the cache; make a new decoder")
        self.bias.fill_(float("-inf"))
        self.bias[: self.P].masked_fill_(prompt_mask.bool().t(), 0.0)
        self.prompt_ids, self.prompt_mask = prompt_ids, prompt_mask
        self.next_pos = prompt_mask.long().sum(-1)  # (B,) rotary position of the next token
        self.slot = self.P  # cache slot of the next token (the same for every row)

    # ---- prefill: the layers' own modules -------------------------------------------------------
    def _attend_prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
                        ) -> torch.Tensor:
        """Prompt attention: q [B, Hq, P, D], k/v [B, Hkv, P, D], mask [B, 1, P, P] bool -> [B, Hq, P, D]."""
        if self.rep > 1:
            k = k.repeat_interleave(self.rep, dim=1)
            v = v.repeat_interleave(self.rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)

    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Run the prompts; logits [B, V] of the first new token."""
        B, P, D = self.B, self.P, self.head_dim
        pos = self.prompt_mask.long().cumsum(-1).sub(1).clamp(min=0)  # (B, P)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)  # (B, 1, P, D)
        causal = torch.ones(P, P, dtype=torch.bool, device=pos.device).tril()
        eye = torch.eye(P, dtype=torch.bool, device=pos.device)
        # a left-padding query attends to itself only, so that no row of the mask is empty (no NaN)
        mask = ((causal & self.prompt_mask.bool()[:, None, :]) | eye).unsqueeze(1)  # (B, 1, P, P)
        h = self.embed(self.prompt_ids)  # (B, P, H)
        for layer, kc, vc in zip(self.layers, self.k_cache, self.v_cache):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(B, P, -1, D).transpose(1, 2)  # (B, Hq, P, D)
            k = attn.k_proj(x).view(B, P, -1, D).transpose(1, 2)  # (B, Hkv, P, D)
            v = attn.v_proj(x).view(B, P, -1, D).transpose(1, 2)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            kc[:P] = k.permute(2, 0, 1, 3).reshape(P, -1, D)  # (P, B * Hkv, D)
            vc[:P] = v.permute(2, 0, 1, 3).reshape(P, -1, D)
            o = self._attend_prefill(q, k, v, mask).transpose(1, 2).reshape(B, P, -1)
            h = h + attn.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.lm_head(self.norm(h[:, -1])).float()  # (B, V)

    # ---- decode steps: concatenated weights, batched-matmul attention ----------------------------
    def _attend_step(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, end: int, bias: torch.Tensor
                     ) -> torch.Tensor:
        """One new query per row over cache slots ``[:end]``: q [B, Hq, D] -> [B, Hq * D].

        Softmax of the scaled dot products (``bias`` [end, B * Hkv, rep]: 0 or -inf) times the values,
        written as elementwise products and sums over the slot-major cache, which streams through one
        contiguous block per layer; the query heads of a kv group share their K/V without a copy.
        """
        B, D, rep = q.shape[0], self.head_dim, self.rep
        qg = q.reshape(1, B * self.n_kv, rep, D)
        keys, values = kc[:end].unsqueeze(2), vc[:end].unsqueeze(2)  # (end, B*Hkv, 1, D)
        scores = (keys * qg).sum(-1).mul_(self.scaling).add_(bias)  # (end, B*Hkv, rep)
        probs = torch.softmax(scores, dim=0)
        return (probs.unsqueeze(-1) * values).sum(0).view(B, self.n_heads * D)

    def step_layers(self, tokens: torch.Tensor, pos: torch.Tensor, slot: int | torch.Tensor, end: int
                     ) -> torch.Tensor:
        B, D, Hq, Hkv = tokens.shape[0], self.head_dim, self.n_heads, self.n_kv
        # rotary: x * cos + x[perm] * (sign * sin), the same values as transformers' rotate_half form
        # (multiplying by -1 is exact) in four operations instead of seven
        cos = self.cos[pos].unsqueeze(1)  # (B, 1, D)
        sin = self.sin_signed[pos].unsqueeze(1)
        bias = self.bias[:end, :, None, None].expand(end, B, Hkv, self.rep).reshape(end, B * Hkv, self.rep)
        h = self.embed(tokens)  # (B, H)
        for w, kc, vc in zip(self.weights, self.k_cache, self.v_cache):
            qkv = F.linear(_rms_norm(h, w.norm1), w.w_qkv, w.b_qkv).view(B, Hq + 2 * Hkv, D)
            qk = qkv[:, : Hq + Hkv]
            qk = qk * cos + qk.index_select(-1, self.rot_perm) * sin  # (B, Hq + Hkv, D)
            q, k, v = qk[:, :Hq], qk[:, Hq:], qkv[:, Hq + Hkv :]
            if isinstance(slot, int):
                kc[slot].view(B, Hkv, D).copy_(k)
                vc[slot].view(B, Hkv, D).copy_(v)
            else:
                kc.index_copy_(0, slot, k.reshape(1, B * Hkv, D).to(kc.dtype))  # (index_copy_ does not cast)
                vc.index_copy_(0, slot, v.reshape(1, B * Hkv, D).to(vc.dtype))
            h = h + F.linear(self._attend_step(q, kc, vc, end, bias), w.w_o, w.b_o)
            gu = F.linear(_rms_norm(h, w.norm2), w.w_gu, w.b_gu)
            h = h + F.linear(w.act(gu[:, : w.inter]) * gu[:, w.inter :], w.w_down, w.b_down)
        return self.lm_head(_rms_norm(h, self.norm)).float()  # (B, V)

    def _step_static(self, tokens: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """The decode step over the whole cache (static shapes; what ``torch.compile`` traces)."""
        return self.step_layers(tokens, pos, slot, self.S)

    def _compact(self, keep: torch.Tensor) -> None:
        """Drop the rows not in ``keep`` (indices into the current rows) from the cache and state."""
        heads = torch.arange(self.n_kv, device=keep.device)
        keep_g = (keep.unsqueeze(1) * self.n_kv + heads).reshape(-1)  # cache columns b * Hkv + h
        self.k_cache = [k.index_select(1, keep_g) for k in self.k_cache]
        self.v_cache = [v.index_select(1, keep_g) for v in self.v_cache]
        self.bias = self.bias.index_select(1, keep)
        self.next_pos = self.next_pos.index_select(0, keep)
        rows = self.rows if self.rows is not None else torch.arange(self.B, device=keep.device)
        self.rows = rows.index_select(0, keep)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B]; logits [B, V] of the next token.

        Rows that are not ``active`` [B] any more are dropped from the computation once they are a
        quarter of the rows still computed (the cache is compacted; their logits are returned as 0).
        The compiled step keeps static shapes and computes every row.
        """
        slot = self.slot
        if slot >= self.S:
            raise RuntimeError(f"FastLlamaDecoder: more than {self.S - self.P} steps")
        if active is not None and self.compiled is None:
            current = active if self.rows is None else active.index_select(0, self.rows)
            n_active = int(current.sum())
            if 0 < n_active <= 0.75 * current.shape[0]:
                self._compact(current.nonzero().squeeze(1))
        self.bias[slot] = 0.0
        pos = self.next_pos
        self.next_pos = pos + 1
        self.slot = slot + 1
        if self.rows is not None:
            tokens = tokens.index_select(0, self.rows)
        if self.compiled is not None:
            slot_t = torch.full((1,), slot, dtype=torch.long, device=tokens.device)
            return self.compiled(tokens, pos, slot_t)
        logits = self.step_layers(tokens, pos, slot, slot + 1)
        if self.rows is None:
            return logits
        full = logits.new_zeros((self.B, logits.shape[1]))
        return full.index_copy_(0, self.rows, logits)


def make_decoder(model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int,
                 *, fast: bool | None = None, compile: bool = False) -> Decoder:
    """The decoder for ``model``: the lean one when supported (``fast`` None or True), else generic.

    Args:
        model: a Hugging Face causal LM in eval mode.
        prompt_ids: [B, P] left-padded prompts; prompt_mask: [B, P].
        max_new_tokens: the most steps that will be taken.
        fast: None picks the lean decoder when the model supports it; True requires it (AblateError
            with the reason otherwise); False always uses the generic decoder.
        compile: compile the lean decoder's step (ignored by the generic decoder).
    """
    if fast is False:
        return GenericDecoder(model, prompt_ids, prompt_mask, max_new_tokens)
    reason = fast_decoder_unsupported_reason(model)
    batcher = active_batcher()  # a population member decodes batched with the others
    shared = batcher.decoder(model, prompt_ids, prompt_mask, max_new_tokens) if batcher is not None else None
    if shared is not None:
        return shared
    if reason is None:
        return FastLlamaDecoder(model, prompt_ids, prompt_mask, max_new_tokens, compile=compile)
    if fast:
        raise AblateError(f"fast=True: the lean decoder cannot run this model ({reason}); "
                          "use fast=None (fall back automatically) or fast=False")
    return GenericDecoder(model, prompt_ids, prompt_mask, max_new_tokens)


def shape_signature(model: nn.Module) -> tuple:
    """What models computed together must share (a population's stacked models, a captured CUDA graph's
replays): architecture, every parameter's name, shape and
    dtype, device and the rotary configuration."""
    params = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in model.named_parameters())
    rotary = model.model.rotary_emb
    return (type(model).__name__, str(next(model.parameters()).device), params,
            getattr(rotary, "rope_type", "default"), float(getattr(model.config, "rope_theta", 0.0) or 0.0),
            float(getattr(model.config, "rms_norm_eps", 0.0)))

