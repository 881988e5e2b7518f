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

Each reaches the rendezvous as a :class:`Request` carrying one call of its own type (:class:`TrunkCall`,
:class:`PrefillCall`, :class:`StepCall`, :class:`BackwardCall`: frozen dataclasses, fields named for what
they carry), which the main thread dispatches on. A member's thread is a :class:`MemberThread` (it knows
its population and index: :func:`current_member`); while it trains, its model code finds the member's
:class:`MemberBatcher` through :func:`ablate.models.batching.active_batcher` (the one thread-local).

Everything else (sampling from each member's own generator, grading, rewards, advantages, losses,
gradient clipping by the member's own norm, AdamW, logging, checkpoints) runs per member in its thread,
the code of a solo trial. A member that raises (a diverging member's NonFiniteError) leaves alone; the
others go on.

Determinism: the main thread computes only when every live member waits at a rendezvous (or has
left), so which members share a computation is decided by the members' programs, never by thread
timing; a population of the same members gives the same results in every run. Requests are grouped by
what they must share: the model's :func:`~ablate.models.fast_decode.shape_signature`, the rows B, autograd
and autocast state. Prompts of different widths are left-padded, completions right-padded, to the
widest in the group (masked, so they change nothing but rounding).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from ablate.config import TrialConfig
from ablate.models.batching import batching
from ablate.models.fast_decode import shape_signature
from ablate.models.stacked import StackedDecoder, StackedLlama, stack_unsupported_reason
from ablate.train.loop import LogFn, TrialResult, prepare_trial, train_prepared

#: The phases of an RL step, in the order a member goes through them (see :func:`ablate.models.batching.at`).
PHASES = {"collect": 0, "update": 1, "eval": 2}

#: What a call gives back to the member that made it.
ResultT = TypeVar("ResultT")
#: What a member's task returns (:func:`run_members`).
OutcomeT = TypeVar("OutcomeT")

#: Autograd enabled, autocast enabled, autocast dtype (None when autocast is off): a thread's mode.
AmpState = tuple[bool, bool, torch.dtype | None]


@dataclass
class DecodeGroup:
    """A :class:`StackedDecoder` and the members it decodes for (in its member order)."""

    decoder: StackedDecoder
    members: list[int]


class Call(Generic[ResultT]):
    """A member's call that the main thread computes together with the other members' equal ones.

    Attributes:
        kind: the call's name (``trunk``, ``prefill``, ``step``, ``backward``).
        key: what calls computed together must share (calls of equal keys are one group); it begins
            with the kind.
    """

    kind: ClassVar[str]

    @property
    def key(self) -> tuple:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class TrunkCall(Call[torch.Tensor]):
    """The trunk forward of a log-prob computation; gives the final hidden states [B, L, H].

    Attributes:
        model: the member's policy (or reference); input_ids, attention_mask: [B, L], prompt then completion.
        prompt_tokens: P, the prompt's width in ``input_ids`` (the completion is the remaining L - P).
        signature: the model's :func:`shape_signature`; mode: the member's autograd and autocast state.
    """

    kind: ClassVar[str] = "trunk"
    model: nn.Module
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_tokens: int
    signature: tuple
    mode: AmpState

    @property
    def key(self) -> tuple:
        return (self.kind, self.signature, self.input_ids.shape[0], self.mode)


@dataclass(frozen=True, eq=False)
class PrefillCall(Call[tuple[DecodeGroup, torch.Tensor]]):
    """The start of a decode: gives the decoder shared by the group and the logits [B, V] of the first
    new token.

    Attributes:
        model: the member's policy; prompt_ids, prompt_mask: [B, P] left-padded prompts.
        max_new_tokens: the most decode steps the member will take.
        signature: the model's :func:`shape_signature`; autocast: the member's autocast (enabled, dtype)
            (a decode never records autograd).
    """

    kind: ClassVar[str] = "prefill"
    model: nn.Module
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    max_new_tokens: int
    signature: tuple
    autocast: tuple[bool, torch.dtype | None]

    @property
    def key(self) -> tuple:
        return (self.kind, self.signature, self.prompt_ids.shape[0], self.autocast)


@dataclass(frozen=True, eq=False)
class StepCall(Call[torch.Tensor]):
    """One decode step in a shared decoder: gives the logits [B, V] of the next token.

    Attributes:
        decode: the decoder the member's prefill joined; tokens: [B] the tokens sampled last.
    """

    kind: ClassVar[str] = "step"
    decode: DecodeGroup
    tokens: torch.Tensor

    @property
    def key(self) -> tuple:
        return (self.kind, id(self.decode))


@dataclass(frozen=True, eq=False)
class BackwardCall(Call[None]):
    """``loss.backward()`` of a member's loss (a scalar tensor), in one backward with the others'."""

    kind: ClassVar[str] = "backward"
    loss: torch.Tensor

    @property
    def key(self) -> tuple:
        return (self.kind,)


@dataclass
class Request(Generic[ResultT]):
    """One member's call waiting at the rendezvous.

    Attributes:
        member: the member's index; call: what it asks for (:class:`TrunkCall`, :class:`PrefillCall`,
            :class:`StepCall` or :class:`BackwardCall`).
        order: where the member is: (RL step, phase, decode 0 / no-grad forward 1 / training forward
            and backward 2); the main thread computes the requests of the smallest order first, so that
            members that ran ahead wait for the others and their calls are batched together (a member
            with an extra no-grad forward in its update, e.g. the mismatch measurement, does it while
            the others wait, then all train together).
        result / error: what the member gets back.
    """

    member: int
    call: Call[ResultT]
    order: tuple[int, int, int] = (0, 0, 0)
    result: ResultT | None = None
    error: BaseException | None = None
    done: bool = False

    @property
    def kind(self) -> str:
        """The call's name (``trunk``, ``prefill``, ``step``, ``backward``)."""
        return self.call.kind

    @property
    def key(self) -> tuple:
        """What requests computed together must share (see :meth:`Population.groups`)."""
        return self.call.key


def _amp_state(device: torch.device) -> AmpState:
    """The calling thread's autograd and autocast state (thread-local; the main thread reproduces it)."""
    amp = torch.is_autocast_enabled(device.type)
    return torch.is_grad_enabled(), amp, torch.get_autocast_dtype(device.type) if amp else None


class _Mode:
    """Autograd and autocast as a member had them (``_amp_state``), entered in the main thread."""

    def __init__(self, device: torch.device, state: AmpState) -> None:
        self.grad = torch.set_grad_enabled(state[0])
        self.amp = torch.autocast(device.type, dtype=state[2], enabled=state[1])

    def __enter__(self) -> None:
        self.grad.__enter__()
        self.amp.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.amp.__exit__(*exc)
        self.grad.__exit__(*exc)


class MemberDecoder:
    """A member's view of a shared decoder: ``prefill``/``step`` as :class:`~ablate.models.fast_decode.Decoder`."""

    def __init__(self, batcher: MemberBatcher, model: nn.Module, prompt_ids: torch.Tensor,
                 prompt_mask: torch.Tensor, max_new_tokens: int) -> None:
        self.batcher, self.model = batcher, model
        self.prompt_ids, self.prompt_mask, self.max_new_tokens = prompt_ids, prompt_mask, max_new_tokens
        self.group: DecodeGroup | None = None

    def prefill(self) -> torch.Tensor:
        """Logits [B, V] of the first new token."""
        signature = self.batcher.signature(self.model)
        assert signature is not None, "a MemberDecoder is made for stackable models only"
        self.group, logits = self.batcher.call(PrefillCall(
            self.model, self.prompt_ids, self.prompt_mask, self.max_new_tokens, signature,
            _amp_state(self.prompt_ids.device)[1:],
        ))
        return logits

    def step(self, tokens: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B]; logits [B, V] of the next token (every row is computed)."""
        del active
        assert self.group is not None, "prefill comes first"
        return self.batcher.call(StepCall(self.group, tokens))


class MemberBatcher:
    """The :class:`~ablate.models.batching.Batcher` of one member thread: each call waits at the
    population's rendezvous."""

    def __init__(self, population: Population, member: int) -> None:
        self.population, self.member = population, member
        self.position = (0, 0)

    def at(self, step: int, phase: str) -> None:
        """The member's RL step and phase (``collect``, ``update``, ``eval``)."""
        self.position = (step, PHASES[phase])

    def call(self, call: Call[ResultT]) -> ResultT:
        """Submit ``call`` and wait for its result (raises its error)."""
        decode = isinstance(call, (PrefillCall, StepCall))
        order = (*self.position, 0 if decode else 1 if not torch.is_grad_enabled() else 2)
        return self.population.submit(Request(self.member, call, order))

    def signature(self, model: nn.Module) -> tuple | None:
        """The model's shape signature, or None when it cannot be stacked (then it runs solo)."""
        return self.population.signature(model)

    def trunk(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              num_prompt_tokens: int) -> torch.Tensor | None:
        """The final hidden states [B, L, H], computed with the other members' (None: not stackable)."""
        sig = self.signature(model)
        if sig is None:
            return None
        return self.call(TrunkCall(model, input_ids, attention_mask, num_prompt_tokens, sig,
                                   _amp_state(input_ids.device)))

    def decoder(self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                max_new_tokens: int) -> MemberDecoder | None:
        """A view of a decoder shared with the other members (None: not stackable)."""
        if self.signature(model) is None:
            return None
        return MemberDecoder(self, model, prompt_ids, prompt_mask, max_new_tokens)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, in one backward with the other members' pending losses."""
        self.call(BackwardCall(loss))


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

    def submit(self, request: Request[ResultT]) -> ResultT:
        """Called by a member thread: wait until the main thread has computed ``request``; its result."""
        with self.cond:
            if self.interrupted:
                raise KeyboardInterrupt
            self.pending[request.member] = request
            self.cond.notify_all()
            while not request.done:
                self.cond.wait()
        if request.error is not None:
            raise request.error
        return cast(ResultT, request.result)

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
        """Compute one group of equal-keyed requests (their calls of one type) and set each request's result."""
        calls = [r.call for r in group]
        match calls[0]:
            case BackwardCall():
                torch.autograd.backward([c.loss for c in calls])
                results: list[object] = [None] * len(calls)
            case TrunkCall():
                results = self._trunk(calls)
            case PrefillCall():
                results = self._prefill(calls, [r.member for r in group])
            case StepCall():
                results = self._step(calls, [r.member for r in group])
            case call:
                raise TypeError(f"a population computes no {type(call).__name__}")
        for r, result in zip(group, results):
            r.result = result

    def _trunk(self, calls: list[TrunkCall]) -> list[torch.Tensor]:
        """Stacked trunk: pad every member's [B, P_k + T_k] to [B, P + T] (prompts left, completions right);
        per member, its hidden states [B, P_k + T_k, H]."""
        P = max(c.prompt_tokens for c in calls)
        T = max(c.input_ids.shape[1] - c.prompt_tokens for c in calls)
        ids, masks = [], []
        for c in calls:
            left, right = P - c.prompt_tokens, T - (c.input_ids.shape[1] - c.prompt_tokens)
            ids.append(_pad_to(c.input_ids, left, right, self.pad_id))
            masks.append(_pad_to(c.attention_mask, left, right, 0))
        device = ids[0].device
        with _Mode(device, calls[0].mode):
            hidden = StackedLlama([c.model for c in calls]).hidden(torch.stack(ids), torch.stack(masks))
        return [hidden[k][:, P - c.prompt_tokens : P - c.prompt_tokens + c.input_ids.shape[1]]
                for k, c in enumerate(calls)]

    def _prefill(self, calls: list[PrefillCall], members: list[int]) -> list[tuple[DecodeGroup, torch.Tensor]]:
        """A new :class:`StackedDecoder` over the group's prompts (left-padded to the widest); per member,
        the shared decoder and its logits [B, V]."""
        P = max(c.prompt_ids.shape[1] for c in calls)
        ids = torch.stack([_pad_to(c.prompt_ids, P - c.prompt_ids.shape[1], 0, self.pad_id) for c in calls])
        mask = torch.stack([_pad_to(c.prompt_mask, P - c.prompt_mask.shape[1], 0, 0) for c in calls])
        max_new = max(c.max_new_tokens for c in calls)
        with _Mode(ids.device, (False, *calls[0].autocast)):
            decoder = StackedDecoder([c.model for c in calls], ids, mask, max_new)
            logits = decoder.prefill()
        shared = DecodeGroup(decoder, members)
        return [(shared, logits[k]) for k in range(len(calls))]

    def _step(self, calls: list[StepCall], members: list[int]) -> list[torch.Tensor]:
        """One decode step of the members still decoding (the others leave the decoder first); per member,
        its logits [B, V]."""
        shared = calls[0].decode
        if members != shared.members:
            keep = torch.tensor([shared.members.index(m) for m in members])
            shared.decoder.keep(keep.to(shared.decoder.key_mask.device))
            shared.members = members
        tokens = torch.stack([c.tokens for c in calls])  # (K, B)
        with torch.no_grad():
            logits = shared.decoder.step(tokens)
        return [logits[k] for k in range(len(calls))]


class MemberThread(threading.Thread):
    """The thread of one member of a population, which knows its population and its index in it
    (:func:`current_member`)."""

    def __init__(self, population: Population, member: int, target: Callable[[int], None]) -> None:
        super().__init__(target=target, args=(member,), name=f"member-{member}", daemon=True)
        self.population, self.member = population, member


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
    thread = threading.current_thread()
    return (thread.population, thread.member) if isinstance(thread, MemberThread) else None


def train_member(config: TrialConfig, log: LogFn | None, workdir: str | os.PathLike[str] | None,
                 stop_after: int | None = None, progress: bool = False) -> TrialResult:
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


def run_members(tasks: Sequence[Callable[[], OutcomeT]]) -> list[OutcomeT | BaseException]:
    """Run ``tasks`` (each of which trains one member through :func:`run_trial` or :func:`train_member`)
    as one population: one thread per task, the main thread computing their batched calls.

    Returns:
        Per task, what it returned, or the exception it raised (the others are unaffected). A
        KeyboardInterrupt in the main thread is delivered to every member (each records it as its own
        trial would), then raised.
    """
    population = Population(members=set(range(len(tasks))))
    outcomes: list[OutcomeT | BaseException | None] = [None] * len(tasks)

    def member(i: int) -> None:
        try:
            outcomes[i] = tasks[i]()
        except BaseException as error:  # noqa: BLE001 - a member fails alone
            outcomes[i] = error
        finally:
            population.leave(i)

    threads = [MemberThread(population, i, member) for i in range(len(tasks))]
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
    return cast("list[OutcomeT | BaseException]", outcomes)


def run_population(
    configs: Sequence[TrialConfig],
    logs: Sequence[LogFn | None],
    workdirs: Sequence[str | os.PathLike[str] | None],
    *,
    stop_after: int | None = None,
    progress: bool = False,
) -> list[TrialResult | BaseException]:
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
    def task(i: int) -> Callable[[], TrialResult]:
        return lambda: train_member(configs[i], logs[i], workdirs[i], stop_after, progress)

    return run_members([task(i) for i in range(len(configs))])
