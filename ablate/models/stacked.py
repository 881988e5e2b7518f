"""K Llama-family models of one shape computed as one: batched matmuls over their stacked weights.

A *population* (:mod:`ablate.train.population`) trains K trials of the same model shape in one process.
Their forward passes and decode steps run here, once for all K members, with a leading member
dimension: the weights of the K models are stacked to [K, ...] (``torch.stack``, which is
differentiable, so a backward through the stacked forward deposits each member's gradient in that
member's own parameters) and every projection is one ``torch.bmm`` over the K members.

Shapes: K members, B rows each (the same B for all), L tokens, H hidden, Hq query heads, Hkv key/value
heads, D head dim, S cache slots.

- :meth:`StackedLlama.hidden` -- the trunk: ids [K, B, L] and attention mask [K, B, L] -> the final
  normed hidden states [K, B, L, H], which is what ``model.base_model(...).last_hidden_state`` gives
  for each member (the training and behaviour log-prob forward of :mod:`ablate.models.logprobs`);
- :class:`StackedDecoder` -- incremental decoding over a KV cache [K, B, Hkv, S, D]: ``prefill()`` and
  ``step(tokens [K, B])`` return float32 logits [K, B, V], as :class:`ablate.models.fast_decode.Decoder`
  does per member; members can leave (:meth:`StackedDecoder.keep`).

The arithmetic is that of transformers' Llama layers (RMSNorm, rotary embedding from the model's own
rotary module, SDPA attention with grouped key/value heads, SiLU-gated MLP), in another order of
operations where batching requires it, so a member's values agree with its solo computation to float
rounding (the tests check 1e-5 in float32), not bitwise. Which models qualify:
:func:`stack_unsupported_reason`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ablate.models.fast_decode import apply_rotary, fast_decoder_unsupported_reason
from ablate.models.logprobs import position_ids_from_mask

#: Per-layer parameter paths (relative to ``model.model.layers[i]``) a stacked layer reads.
LAYER_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def stack_unsupported_reason(model: nn.Module) -> str | None:
    """Why ``model`` cannot be computed stacked (None when it can): the lean decoder's architectures
    (Llama, Qwen2, Mistral without sliding windows), no dropout, SiLU MLP."""
    reason = fast_decoder_unsupported_reason(model)
    if reason is not None:
        return reason
    config = model.config
    if float(getattr(config, "attention_dropout", 0.0) or 0.0) != 0.0:
        return "attention dropout (a stacked forward would draw other dropout masks)"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act={config.hidden_act!r} (the stacked MLP is SiLU-gated)"
    return None


def _bmm_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [K, N, I] @ weight[k].T [K, I, O] (+ bias [K, O]) -> [K, N, O]."""
    out = torch.bmm(x, weight.transpose(1, 2))
    return out if bias is None else out + bias.unsqueeze(1)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm with per-member weights: x [K, N, H], weight [K, H]."""
    dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight.unsqueeze(1) * xf.to(dtype)


class StackedLlama:
    """The K models (same :func:`shape_signature`) as one batched computation.

    Args:
        models: the K causal LMs; their parameters are read (stacked) at every call, so updates
            between calls are seen.
        grad: stack with autograd (gradients reach each member's parameters); False stacks detached
            copies once, for no-grad use (decoding).
    """

    def __init__(self, models: Sequence[nn.Module], *, grad: bool = True) -> None:
        self.models = list(models)
        first = self.models[0]
        config = first.config
        attn = first.model.layers[0].self_attn
        self.n_layers = len(first.model.layers)
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        self.n_heads = int(config.num_attention_heads)
        self.n_kv = int(getattr(config, "num_key_value_heads", None) or self.n_heads)
        self.eps = float(config.rms_norm_eps)
        self.rotary = first.model.rotary_emb
        self.pad_id = first.model.embed_tokens.padding_idx
        self.grad = grad
        self._weights = None if grad else self._stack()

    def _stack(self) -> dict[str, torch.Tensor | None]:
        """Every weight the forward reads, stacked over the members: name -> [K, ...] (or None)."""
        def stack(get) -> torch.Tensor | None:
            tensors = [get(m) for m in self.models]
            if tensors[0] is None:
                return None
            out = torch.stack(tensors)
            return out if self.grad else out.detach()

        w: dict[str, torch.Tensor | None] = {
            "embed": stack(lambda m: m.model.embed_tokens.weight),
            "norm": stack(lambda m: m.model.norm.weight),
            "head": stack(lambda m: m.get_output_embeddings().weight),
            "head_bias": stack(lambda m: m.get_output_embeddings().bias),
        }
        for i in range(self.n_layers):
            w[f"{i}.norm1"] = stack(lambda m, i=i: m.model.layers[i].input_layernorm.weight)
            w[f"{i}.norm2"] = stack(lambda m, i=i: m.model.layers[i].post_attention_layernorm.weight)
            for path in LAYER_LINEARS:
                w[f"{i}.{path}"] = stack(lambda m, i=i, p=path: m.model.layers[i].get_submodule(p).weight)
                w[f"{i}.{path}.bias"] = stack(lambda m, i=i, p=path: m.model.layers[i].get_submodule(p).bias)
        return w

    def weights(self) -> dict[str, torch.Tensor | None]:
        """The stacked weights (stacked anew with autograd when ``grad``, else the copy made at init)."""
        return self._stack() if self._weights is None else self._weights

    def keep(self, members: torch.Tensor) -> None:
        """Keep only the members at indices ``members`` (no-grad stacks only)."""
        self.models = [self.models[i] for i in members.tolist()]
        if self._weights is not None:
            self._weights = {k: None if v is None else v.index_select(0, members) for k, v in self._weights.items()}

    def embed(self, w: dict[str, torch.Tensor | None], ids: torch.Tensor) -> torch.Tensor:
        """ids [K, B, L] -> embeddings [K, B, L, H]; like ``nn.Embedding(padding_idx=pad)``, the pad
        token's embedding gets no gradient from its occurrences."""
        K = ids.shape[0]
        member = torch.arange(K, device=ids.device).view(K, *([1] * (ids.dim() - 1)))
        x = w["embed"][member, ids]
        if self.pad_id is not None and x.requires_grad:
            x = torch.where((ids == self.pad_id).unsqueeze(-1), x.detach(), x)
        return x

    def rotary_tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [..., D] of ``positions`` (any shape) from the model's own rotary module."""
        flat = positions.reshape(1, -1)
        probe = torch.zeros(1, 1, self.head_dim, dtype=dtype, device=positions.device)
        cos, sin = self.rotary(probe, flat)
        return cos[0].view(*positions.shape, -1), sin[0].view(*positions.shape, -1)

    def layers(self, w: dict[str, torch.Tensor | None], x: torch.Tensor, positions: torch.Tensor,
               key_mask: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
               slot: int = 0) -> torch.Tensor:
        """Run every layer on x [K, B, L, H] (new tokens at ``positions`` [K, B, L]); returns the final
        normed hidden states [K, B, L, H].

        Args:
            key_mask: [K, B, E] bool, the keys each row may attend (E = L without a cache, else the
                filled slots ``slot + L``); a query also never attends a key after its own slot.
            cache: per layer (k, v) [K, B, Hkv, S, D], written at slots ``[slot, slot + L)``; None: the
                keys are the L new tokens only.
        """
        K, B, L, H = x.shape
        D, Hq, Hkv = self.head_dim, self.n_heads, self.n_kv
        end = key_mask.shape[-1]
        cos, sin = self.rotary_tables(positions, x.dtype)  # (K, B, L, D)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # (K, B, 1, L, D)
        q_slots = torch.arange(slot, slot + L, device=x.device)
        causal = q_slots.unsqueeze(1) >= torch.arange(end, device=x.device).unsqueeze(0)  # (L, E)
        mask = key_mask.unsqueeze(2) & causal  # (K, B, L, E)
        # a query with no key to attend (left padding) attends its own slot: no empty softmax row, no NaN
        mask = mask | (q_slots.unsqueeze(1) == torch.arange(end, device=x.device).unsqueeze(0))
        mask = mask.view(K * B, 1, L, end)
        h = x.reshape(K, B * L, H)
        for i in range(self.n_layers):
            def lin(name: str, inp: torch.Tensor, i: int = i) -> torch.Tensor:
                return _bmm_linear(inp, w[f"{i}.{name}"], w[f"{i}.{name}.bias"])

            a = _rms_norm(h, w[f"{i}.norm1"], self.eps)
            q = lin("self_attn.q_proj", a).view(K, B, L, Hq, D).transpose(2, 3)  # (K, B, Hq, L, D)
            k = lin("self_attn.k_proj", a).view(K, B, L, Hkv, D).transpose(2, 3)
            v = lin("self_attn.v_proj", a).view(K, B, L, Hkv, D).transpose(2, 3)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            if cache is not None:
                kc, vc = cache[i]
                kc[:, :, :, slot : slot + L] = k
                vc[:, :, :, slot : slot + L] = v
                k, v = kc[:, :, :, :end], vc[:, :, :, :end]
            k = k.reshape(K * B, Hkv, end, D)
            v = v.reshape(K * B, Hkv, end, D)
            if Hq != Hkv:
                k = k.repeat_interleave(Hq // Hkv, dim=1)
                v = v.repeat_interleave(Hq // Hkv, dim=1)
            o = F.scaled_dot_product_attention(q.reshape(K * B, Hq, L, D), k, v, attn_mask=mask, scale=self.scaling)
            o = o.view(K, B, Hq, L, D).transpose(2, 3).reshape(K, B * L, Hq * D)
            h = h + lin("self_attn.o_proj", o)
            m = _rms_norm(h, w[f"{i}.norm2"], self.eps)
            h = h + lin("mlp.down_proj", F.silu(lin("mlp.gate_proj", m)) * lin("mlp.up_proj", m))
        return _rms_norm(h, w["norm"], self.eps).view(K, B, L, H)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The trunk of every member: ids [K, B, L], mask [K, B, L] -> final hidden states [K, B, L, H]
        (positions count attended tokens only, as :func:`position_ids_from_mask`)."""
        K, B, L = input_ids.shape
        w = self.weights()
        positions = position_ids_from_mask(attention_mask.reshape(K * B, L)).view(K, B, L)
        return self.layers(w, self.embed(w, input_ids), positions, attention_mask.bool())

    def logits(self, w: dict[str, torch.Tensor | None], hidden: torch.Tensor) -> torch.Tensor:
        """hidden [K, B, H] -> float32 logits [K, B, V] through each member's LM head."""
        return _bmm_linear(hidden, w["head"], w["head_bias"]).float()


class StackedDecoder:
    """Incremental decoding of K members at once over a preallocated KV cache [K, B, Hkv, S, D].

    Args:
        models: the K models (same :func:`shape_signature`, eval mode).
        prompt_ids: [K, B, P] left-padded prompts; prompt_mask: [K, B, P].
        max_new_tokens: cache slots reserved after the prompts.
    """

    def __init__(self, models: Sequence[nn.Module], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                 max_new_tokens: int) -> None:
        self.stack = StackedLlama(models, grad=False)
        K, B, P = prompt_ids.shape
        w = self.stack.weights()
        dtype, device = w["embed"].dtype, prompt_ids.device
        shape = (K, B, self.stack.n_kv, P + max_new_tokens, self.stack.head_dim)
        self.cache = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                      for _ in range(self.stack.n_layers)]
        self.key_mask = torch.zeros(K, B, P + max_new_tokens, dtype=torch.bool, device=device)
        self.key_mask[:, :, :P] = prompt_mask.bool()
        self.prompt_ids, self.prompt_mask = prompt_ids, prompt_mask
        self.next_pos = prompt_mask.long().sum(-1)  # (K, B)
        self.P, self.slot, self.S = P, P, P + max_new_tokens

    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Run the prompts; logits [K, B, V] of every member's first new token."""
        K, B, P = self.prompt_ids.shape
        w = self.stack.weights()
        positions = position_ids_from_mask(self.prompt_mask.reshape(K * B, P)).view(K, B, P)
        h = self.stack.layers(w, self.stack.embed(w, self.prompt_ids), positions, self.key_mask[:, :, :P],
                              self.cache, 0)
        return self.stack.logits(w, h[:, :, -1])

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens`` [K, B]; logits [K, B, V] of the next token (every row is computed)."""
        if self.slot >= self.S:
            raise RuntimeError(f"StackedDecoder: more than {self.S - self.P} steps")
        w = self.stack.weights()
        slot = self.slot
        self.key_mask[:, :, slot] = True
        positions = self.next_pos.unsqueeze(-1)  # (K, B, 1)
        self.next_pos = self.next_pos + 1
        self.slot = slot + 1
        h = self.stack.layers(w, self.stack.embed(w, tokens.unsqueeze(-1)), positions,
                              self.key_mask[:, :, : slot + 1], self.cache, slot)
        return self.stack.logits(w, h[:, :, -1])

    def keep(self, members: torch.Tensor) -> None:
        """Keep only the members at indices ``members`` [K'] (the others have finished decoding)."""
        self.stack.keep(members)
        self.cache = [(k.index_select(0, members), v.index_select(0, members)) for k, v in self.cache]
        self.key_mask = self.key_mask.index_select(0, members)
        self.next_pos = self.next_pos.index_select(0, members)
