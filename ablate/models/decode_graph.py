"""The decode loop as one replayed CUDA graph per step: sampling without per-step launch cost.

On a GPU the lean decoder's step (:class:`~ablate.models.fast_decode.FastLlamaDecoder`) is a few hundred
small kernels, and launching them from Python costs far more than running them: SmolLM2-135M took
~16 ms a step at batch 64 on an H200, where reading its weights takes ~0.1 ms. :class:`GraphSampler`
captures one whole decode step — sample the next token from the current logits (temperature, top-p,
the rollout's generator), record it, append it to the KV cache and compute the next logits — as a
``torch.cuda.CUDAGraph`` over static buffers, and the loop replays it: one launch per step.

Static shapes: the graph attends over the whole preallocated cache [P + max_new_tokens] (the additive
bias hides the empty slots) and computes every row (no compaction of stopped rows). Prompts are
left-padded to a bucket of :data:`PROMPT_BUCKET` tokens, so that a study's rollouts share few shapes.

Reuse across trials: a graph reads fixed addresses, so a sampler decodes from its own copy of the
model's weights (:class:`_Shadow`, one per worker process and model shape, made by ``copy.deepcopy``
of the first model of that shape) and, before each rollout, copies the weights of the model it samples
for into that copy (and into the concatenated q/k/v and gate/up weights). The samplers are kept per
process (:func:`graph_sampler`, up to :data:`MAX_SAMPLERS`), keyed by (model shape, batch, prompt
bucket, max_new_tokens, sampling options, autocast): a worker captures each shape once, and every later
rollout of that shape replays it -- the same trial's later steps and the next trials' (whose
``perf/graph_capture_s`` then stays 0). A model's shape (:func:`_shape_key`) is
:func:`~ablate.models.fast_decode.shape_signature` (architecture, every parameter's name, shape and dtype,
device, rotary configuration) with every module's class, every buffer's name, shape and dtype, and the
attention scale and activation, so two models of one shape differ in their weights only, which the
copy brings over. A capture that fails leaves the shape decoding eagerly for that trial; the next
trial's model tries again. The kept samplers (KV caches, graph memory, one copy of the weights per
shape) stay allocated between trials: that is the memory the reuse costs.

The random draws: a replay draws from the sampler's own generator, registered with the graph. Its
state is set from the rollout's generator before the loop and copied back after it, so the rollout
consumes the same numbers from the generator as the eager loop (B uniforms per sampled step). By
torch's design of graph-safe RNG (Philox's counter advanced per replay by the capture's total), a replay
of a captured draw gives the eager draw's numbers; tests/test_gpu.py checks that on a GPU (not yet run
on one). What differs from the eager lean decoder is float rounding: attention over the full cache,
and a wider left padding in the prompt bucket, sum in another order. The option is therefore a
recorded one (``rollout.cuda_graph``, part of the trial key when true).

On a device other than CUDA nothing is captured: :meth:`GraphSampler.sample` runs the same step
function eagerly over the same static buffers. That is what the CPU tests check against the ordinary
loop (same tokens, logits to rounding); it has no speed benefit there.
"""

from __future__ import annotations

import copy
import math
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ablate.models.fast_decode import (
    FastLlamaDecoder,
    fast_decoder_unsupported_reason,
    layer_weights,
    shape_signature,
)
from ablate.models.sampling import sample_next

#: Prompts are left-padded to a multiple of this many tokens in graph mode (fewer shapes to capture).
PROMPT_BUCKET = 16
#: Samplers kept per process (least recently used dropped first); each holds a KV cache of its shape.
MAX_SAMPLERS = 8
#: Eager runs of the step on a side stream before a capture (CUDA's recommended warm-up).
WARMUP_STEPS = 2

__all__ = ["GraphSampler", "MAX_SAMPLERS", "PROMPT_BUCKET", "capture_seconds", "clear_samplers", "graph_sampler",
           "padded_width", "samplers_for"]


def padded_width(width: int, max_new_tokens: int, limit: int | None) -> int:
    """The prompt width [tokens] a graph samples at: ``width`` rounded up to a multiple of
    :data:`PROMPT_BUCKET`, unless that would pass the model's position ``limit``."""
    bucket = PROMPT_BUCKET * math.ceil(width / PROMPT_BUCKET)
    return bucket if limit is None or bucket + max_new_tokens <= limit else width


def _autocast_state(device: torch.device) -> tuple[bool, torch.dtype | None]:
    if not torch.is_autocast_enabled(device.type):
        return False, None
    return True, torch.get_autocast_dtype(device.type)


def _shape_key(model: nn.Module) -> tuple:
    """What models sharing a :class:`_Shadow` must agree on: :func:`~ablate.models.fast_decode.shape_signature`,
    the class of every module (``model.lm_head_dtype=float32`` swaps the head's class, not its weights),
    every buffer's name, shape and dtype (the rotary ``inv_freq`` is one: not copied, so its inputs are in
    the key), the rotary scaling options, the attention scale and the MLP activation, from which the
    decoder's tables and step are built."""
    config = model.config
    modules = tuple((name, type(module).__qualname__) for name, module in model.named_modules())
    buffers = tuple((name, tuple(b.shape), str(b.dtype)) for name, b in model.named_buffers())
    return (shape_signature(model), modules, buffers, repr(getattr(config, "rope_scaling", None)),
            repr(getattr(config, "rope_parameters", None)), float(model.model.layers[0].self_attn.scaling),
            str(getattr(config, "hidden_act", None)))


class _Shadow:
    """The decode graphs' own copy of one model shape in this process: ``model``, a deep copy of the
    first model of that shape (eval mode, no gradients), and its concatenated layer ``weights``.
    :meth:`load` copies the weights of any model of the same shape into both, in place, so that a graph
    captured over them serves every such model. ``lock``: one rollout at a time decodes through them."""

    def __init__(self, model: nn.Module) -> None:
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        for param in self.model.parameters():
            param.grad = None
        self.params = list(self.model.parameters())
        self.weights = layer_weights(self.model)
        self.lock = threading.Lock()

    @torch.no_grad()
    def load(self, model: nn.Module) -> None:
        """Copy ``model``'s current parameters (same shape) into the copy and its concatenated weights."""
        if model is not self.model:
            source = list(model.parameters())
            if len(source) != len(self.params):
                raise ValueError(f"decode graph: a model with {len(source)} parameter tensors, the copy has "
                                 f"{len(self.params)}")
            for dst, src in zip(self.params, source):
                dst.copy_(src)
        for w in self.weights:
            w.refresh()


class GraphSampler:
    """One captured decode step at one shape, replayed for every rollout of that shape in this process.

    Args:
        shadow: the copy of the model shape it decodes with (see :class:`_Shadow`).
        batch, width, max_new_tokens: B rows, prompts left-padded to ``width`` tokens, at most
            ``max_new_tokens`` steps.
        temperature, top_p: the sampling options (0 = greedy); ``logp_temperature``: also record the
            sampler's log-prob of each token at this temperature (None: not).
        stop_ids, pad_id: a row stops at a stop id; later tokens are ``pad_id`` with mask 0.
        capture: capture a CUDA graph (True only on a CUDA device); False runs the step eagerly.
    """

    def __init__(self, shadow: _Shadow, *, batch: int, width: int, max_new_tokens: int, temperature: float,
                 top_p: float, logp_temperature: float | None, stop_ids: list[int], pad_id: int,
                 capture: bool) -> None:
        model = shadow.model
        device = model.get_output_embeddings().weight.device
        self.shadow, self.model, self.device, self.capture = shadow, model, device, capture
        self.B, self.P, self.N = batch, width, max_new_tokens
        self.temperature, self.top_p, self.logp_temperature = temperature, top_p, logp_temperature
        self.pad_id = pad_id
        self.autocast = _autocast_state(device)
        ids = torch.full((batch, width), pad_id, dtype=torch.long, device=device)
        mask = torch.ones((batch, width), dtype=torch.long, device=device)
        self.decoder = FastLlamaDecoder(model, ids, mask, max_new_tokens, weights=shadow.weights)
        self.stops = torch.tensor(stop_ids, dtype=torch.long, device=device)
        # the loop's state, all static: what a replay reads and writes
        self.logits: torch.Tensor | None = None  # [B, V] float32, allocated at the first prefill
        self.out = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
        self.mask = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device)
        self.logp = torch.zeros_like(self.mask) if logp_temperature is not None else None
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.t = torch.zeros(1, dtype=torch.long, device=device)  # the step being sampled
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # the cache slot it fills
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)  # its rotary position per row
        self.generator = torch.Generator(device=device)
        self.graph: Any = None
        self.capture_s = 0.0  # seconds spent capturing (warm-up included), all captures
        self.capture_error = ""  # why the last capture failed (the sampler then runs eagerly), else ""
        self._failed_for: weakref.ref | None = None  # the model whose rollout saw that failure

    # ---- the step -------------------------------------------------------------------------------
    def _step(self) -> None:
        """Sample step ``t`` from ``logits``, record it, and compute the next logits (all in place)."""
        logits = self.logits
        tokens = sample_next(logits, temperature=self.temperature, top_p=self.top_p, generator=self.generator)
        tokens = tokens.masked_fill(self.finished, self.pad_id)  # (B,)
        self.out.index_copy_(1, self.t, tokens.unsqueeze(1))
        self.mask.index_copy_(1, self.t, (~self.finished).float().unsqueeze(1))
        if self.logp is not None:
            scaled = logits / self.logp_temperature if self.logp_temperature != 1.0 else logits
            token_logp = torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            self.logp.index_copy_(1, self.t, token_logp.masked_fill(self.finished, 0.0).unsqueeze(1))
        self.finished |= (tokens.unsqueeze(1) == self.stops).any(1)
        d = self.decoder
        d.bias.index_fill_(0, self.slot, 0.0)
        logits.copy_(d.step_layers(tokens, self.pos, self.slot, d.S))
        self.pos.add_(1)
        self.slot.add_(1)
        self.t.add_(1)

    def _start(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """Reset the loop's state for ``prompt_ids`` [B, width] and run the prompts (eagerly)."""
        d = self.decoder
        d.reset(prompt_ids, prompt_mask)
        logits = d.prefill()
        if self.logits is None:
            self.logits = torch.empty_like(logits)
        self.logits.copy_(logits)
        self.out.fill_(self.pad_id)
        self.mask.zero_()
        if self.logp is not None:
            self.logp.zero_()
        self.finished.zero_()
        self.t.zero_()
        self.slot.fill_(self.P)
        self.pos.copy_(d.next_pos)

    def _capture(self) -> None:
        """Capture :meth:`_step` as a CUDA graph (after a warm-up on a side stream), under the autocast
        state the sampler was made for, with autocast's weight cache off (required inside a capture)."""
        t0 = time.perf_counter()
        try:
            self._capture_graph()
        finally:  # warm-up and capture, also when it failed
            self.capture_s += time.perf_counter() - t0

    def _capture_graph(self) -> None:
        enabled, dtype = self.autocast
        kind = self.device.type
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side), torch.autocast(kind, dtype=dtype, enabled=enabled, cache_enabled=False):
            for _ in range(min(WARMUP_STEPS, self.N)):  # no step past the cache's last slot
                self._step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.generator)
        # thread_local: CUDA work of other threads (another trial's, say) does not void this capture
        with torch.cuda.graph(graph, capture_error_mode="thread_local"), \
                torch.autocast(kind, dtype=dtype, enabled=enabled, cache_enabled=False):
            self._step()
        torch.cuda.synchronize(self.device)
        self.graph = graph

    @torch.no_grad()
    def sample(self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
        """The decode loop of ``model`` (of the sampler's shape: its current weights are copied in first)
        over ``prompt_ids`` [B, width] (left-padded; ``prompt_mask`` the same shape). A capture made
        here (the shape's first rollout in this process) is counted in ``model``'s :func:`capture_seconds`.

        Returns:
            ``(completion_ids [B, T], mask [B, T] float32, T, logp [B, T] or None)``, new tensors, with
            T <= max_new_tokens the steps run: what the ordinary loop returns.
        """
        with self.shadow.lock:
            self.shadow.load(model)
            failed_for = self._failed_for() if self._failed_for is not None else None
            if self.capture and self.graph is None and failed_for is not model:
                self._start(prompt_ids, prompt_mask)  # the warm-up needs valid logits; it dirties the state
                before = self.capture_s
                try:
                    self._capture()
                except RuntimeError as exc:  # the same step then runs eagerly: the same draws, without the speed
                    # tried again for the next model (trial) that samples at this shape, not for this one
                    self._failed_for, self.capture_error = weakref.ref(model), f"{type(exc).__name__}: {exc}"
                    warnings.warn(f"rollout.cuda_graph: capturing the decode step failed ({str(exc)[:300]}); "
                                  "this shape decodes eagerly over the same buffers", RuntimeWarning, stacklevel=2)
                finally:
                    _CAPTURE_S[model] = capture_seconds(model) + self.capture_s - before
            return self._loop(prompt_ids, prompt_mask, generator)

    def _loop(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, generator: torch.Generator | None
              ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
        self._start(prompt_ids, prompt_mask)
        if generator is None:  # the device's default generator, as the eager loop draws from
            generator = (torch.cuda.default_generators[self.device.index if self.device.index is not None
                                                       else torch.cuda.current_device()]
                         if self.device.type == "cuda" else torch.default_generator)
        self.generator.set_state(generator.get_state())
        steps = 0
        for t in range(self.N):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
            steps = t + 1
            if steps == self.N or bool(self.finished.all()):
                break
        generator.set_state(self.generator.get_state())
        logp = self.logp[:, :steps].clone() if self.logp is not None else None
        return self.out[:, :steps].clone(), self.mask[:, :steps].clone(), steps, logp


def capture_seconds(model: nn.Module) -> float:
    """Seconds spent capturing ``model``'s decode graphs so far, warm-up included (0.0 when none was)."""
    return float(_CAPTURE_S.get(model, 0.0))


#: model -> its graphs' capture seconds (weak: forgotten with the model; nothing is stored on the model itself)
_CAPTURE_S: weakref.WeakKeyDictionary[nn.Module, float] = weakref.WeakKeyDictionary()


#: this process's copies of model shapes and its samplers (least recently used first); _LOCK guards both
_SHADOWS: dict[tuple, _Shadow] = {}
_SAMPLERS: OrderedDict[tuple, GraphSampler] = OrderedDict()
_LOCK = threading.Lock()


def graph_sampler(model: nn.Module, *, batch: int, width: int, max_new_tokens: int, temperature: float,
                  top_p: float, logp_temperature: float | None, stop_ids: list[int], pad_id: int) -> GraphSampler:
    """This process's :class:`GraphSampler` for ``model``'s shape, this batch shape and these options, made
    (and on CUDA captured at its first use) when missing; at most :data:`MAX_SAMPLERS` are kept, and a
    shape's copy of the weights while one of its samplers is. Sample with ``sampler.sample(model, ...)``."""
    device = model.get_output_embeddings().weight.device
    shape = _shape_key(model)
    key = (shape, batch, width, max_new_tokens, float(temperature), float(top_p), logp_temperature,
           tuple(stop_ids), pad_id, _autocast_state(device))
    with _LOCK:
        sampler = _SAMPLERS.pop(key, None)
        if sampler is None:
            shadow = _SHADOWS.get(shape)
            if shadow is None:
                shadow = _SHADOWS[shape] = _Shadow(model)
            sampler = GraphSampler(shadow, batch=batch, width=width, max_new_tokens=max_new_tokens,
                                   temperature=temperature, top_p=top_p, logp_temperature=logp_temperature,
                                   stop_ids=stop_ids, pad_id=pad_id, capture=device.type == "cuda")
            while len(_SAMPLERS) >= MAX_SAMPLERS:
                _SAMPLERS.popitem(last=False)
            used = {id(s.shadow) for s in _SAMPLERS.values()} | {id(shadow)}
            for k in [k for k, v in _SHADOWS.items() if id(v) not in used]:
                del _SHADOWS[k]
        _SAMPLERS[key] = sampler  # most recently used last
    return sampler


def samplers_for(model: nn.Module) -> list[GraphSampler]:
    """The samplers this process keeps for ``model``'s shape (least recently used first; none for a model
    the lean decoder does not run)."""
    if fast_decoder_unsupported_reason(model) is not None:
        return []
    shape = _shape_key(model)
    with _LOCK:
        return [s for k, s in _SAMPLERS.items() if k[0] == shape]


def clear_samplers() -> None:
    """Drop every sampler and copy of weights this process keeps (their graphs and caches are freed)."""
    with _LOCK:
        _SAMPLERS.clear()
        _SHADOWS.clear()
