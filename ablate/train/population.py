"""Populations: K trials trained in one process, their heavy computations batched over stacked weights.

:func:`run_population` sets up every member (each with its own :class:`~ablate.train.setup.TrialState`:
weights, optimizer, random streams, checkpoint) and runs each member's ordinary training loop
(:func:`~ablate.train.loop.train_prepared`) in its own thread. Three calls of that loop do not run in
the member's thread but meet the other members' at a rendezvous, where the main thread computes them
for all at once (:mod:`ablate.models.stacked`):

- the trunk forward of a log-prob computation (training forward, behaviour and reference log-probs);
- the decode loop's ``prefill`` and ``step`` (rollouts and evaluations);
- the backward of the loss (one backward over the joined graphs; each member's gradient lands in its
  own parameters).

Everything else (sampling from each member's own generator, grading, rewards, advantages, losses,
gradient clipping by the member's own norm, AdamW, logging, checkpoints) runs per member in its thread,
the code of a solo trial. A member that raises (a diverging member's NonFiniteError) leaves alone; the
others go on.

Determinism: the main thread computes only when every live member waits at a rendezvous (or has
left), so which members share a computation is decided by the members' programs, never by thread
timing; a population of the same members gives the same results in every run. Requests are grouped by
what they must share: the model's :func:`~ablate.models.stacked.shape_signature`, the rows B, autograd
and autocast state. Prompts of different widths are left-padded, completions right-padded, to the
widest in the group (masked, so they change nothing but rounding).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ablate.config import TrialConfig
from ablate.models.batching import batching
from ablate.models.stacked import StackedDecoder, StackedLlama, shape_signature, stack_unsupported_reason
from ablate.train.loop import LogFn, prepare_trial, train_prepared

#: The phases of an RL step, in the order a member goes through them (see :func:`ablate.models.batching.at`).
PHASES = {"collect": 0, "update": 1, "eval": 2}


@dataclass
class Request:
    """One member's call waiting at the rendezvous.

    Attributes:
        member: the member's index; kind: ``trunk``, ``prefill``, ``step`` or ``backward``.
        key: what requests computed together must share (see :meth:`Population.groups`).
        order: where the member is: (RL step, phase, decode 0 / no-grad forward 1 / training forward
            and backward 2); the main thread computes the requests of the smallest order first, so that
            members that ran ahead wait for the others and their calls are batched together (a member
            with an extra no-grad forward in its update, e.g. the mismatch measurement, does it while
            the others wait, then all train together).
        args: the call's arguments; result / error: what the member gets back.
    """

    member: int
    kind: str
    key: tuple
    args: dict[str, Any]
    order: tuple[int, int, int] = (0, 0, 0)
    result: Any = None
    error: BaseException | None = None
    done: bool = False


def _amp_state(device: torch.device) -> tuple[bool, bool, torch.dtype | None]:
    """The calling thread's autograd and autocast state (thread-local; the main thread reproduces it)."""
    amp = torch.is_autocast_enabled(device.type)
    return torch.is_grad_enabled(), amp, torch.get_autocast_dtype(device.type) if amp else None


class _Mode:
    """Autograd and autocast as a member had them (``_amp_state``), entered in the main thread."""

    def __init__(self, device: torch.device, state: tuple[bool, bool, torch.dtype | None]) -> None:
        self.grad = torch.set_grad_enabled(state[0])
        self.amp = torch.autocast(device.type, dtype=state[2], enabled=state[1])

    def __enter__(self) -> None:
        self.grad.__enter__()
        self.amp.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.amp.__exit__(*exc)
        self.grad.__exit__(*exc)


@dataclass
class _DecodeGroup:
    """A :class:`StackedDecoder` and the members it decodes for (in its member order)."""

    decoder: StackedDecoder
    members: list[int]


class MemberDecoder:
    """A member's view of a shared decoder: ``prefill``/``step`` as :class:`~ablate.models.fast_decode.Decoder`."""

    def __init__(self, batcher: MemberBatcher, model: nn.Module, prompt_ids: torch.Tensor,
                 prompt_mask: torch.Tensor, max_new_tokens: int) -> None:
        self.batcher, self.model = batcher, model
        self.args = dict(model=model, prompt_ids=prompt_ids, prompt_mask=prompt_mask, max_new_tokens=max_new_tokens)
        self.group: _DecodeGroup | None = None

    def prefill(self) -> torch.Tensor:
        """Logits [B, V] of the first new token."""
        key = ("prefill", self.batcher.signature(self.model), tuple(self.args["prompt_ids"].shape[:1]),
               _amp_state(self.args["prompt_ids"].device)[1:])
        self.group, logits = self.batcher.call("prefill", key, dict(self.args, view=self))
        return logits

    def step(self, tokens: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B]; logits [B, V] of the next token (every row is computed)."""
        del active
        return self.batcher.call("step", ("step", id(self.group)), dict(tokens=tokens, group=self.group))


class MemberBatcher:
    """The :class:`~ablate.models.batching.Batcher` of one member thread: each call waits at the
    population's rendezvous."""

    def __init__(self, population: Population, member: int) -> None:
        self.population, self.member = population, member
        self.position = (0, 0)

    def at(self, step: int, phase: str) -> None:
        """The member's RL step and phase (``collect``, ``update``, ``eval``)."""
        self.position = (step, PHASES[phase])

    def call(self, kind: str, key: tuple, args: dict[str, Any]) -> Any:
        """Submit a request and wait for its result (raises its error)."""
        order = (*self.position, 0 if kind in ("prefill", "step") else 1 if not torch.is_grad_enabled() else 2)
        return self.population.submit(Request(self.member, kind, key, args, order))

    def signature(self, model: nn.Module) -> tuple | None:
        """The model's shape signature, or None when it cannot be stacked (then it runs solo)."""
        return self.population.signature(model)

    def trunk(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              num_prompt_tokens: int) -> torch.Tensor | None:
        """The final hidden states [B, L, H], computed with the other members' (None: not stackable)."""
        sig = self.signature(model)
        if sig is None:
            return None
        key = ("trunk", sig, input_ids.shape[0], _amp_state(input_ids.device))
        return self.call("trunk", key, dict(model=model, input_ids=input_ids, attention_mask=attention_mask,
                                            P=num_prompt_tokens))

    def decoder(self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                max_new_tokens: int) -> MemberDecoder | None:
        """A view of a decoder shared with the other members (None: not stackable)."""
        if self.signature(model) is None:
            return None
        return MemberDecoder(self, model, prompt_ids, prompt_mask, max_new_tokens)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, in one backward with the other members' pending losses."""
        self.call("backward", ("backward",), dict(loss=loss))


def _pad_to(x: torch.Tensor, left: int, right: int, value: int) -> torch.Tensor:
    """[B, L] -> [B, left + L + right], padded with ``value``."""
    return F.pad(x, (left, right), value=value) if left or right else x


@dataclass
class Population:
    """The rendezvous of K member threads and the main thread that computes for them (:meth:`serve`)."""

    members: set[int]
    pad_id: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)
    setup_lock: threading.Lock = field(default_factory=threading.Lock)
    interrupted: bool = False
    inflight: list[Request] = field(default_factory=list)
    pending: dict[int, Request] = field(default_factory=dict)
    signatures: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def signature(self, model: nn.Module) -> tuple | None:
        """:func:`shape_signature` of a stackable model (cached per module while it lives), else None."""
        if model not in self.signatures:
            self.signatures[model] = shape_signature(model) if stack_unsupported_reason(model) is None else None
        return self.signatures[model]

    def submit(self, request: Request) -> Any:
        """Called by a member thread: wait until the main thread has computed ``request``."""
        with self.cond:
            if self.interrupted:
                raise KeyboardInterrupt
            self.pending[request.member] = request
            self.cond.notify_all()
            while not request.done:
                self.cond.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def interrupt(self) -> None:
        """Ctrl-C in the main thread: every waiting and later request raises KeyboardInterrupt."""
        with self.cond:
            self.interrupted = True
            for r in [*self.pending.values(), *self.inflight]:
                if not r.done:
                    r.error, r.done = KeyboardInterrupt(), True
            self.pending.clear()
            self.cond.notify_all()

    def leave(self, member: int) -> None:
        """A member thread has finished (or failed): the rendezvous stops waiting for it."""
        with self.cond:
            self.members.discard(member)
            self.cond.notify_all()

    def serve(self) -> None:
        """The main thread's loop: whenever every live member waits, compute the requests of the
        members furthest behind (smallest :attr:`Request.order`), grouped by key; the others wait."""
        while True:
            with self.cond:
                while self.members and not self.members <= set(self.pending):
                    self.cond.wait()
                if not self.members:
                    return
                first = min(r.order for r in self.pending.values())
                requests = [self.pending.pop(m) for m in sorted(self.pending) if self.pending[m].order == first]
                self.inflight = requests
            for group in self.groups(requests):
                try:
                    self.compute(group)
                except BaseException as error:  # noqa: BLE001 - every member of the group gets it
                    for r in group:
                        r.error = error
            with self.cond:
                for r in requests:
                    r.done = True
                self.cond.notify_all()

    @staticmethod
    def groups(requests: list[Request]) -> list[list[Request]]:
        """The requests with equal keys, in member order."""
        out: dict[tuple, list[Request]] = {}
        for r in requests:
            out.setdefault(r.key, []).append(r)
        return list(out.values())

    def compute(self, group: list[Request]) -> None:
        """Compute one group of equal-keyed requests and set each request's result."""
        kind = group[0].kind
        if kind == "backward":
            torch.autograd.backward([r.args["loss"] for r in group])
        elif kind == "trunk":
            self._trunk(group)
        elif kind == "prefill":
            self._prefill(group)
        else:
            self._step(group)

    def _trunk(self, group: list[Request]) -> None:
        """Stacked trunk: pad every member's [B, P_k + T_k] to [B, P + T] (prompts left, completions right)."""
        P = max(r.args["P"] for r in group)
        T = max(r.args["input_ids"].shape[1] - r.args["P"] for r in group)
        ids, masks = [], []
        for r in group:
            left, right = P - r.args["P"], T - (r.args["input_ids"].shape[1] - r.args["P"])
            ids.append(_pad_to(r.args["input_ids"], left, right, self.pad_id))
            masks.append(_pad_to(r.args["attention_mask"], left, right, 0))
        device = ids[0].device
        with _Mode(device, group[0].key[3]):
            hidden = StackedLlama([r.args["model"] for r in group]).hidden(torch.stack(ids), torch.stack(masks))
        for k, r in enumerate(group):
            r.result = hidden[k][:, P - r.args["P"] : P - r.args["P"] + r.args["input_ids"].shape[1]]

    def _prefill(self, group: list[Request]) -> None:
        """A new :class:`StackedDecoder` over the group's prompts (left-padded to the widest)."""
        P = max(r.args["prompt_ids"].shape[1] for r in group)
        ids = torch.stack([_pad_to(r.args["prompt_ids"], P - r.args["prompt_ids"].shape[1], 0, self.pad_id)
                           for r in group])
        mask = torch.stack([_pad_to(r.args["prompt_mask"], P - r.args["prompt_mask"].shape[1], 0, 0) for r in group])
        max_new = max(r.args["max_new_tokens"] for r in group)
        with _Mode(ids.device, (False, *group[0].key[3])):
            decoder = StackedDecoder([r.args["model"] for r in group], ids, mask, max_new)
            logits = decoder.prefill()
        shared = _DecodeGroup(decoder, [r.member for r in group])
        for k, r in enumerate(group):
            r.result = (shared, logits[k])

    def _step(self, group: list[Request]) -> None:
        """One decode step of the members still decoding (the others leave the decoder first)."""
        shared: _DecodeGroup = group[0].args["group"]
        here = [r.member for r in group]
        if here != shared.members:
            keep = torch.tensor([shared.members.index(m) for m in here])
            shared.decoder.keep(keep.to(shared.decoder.key_mask.device))
            shared.members = here
        tokens = torch.stack([r.args["tokens"] for r in group])  # (K, B)
        with torch.no_grad():
            logits = shared.decoder.step(tokens)
        for k, r in enumerate(group):
            r.result = logits[k]


_MEMBER = threading.local()


def population_shape(config: TrialConfig) -> tuple:
    """What trials packed into one population by the runner share, so that their calls batch: the model
    and its precision, the device, the batch and generation shape, the update's shape, the evaluations
    and the length of training. Trials that differ elsewhere (seed, losses, rewards, learning rate ...)
    batch fully; a population of different shapes would still compute right, only less batched."""
    c = config
    return (c.model.name, c.model.dtype, c.model.attention, c.model.lm_head_dtype, c.device, c.rollout.dtype,
            c.rollout.prompts_per_step, c.rollout.group_size, c.rollout.max_new_tokens, c.algo.minibatches,
            c.algo.grad_accum, c.algo.ppo_epochs, c.algo.dynamic_sampling, c.algo.zero_variance_filter,
            c.critic.enabled, c.eval.every, c.eval.n_problems, c.train.steps, c.task.name, c.task.difficulty)


def current_member() -> tuple[Population, int] | None:
    """The population and index of this thread's member (None outside :func:`run_members`)."""
    return getattr(_MEMBER, "slot", None)


def train_member(config: TrialConfig, log: LogFn | None, workdir: Any, stop_after: int | None = None,
                 progress: bool = False) -> Any:
    """Train ``config`` as this thread's member of its population: set up (one member at a time, since
    set-ups share caches and torch's global RNG), then the ordinary loop with the batcher active."""
    slot = current_member()
    assert slot is not None, "train_member runs in a member thread of run_members"
    population, index = slot
    with population.setup_lock:
        prepared = prepare_trial(config, workdir=workdir, progress=progress)
    population.pad_id = prepared.state.policy.pad_token_id
    with batching(MemberBatcher(population, index)):
        return train_prepared(prepared, log, stop_after=stop_after)


def run_members(tasks: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run ``tasks`` (each of which trains one member through :func:`run_trial` or :func:`train_member`)
    as one population: one thread per task, the main thread computing their batched calls.

    Returns:
        Per task, what it returned, or the exception it raised (the others are unaffected). A
        KeyboardInterrupt in the main thread is delivered to every member (each records it as its own
        trial would), then raised.
    """
    population = Population(members=set(range(len(tasks))))
    outcomes: list[Any] = [None] * len(tasks)

    def member(i: int) -> None:
        _MEMBER.slot = (population, i)
        try:
            outcomes[i] = tasks[i]()
        except BaseException as error:  # noqa: BLE001 - a member fails alone
            outcomes[i] = error
        finally:
            _MEMBER.slot = None
            population.leave(i)

    threads = [threading.Thread(target=member, args=(i,), name=f"member-{i}", daemon=True) for i in range(len(tasks))]
    for t in threads:
        t.start()
    try:
        population.serve()
    except KeyboardInterrupt:
        population.interrupt()
        for t in threads:
            t.join()
        raise
    for t in threads:
        t.join()
    return outcomes


def run_population(
    configs: Sequence[TrialConfig],
    logs: Sequence[LogFn | None],
    workdirs: Sequence[Any],
    *,
    stop_after: int | None = None,
    progress: bool = False,
) -> list[Any]:
    """Train the trials ``configs`` as one population (see the module docstring).

    Args:
        configs: the members' configurations (one model shape for the batching to apply; a member
            whose model cannot be stacked computes solo within the population).
        logs: each member's ``log(metrics, step)`` (or None); workdirs: each member's checkpoint directory.
        stop_after: stop each member after this many steps of this call (tests of resumption).
        progress: a progress bar per member (its set-up and its steps).

    Returns:
        Per member, its :class:`~ablate.train.loop.TrialResult`, or the exception it failed with
        (set up or trained); the others are unaffected.
    """
    def task(i: int) -> Callable[[], Any]:
        return lambda: train_member(configs[i], logs[i], workdirs[i], stop_after, progress)

    return run_members([task(i) for i in range(len(configs))])
