"""Experimental designs: which combinations of factor levels (arms) a study runs.

A design sees the factors as an ordered mapping ``factor name -> level names`` (in the order of the
study file) and an optional baseline (``factor name -> level name``), and returns the arms as
mappings ``factor name -> level name``. Designs know nothing about configurations or seeds: the
study (:mod:`ablate.study`) turns arms into trials, applies the ``exclude:`` entries to every
design, and pairs the seeds.

Built-in designs, registered in :data:`DESIGNS` (``design:`` in a study file names one, with its
options when it is a mapping, e.g. ``design: {name: fractional, resolution: 4}``):

- ``full``: the full factorial, every combination of levels.
- ``one_at_a_time``: the baseline arm, then every other level of each factor in turn with all other
  factors at their baseline level (needs ``baseline:``). Cheap, but blind to interactions.
- ``fractional``: a two-level fractional factorial 2^(k-p) of a given resolution (III, IV or V) for
  factors that have exactly two levels each (the first level listed is coded -1, the second +1).
  The smallest design of that resolution is chosen, with minimum-aberration generators found by an
  exhaustive search (Box & Hunter 1961; Fries & Hunter 1980 for minimum aberration). Its
  :class:`AliasStructure` says which effects cannot be told apart; ``ablate show`` prints it.
- ``random``: ``n`` distinct arms drawn with a seed, balanced like a Latin hypercube: each level of
  each factor appears as equally often as possible (counts differ by at most one whenever the
  exclusions allow it).

A plugin adds a design by subclassing :class:`Design` as a frozen dataclass whose fields are its
options, and registering it::

    from dataclasses import dataclass
    from ablate.study.designs import DESIGNS, Design

    @DESIGNS.register("corners")
    @dataclass(frozen=True)
    class Corners(Design):
        \"\"\"The all-first-levels arm and the all-last-levels arm.\"\"\"

        def arms(self, factors, baseline, *, allowed=None):
            return [{f: lv[0] for f, lv in factors.items()}, {f: lv[-1] for f, lv in factors.items()}]
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import random as _random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ablate.registry import Registry, nearest

#: Factor name -> level names, in study-file order.
Factors = Mapping[str, Sequence[str]]
#: One arm: factor name -> level name.
ArmLevels = dict[str, str]
#: A predicate saying whether an arm may be run (False for excluded arms).
Allowed = Callable[[Mapping[str, str]], bool]


@dataclass(frozen=True)
class DesignProblem:
    """A problem with a design's options or with the factors it is given.

    Attributes:
        option: the option at fault (its line is reported), or None for the design as a whole.
        message: what is wrong and how to fix it.
    """

    option: str | None
    message: str


@dataclass(frozen=True)
class Design(abc.ABC):
    """A rule that turns factors and levels into arms.

    Subclasses are frozen dataclasses; their fields are the design's options (keyword arguments
    from the study file's ``design:`` mapping). The study calls, in this order:

    1. :meth:`from_options` at validation: unknown or missing options are reported;
    2. :meth:`check` at validation: option values and factors the design cannot handle;
    3. :meth:`arms` once everything is valid;
    4. :meth:`aliasing`, for ``ablate show``.
    """

    #: True if the design cannot work without a ``baseline:``.
    needs_baseline: ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> tuple[Design | None, list[DesignProblem]]:
        """Build the design from its options, or report every unknown and missing option."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        problems = []
        for key in options:
            if key not in fields:
                msg = f"unknown option {key!r}; allowed: {', '.join(fields) or '(none)'}"
                guess = nearest(str(key), list(fields))
                if guess is not None:
                    msg += f"; did you mean {guess!r}?"
                problems.append(DesignProblem(str(key), msg))
        for name, f in fields.items():
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and name not in options:
                problems.append(DesignProblem(None, f"option {name!r} is required"))
        if problems:
            return None, problems
        return cls(**dict(options)), []

    def check(self, factors: Factors, baseline: Mapping[str, str] | None) -> list[DesignProblem]:
        """Problems with the option values or with the factors (none by default)."""
        return []

    @abc.abstractmethod
    def arms(
        self, factors: Factors, baseline: Mapping[str, str] | None, *, allowed: Allowed | None = None
    ) -> list[ArmLevels]:
        """The arms, in a deterministic order.

        Args:
            factors: factor name -> level names, in file order.
            baseline: the control arm, when the study has one.
            allowed: False for arms the study excludes. A design may use it to propose other arms
                instead (``random`` does); the study drops excluded arms afterwards in any case.
        """

    def aliasing(self, factors: Factors) -> AliasStructure | None:
        """Which effects the design confounds, or None when it estimates every effect."""
        return None


#: Every design, by name; plugins add their own with ``@DESIGNS.register("name")``.
DESIGNS: Registry[type[Design]] = Registry("design")


def full_factorial(factors: Factors) -> list[ArmLevels]:
    """Every combination of levels; the last factor varies fastest."""
    names = list(factors)
    return [dict(zip(names, combo)) for combo in itertools.product(*(factors[f] for f in names))]


@DESIGNS.register("full")
@dataclass(frozen=True)
class FullFactorial(Design):
    """Every combination of levels (prod of the level counts arms); estimates all interactions."""

    def arms(
        self, factors: Factors, baseline: Mapping[str, str] | None, *, allowed: Allowed | None = None
    ) -> list[ArmLevels]:
        """Every combination of levels, the last factor varying fastest."""
        return full_factorial(factors)


@DESIGNS.register("one_at_a_time")
@dataclass(frozen=True)
class OneAtATime(Design):
    """The baseline arm, then each non-baseline level of each factor with the others at baseline.

    1 + sum(levels - 1) arms. Each arm differs from the baseline in one factor only, so its
    difference to the baseline is that level's effect *at the baseline* of the other factors.
    """

    needs_baseline: ClassVar[bool] = True

    def check(self, factors: Factors, baseline: Mapping[str, str] | None) -> list[DesignProblem]:
        """A baseline is required."""
        if baseline is None:
            return [DesignProblem(None, "one_at_a_time needs a 'baseline:' that gives a level of every factor")]
        return []

    def arms(
        self, factors: Factors, baseline: Mapping[str, str] | None, *, allowed: Allowed | None = None
    ) -> list[ArmLevels]:
        """Baseline first, then factors in file order, levels in file order."""
        if baseline is None:
            raise ValueError("one_at_a_time needs a baseline")
        out: list[ArmLevels] = [dict(baseline)]
        for name, levels in factors.items():
            for level in levels:
                if level != baseline[name]:
                    out.append({**baseline, name: level})
        return out


# --------------------------------------------------------------------------- fractional factorials

_ROMAN = {"III": 3, "IV": 4, "V": 5}
_ROMAN_OF = {v: k for k, v in _ROMAN.items()}


def _popcount(x: int) -> int:
    return bin(x).count("1")


@dataclass(frozen=True)
class AliasStructure:
    """The confounding of a two-level fractional factorial 2^(k-p).

    Effects are sets of factor names: ``{"a"}`` is a main effect, ``{"a", "b"}`` a two-factor
    interaction (2FI). Two effects are aliased when their product (symmetric difference) is a word
    of the defining relation: the design estimates only their sum.

    Attributes:
        factors: the factor names, in file order.
        runs: number of arms, 2^(k-p).
        resolution: length of the shortest word of the defining relation, or None for a full
            factorial (nothing aliased).
        generators: (generated factor, the base factors whose product it is), e.g. ``("d", ("a",
            "b", "c"))`` for D = ABC.
        defining_relation: every word w with I = w (all 2^p - 1 products of the generator words).
    """

    factors: tuple[str, ...]
    runs: int
    resolution: int | None
    generators: tuple[tuple[str, tuple[str, ...]], ...]
    defining_relation: tuple[frozenset[str], ...]

    def aliases(self, effect: Iterable[str]) -> list[frozenset[str]]:
        """The effects aliased with ``effect`` (itself excluded), shortest first, then file order."""
        e = frozenset(effect)
        unknown = e - set(self.factors)
        if unknown:
            raise KeyError(f"unknown factors {sorted(unknown)}")
        return sorted((e ^ w for w in self.defining_relation), key=self._order_key)

    def _order_key(self, effect: frozenset[str]) -> tuple[int, list[int]]:
        return len(effect), sorted(self.factors.index(f) for f in effect)

    def name(self, effect: Iterable[str]) -> str:
        """``a:b`` for the interaction of a and b (factors in file order); ``I`` for the identity."""
        e = frozenset(effect)
        return ":".join(f for f in self.factors if f in e) or "I"

    def chains(self, max_order: int = 2, show_order: int = 3) -> list[list[frozenset[str]]]:
        """Alias chains of every effect of order <= ``max_order``, each listing the effect and its
        aliases of order <= ``show_order``; chains already listed (e.g. c:d after a:b = c:d) are
        not repeated, nor are effects with no alias of order <= ``show_order``."""
        out: list[list[frozenset[str]]] = []
        seen: set[frozenset[str]] = set()
        for order in range(1, max_order + 1):
            for combo in itertools.combinations(self.factors, order):
                e = frozenset(combo)
                if e in seen:
                    continue
                chain = [e] + [a for a in self.aliases(e) if len(a) <= show_order]
                seen.update(chain)
                if len(chain) > 1:
                    out.append(chain)
        return out

    def lines(self, max_order: int = 2, show_order: int = 3) -> list[str]:
        """Human-readable description: design size, generators, defining relation, alias chains."""
        k = len(self.factors)
        if self.resolution is None:
            return [f"full factorial 2^{k} = {self.runs} runs: no effect is aliased"]
        p = len(self.generators)
        res = _ROMAN_OF.get(self.resolution, str(self.resolution))
        out = [f"2^({k}-{p}) fractional factorial, resolution {res}: {self.runs} of {2**k} runs"]
        out.append("generators: " + ", ".join(f"{g} = {self.name(base)}" for g, base in self.generators))
        out.append("defining relation: I = " + " = ".join(self.name(w) for w in self.defining_relation))
        out.append(f"aliases (effects up to order {max_order}, aliases up to order {show_order}):")
        chains = self.chains(max_order, show_order)
        out.extend("  " + " = ".join(self.name(e) for e in chain) for chain in chains)
        clear = [
            self.name(e)
            for order in range(1, max_order + 1)
            for e in map(frozenset, itertools.combinations(self.factors, order))
            if not any(e in chain for chain in chains)
        ]
        if clear:
            out.append(f"  clear of effects up to order {show_order}: " + ", ".join(clear))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for ``ablate show --json``)."""
        return {
            "factors": list(self.factors),
            "runs": self.runs,
            "resolution": self.resolution,
            "generators": {g: list(base) for g, base in self.generators},
            "defining_relation": [self.name(w) for w in self.defining_relation],
            "aliases": [[self.name(e) for e in chain] for chain in self.chains()],
        }


def _group(words: Sequence[int]) -> list[int]:
    """All non-identity products (XORs) of the generator words."""
    out: list[int] = []
    for r in range(1, len(words) + 1):
        for combo in itertools.combinations(words, r):
            x = 0
            for w in combo:
                x ^= w
            out.append(x)
    return out


def _wlp(group: Iterable[int], k: int) -> tuple[int, ...]:
    """Word length pattern (A_1, ..., A_k): number of words of each length."""
    counts = Counter(_popcount(w) for w in group)
    return tuple(counts.get(i, 0) for i in range(1, k + 1))


def fractional_generators(k: int, resolution: int, max_nodes: int = 200_000) -> tuple[int, list[int]]:
    """The smallest two-level design for ``k`` factors with at least the given resolution.

    Factors are bits 0..k-1; the first ``m`` are the base factors of a full 2^m factorial, and each
    of the other k-m factors is the product of a subset (a column, as a bitmask over the base
    factors) of at least two base factors. The smallest ``m`` for which some choice of columns gives
    every word of the defining relation at least ``resolution`` letters is used; among those
    choices the one of minimum aberration (lexicographically smallest word length pattern) is kept,
    searched exhaustively with pruning (at most ``max_nodes`` search nodes per ``m``).

    Returns:
        (m, columns): the number of base factors and, for factors m..k-1, their columns.
    """
    if k < 1:
        raise ValueError("need at least one factor")
    for m in range(1, k + 1):
        if m == k:
            return m, []
        columns = _search_columns(k, m, resolution, max_nodes)
        if columns is not None:
            return m, columns
    raise AssertionError("unreachable: m = k is the full factorial")


def _search_columns(k: int, m: int, resolution: int, max_nodes: int) -> list[int] | None:
    """Minimum-aberration columns for the k - m generated factors of a 2^m base, or None."""
    p = k - m
    candidates = sorted(
        (c for c in range(1, 1 << m) if _popcount(c) >= max(2, resolution - 1)),
        key=lambda c: (-_popcount(c), c),
    )
    if len(candidates) < p:
        return None
    best: tuple[tuple[int, ...], list[int]] | None = None
    nodes = 0

    def search(start: int, chosen: list[int], group: list[int]) -> None:
        nonlocal best, nodes
        j = len(chosen)
        if j == p:
            words = [c | (1 << (m + i)) for i, c in enumerate(chosen)]
            wlp = _wlp(_group(words), k)
            if best is None or wlp < best[0]:
                best = (wlp, list(chosen))
            return
        for idx in range(start, len(candidates)):
            if nodes >= max_nodes:
                return
            nodes += 1
            word = candidates[idx] | (1 << (m + j))
            new = [word] + [word ^ g for g in group]
            if all(_popcount(w) >= resolution for w in new):
                search(idx + 1, chosen + [candidates[idx]], group + new)

    search(0, [], [])
    return None if best is None else best[1]


def fractional_alias_structure(names: Sequence[str], resolution: int) -> AliasStructure:
    """The :class:`AliasStructure` of the design :func:`fractional_generators` picks for ``names``."""
    k = len(names)
    m, columns = fractional_generators(k, resolution)
    words = [c | (1 << (m + i)) for i, c in enumerate(columns)]
    group = sorted(_group(words), key=lambda w: (_popcount(w), w))

    def letters(mask: int) -> frozenset[str]:
        return frozenset(names[i] for i in range(k) if mask >> i & 1)

    gens = tuple(
        (names[m + i], tuple(names[b] for b in range(m) if c >> b & 1)) for i, c in enumerate(columns)
    )
    res = min((_popcount(w) for w in group), default=None)
    return AliasStructure(
        factors=tuple(names),
        runs=2**m,
        resolution=res,
        generators=gens,
        defining_relation=tuple(letters(w) for w in group),
    )


def _parse_resolution(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value in _ROMAN_OF:
        return value
    if isinstance(value, str) and value.upper() in _ROMAN:
        return _ROMAN[value.upper()]
    return None


@DESIGNS.register("fractional")
@dataclass(frozen=True)
class Fractional(Design):
    """Two-level fractional factorial 2^(k-p) of a given resolution.

    Options:
        resolution: 3, 4 or 5 (or "III", "IV", "V"); default 4. Resolution III: main effects are
            clear of each other but aliased with two-factor interactions (2FIs). IV: main effects
            are clear of 2FIs, 2FIs are aliased with each other. V: main effects and 2FIs are clear
            of each other (aliased only with interactions of three or more factors).

    Every factor must have exactly two levels. The first ``m`` factors form a full 2^m factorial
    (the last of them varying fastest); each other factor's level is the product of the codes of
    its generator (first level = -1, second = +1).
    """

    resolution: Any = 4

    def check(self, factors: Factors, baseline: Mapping[str, str] | None) -> list[DesignProblem]:
        """Resolution must be III/IV/V; every factor needs exactly two levels."""
        problems = []
        if _parse_resolution(self.resolution) is None:
            problems.append(
                DesignProblem(
                    "resolution", f"must be 3, 4 or 5 (or 'III', 'IV', 'V'), got {self.resolution!r}"
                )
            )
        for name, levels in factors.items():
            if len(levels) != 2:
                problems.append(
                    DesignProblem(
                        None,
                        f"fractional needs exactly 2 levels per factor; factor {name!r} has "
                        f"{len(levels)} ({', '.join(levels)}); use design 'full' or 'random', or split it",
                    )
                )
        return problems

    def aliasing(self, factors: Factors) -> AliasStructure:
        """The alias structure of the chosen fraction."""
        res = _parse_resolution(self.resolution)
        if res is None:
            raise ValueError(f"bad resolution {self.resolution!r}")
        return fractional_alias_structure(list(factors), res)

    def arms(
        self, factors: Factors, baseline: Mapping[str, str] | None, *, allowed: Allowed | None = None
    ) -> list[ArmLevels]:
        """The 2^(k-p) runs; base factors in full-factorial order (last base factor fastest)."""
        names = list(factors)
        structure = self.aliasing(factors)
        m = len(names) - len(structure.generators)
        out: list[ArmLevels] = []
        for codes in itertools.product((-1, 1), repeat=m):
            code = dict(zip(names[:m], codes))
            for g, base in structure.generators:
                prod = 1
                for b in base:
                    prod *= code[b]
                code[g] = prod
            out.append({f: factors[f][0 if code[f] < 0 else 1] for f in names})
        return out


# --------------------------------------------------------------------------- random balanced subset


def _balanced_column(n_levels: int, n: int, rng: _random.Random) -> list[int]:
    """A shuffled column of ``n`` level indices, each level n // L or n // L + 1 times."""
    q, r = divmod(n, n_levels)
    extra = set(rng.sample(range(n_levels), r))
    col = [lv for lv in range(n_levels) for _ in range(q + (lv in extra))]
    rng.shuffle(col)
    return col


def balanced_random_rows(
    sizes: Sequence[int],
    n: int,
    seed: int,
    allowed: Callable[[tuple[int, ...]], bool] | None = None,
    max_steps: int = 10_000,
    restarts: int = 2,
) -> list[tuple[int, ...]] | None:
    """``n`` distinct allowed rows of level indices, each column balanced (Latin-hypercube-like).

    Each column holds every level n // L or n // L + 1 times; rows are made distinct and allowed
    by swapping entries within a column (which keeps the balance) until no row is a duplicate or
    disallowed. Returns None if that fails within the step budget (e.g. exclusions make exact
    balance impossible). Deterministic for a given seed.
    """
    rng = _random.Random(seed)
    cache: dict[tuple[int, ...], bool] = {}

    def ok(row: tuple[int, ...]) -> bool:
        if row not in cache:
            cache[row] = True if allowed is None else bool(allowed(row))
        return cache[row]

    k = len(sizes)
    for _ in range(restarts):
        cols = [_balanced_column(L, n, rng) for L in sizes]
        rows = [tuple(c[i] for c in cols) for i in range(n)]
        counts = Counter(rows)

        for _step in range(max_steps):
            bad_rows = [i for i in range(n) if counts[rows[i]] > 1 or not ok(rows[i])]
            if not bad_rows:
                return rows
            i = rng.choice(bad_rows)
            j = rng.randrange(n)
            f = rng.randrange(k)
            if i == j or rows[i][f] == rows[j][f]:
                continue
            old_i, old_j = rows[i], rows[j]
            new_i = old_i[:f] + (old_j[f],) + old_i[f + 1 :]
            new_j = old_j[:f] + (old_i[f],) + old_j[f + 1 :]
            before = len(bad_rows)
            for r in (old_i, old_j):
                counts[r] -= 1
            for r in (new_i, new_j):
                counts[r] += 1
            rows[i], rows[j] = new_i, new_j
            after = sum(counts[r] > 1 or not ok(r) for r in rows)
            if after > before and rng.random() >= 0.05:  # mostly downhill; undo
                for r in (new_i, new_j):
                    counts[r] -= 1
                for r in (old_i, old_j):
                    counts[r] += 1
                rows[i], rows[j] = old_i, old_j
        if all(counts[r] == 1 and ok(r) for r in rows):
            return rows
    return None


def _imbalance(rows: Iterable[tuple[int, ...]], sizes: Sequence[int]) -> int:
    """Sum over factors of (max level count - min level count)."""
    rows = list(rows)
    total = 0
    for f, L in enumerate(sizes):
        c = Counter(r[f] for r in rows)
        counts = [c.get(lv, 0) for lv in range(L)]
        total += max(counts) - min(counts)
    return total


def _best_effort_rows(
    candidates: list[tuple[int, ...]], sizes: Sequence[int], n: int, seed: int
) -> list[tuple[int, ...]]:
    """``n`` distinct rows from ``candidates``, chosen greedily to balance level counts, then improved
    by single swaps with unchosen candidates while the imbalance drops."""
    rng = _random.Random(seed)
    pool = list(candidates)
    rng.shuffle(pool)
    counts = [Counter() for _ in sizes]
    chosen: list[tuple[int, ...]] = []
    for _ in range(n):
        best = min(pool, key=lambda r: sum(counts[f][r[f]] for f in range(len(sizes))))
        pool.remove(best)
        chosen.append(best)
        for f in range(len(sizes)):
            counts[f][best[f]] += 1
    improved = True
    while improved:
        improved = False
        current = _imbalance(chosen, sizes)
        for i in range(len(chosen)):
            for j in range(len(pool)):
                trial = chosen[:i] + [pool[j]] + chosen[i + 1 :]
                if _imbalance(trial, sizes) < current:
                    chosen[i], pool[j] = pool[j], chosen[i]
                    improved = True
                    break
            if improved:
                break
    return chosen


#: Above this many combinations, ``random`` does not enumerate the full factorial.
MAX_ENUMERATED_ARMS = 200_000


@DESIGNS.register("random")
@dataclass(frozen=True)
class RandomBalanced(Design):
    """``n`` distinct arms drawn at random, balanced across levels.

    Options:
        n: number of arms (required), at most the number of allowed combinations.
        seed: the draw's seed (default 0); the same seed gives the same arms.

    Each level of each factor appears n // L or n // L + 1 times (L its number of levels), like a
    Latin hypercube over categorical factors. Exclusions are respected while drawing; when they
    make exact balance impossible, the arms are chosen as balanced as a greedy search can make them.
    Arms are returned in full-factorial order.
    """

    n: Any
    seed: Any = 0

    def check(self, factors: Factors, baseline: Mapping[str, str] | None) -> list[DesignProblem]:
        """n a positive int no larger than the number of combinations; seed an int."""
        problems = []
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            problems.append(DesignProblem("n", f"must be a positive integer, got {self.n!r}"))
        else:
            total = 1
            for levels in factors.values():
                total *= len(levels)
            if self.n > total:
                problems.append(
                    DesignProblem("n", f"asks for {self.n} arms but the factors have only {total} combinations")
                )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            problems.append(DesignProblem("seed", f"must be an integer, got {self.seed!r}"))
        return problems

    def arms(
        self, factors: Factors, baseline: Mapping[str, str] | None, *, allowed: Allowed | None = None
    ) -> list[ArmLevels]:
        """The drawn arms; raises ValueError if fewer than ``n`` allowed arms exist."""
        names = list(factors)
        sizes = [len(factors[f]) for f in names]

        def to_arm(row: tuple[int, ...]) -> ArmLevels:
            return {f: factors[f][i] for f, i in zip(names, row)}

        def ok(row: tuple[int, ...]) -> bool:
            return allowed is None or allowed(to_arm(row))

        total = 1
        for s in sizes:
            total *= s
        candidates: list[tuple[int, ...]] | None = None
        if total <= MAX_ENUMERATED_ARMS:
            candidates = [r for r in itertools.product(*(range(s) for s in sizes)) if ok(r)]
            if len(candidates) < self.n:
                raise ValueError(
                    f"random design asks for n={self.n} arms but only {len(candidates)} combinations "
                    "are not excluded; lower n or remove exclusions"
                )
        rows = balanced_random_rows(sizes, self.n, self.seed, ok)
        if rows is None:
            if candidates is None:
                raise ValueError(
                    f"could not draw {self.n} distinct allowed balanced arms; relax 'exclude:' or lower n"
                )
            rows = _best_effort_rows(candidates, sizes, self.n, self.seed)
        return [to_arm(r) for r in sorted(rows)]
