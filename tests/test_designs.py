"""Designs: arm counts and order, fractional aliasing against the textbook designs, random balance."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from ablate.study.designs import (
    DESIGNS,
    Fractional,
    FullFactorial,
    OneAtATime,
    RandomBalanced,
    fractional_alias_structure,
    fractional_generators,
)

TWO = ("lo", "hi")


def two_level(names: str) -> dict[str, tuple[str, ...]]:
    return {n: TWO for n in names}


def code(arm: dict[str, str], f: str) -> int:
    return -1 if arm[f] == "lo" else 1


def fs(*names: str) -> frozenset[str]:
    return frozenset(names)


# ------------------------------------------------------------------------------------------ full


def test_full_factorial_order_and_count():
    arms = FullFactorial().arms({"a": ("1", "2"), "b": ("x", "y", "z")}, None)
    assert arms == [
        {"a": "1", "b": "x"},
        {"a": "1", "b": "y"},
        {"a": "1", "b": "z"},
        {"a": "2", "b": "x"},
        {"a": "2", "b": "y"},
        {"a": "2", "b": "z"},
    ]


# ------------------------------------------------------------------------------- one at a time


def test_one_at_a_time_arms():
    factors = {"a": ("1", "2", "3"), "b": ("x", "y"), "c": ("p", "q")}
    base = {"a": "2", "b": "x", "c": "q"}
    arms = OneAtATime().arms(factors, base)
    assert arms == [
        base,
        {"a": "1", "b": "x", "c": "q"},
        {"a": "3", "b": "x", "c": "q"},
        {"a": "2", "b": "y", "c": "q"},
        {"a": "2", "b": "x", "c": "p"},
    ]
    assert len(arms) == 1 + (3 - 1) + (2 - 1) + (2 - 1)
    for arm in arms[1:]:
        assert sum(arm[f] != base[f] for f in factors) == 1


def test_one_at_a_time_needs_baseline():
    assert OneAtATime.needs_baseline
    assert OneAtATime().check({"a": TWO}, None)


# --------------------------------------------------------------------------------- fractional


def test_half_fraction_of_three_factors_resolution_three():
    """2^(3-1)_III with C = AB: every main effect is aliased with the other two factors' 2FI."""
    s = fractional_alias_structure(["a", "b", "c"], 3)
    assert s.runs == 4 and s.resolution == 3
    assert s.generators == (("c", ("a", "b")),)
    assert s.defining_relation == (fs("a", "b", "c"),)
    assert s.aliases({"a"}) == [fs("b", "c")]
    assert s.aliases({"b"}) == [fs("a", "c")]
    assert s.aliases({"c"}) == [fs("a", "b")]
    arms = Fractional(resolution="III").arms(two_level("abc"), None)
    # base a, b in full-factorial order; c = a*b in codes (lo = -1, hi = +1)
    assert arms == [
        {"a": "lo", "b": "lo", "c": "hi"},
        {"a": "lo", "b": "hi", "c": "lo"},
        {"a": "hi", "b": "lo", "c": "lo"},
        {"a": "hi", "b": "hi", "c": "hi"},
    ]


def test_half_fraction_of_four_factors_resolution_four():
    """2^(4-1)_IV with I = ABCD: mains aliased only with 3FIs; 2FIs aliased in pairs."""
    names = ["a", "b", "c", "d"]
    s = fractional_alias_structure(names, 4)
    assert s.runs == 8 and s.resolution == 4
    assert s.generators == (("d", ("a", "b", "c")),)
    assert s.defining_relation == (fs("a", "b", "c", "d"),)
    for f in names:
        aliases = s.aliases({f})
        assert aliases == [frozenset(set(names) - {f})]  # exactly one alias: the other three factors
        assert all(len(a) == 3 for a in aliases)
    pairs = {frozenset({fs(*p), *s.aliases(p)}) for p in itertools.combinations(names, 2)}
    assert pairs == {
        frozenset({fs("a", "b"), fs("c", "d")}),
        frozenset({fs("a", "c"), fs("b", "d")}),
        frozenset({fs("a", "d"), fs("b", "c")}),
    }
    arms = Fractional(resolution=4).arms(two_level(names), None)
    assert len(arms) == 8 and len({tuple(a.values()) for a in arms}) == 8
    for arm in arms:  # D = ABC in every run
        assert code(arm, "d") == code(arm, "a") * code(arm, "b") * code(arm, "c")
    # orthogonal: every pair of columns shows each of the 4 combinations twice
    for f, g in itertools.combinations(names, 2):
        assert Counter((a[f], a[g]) for a in arms) == {(x, y): 2 for x in TWO for y in TWO}


def test_alias_lines_for_resolution_four():
    lines = fractional_alias_structure(["a", "b", "c", "d"], 4).lines()
    assert lines[0] == "2^(4-1) fractional factorial, resolution IV: 8 of 16 runs"
    assert "generators: d = a:b:c" in lines
    assert "defining relation: I = a:b:c:d" in lines
    for chain in ("a = b:c:d", "d = a:b:c", "a:b = c:d", "a:c = b:d", "a:d = b:c"):
        assert f"  {chain}" in lines
    assert "  c:d = a:b" not in lines  # a chain is listed once


def test_resolution_five_and_saturated_resolution_three():
    s = fractional_alias_structure(list("abcde"), 5)  # 2^(5-1)_V, I = ABCDE
    assert (s.runs, s.resolution) == (16, 5)
    assert all(len(a) == 4 for a in s.aliases({"a"}))
    assert all(len(a) == 3 for a in s.aliases({"a", "b"}))
    s7 = fractional_alias_structure(list("abcdefg"), 3)  # 2^(7-4)_III: 8 runs, 15 words
    assert (s7.runs, s7.resolution, len(s7.defining_relation)) == (8, 3, 15)
    assert Counter(len(w) for w in s7.defining_relation) == {3: 7, 4: 7, 7: 1}


@pytest.mark.parametrize(
    "k, resolution, runs",
    [(3, 3, 4), (4, 3, 8), (4, 4, 8), (5, 3, 8), (5, 4, 16), (5, 5, 16), (6, 4, 16), (8, 4, 16), (6, 5, 32),
     (8, 5, 64), (9, 4, 32), (16, 4, 32), (15, 3, 16)],
)
def test_smallest_design_of_each_resolution(k, resolution, runs):
    """Run counts of the standard minimum designs (Montgomery, Design and Analysis of Experiments, Table 8.14)."""
    m, columns = fractional_generators(k, resolution)
    assert 2**m == runs and len(columns) == k - m
    s = fractional_alias_structure([f"f{i}" for i in range(k)], resolution)
    assert s.resolution is not None and s.resolution >= resolution


def test_fractional_of_two_factors_is_the_full_factorial():
    s = fractional_alias_structure(["a", "b"], 4)
    assert (s.runs, s.resolution, s.defining_relation) == (4, None, ())
    assert s.lines() == ["full factorial 2^2 = 4 runs: no effect is aliased"]


def test_fractional_checks():
    problems = Fractional(resolution=6).check({"a": ("1", "2", "3"), "b": TWO}, None)
    assert [p.option for p in problems] == ["resolution", None]
    assert "must be 3, 4 or 5" in problems[0].message
    assert "factor 'a' has 3" in problems[1].message
    assert Fractional(resolution="iv").check(two_level("abcd"), None) == []


# ------------------------------------------------------------------------------------- random

FACTORS = {"a": ("1", "2", "3"), "b": ("x", "y"), "c": ("p", "q", "r"), "d": ("u", "v")}


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 13, 36])
def test_random_is_balanced_distinct_and_seeded(n):
    arms = RandomBalanced(n=n, seed=1).arms(FACTORS, None)
    assert len(arms) == n
    assert len({tuple(a.values()) for a in arms}) == n
    for f, levels in FACTORS.items():
        counts = Counter(a[f] for a in arms)
        full = [counts.get(lv, 0) for lv in levels]
        assert max(full) - min(full) <= 1, (f, full)
        assert sum(full) == n
    assert RandomBalanced(n=n, seed=1).arms(FACTORS, None) == arms
    order = list(itertools.product(*FACTORS.values()))
    assert [order.index(tuple(a.values())) for a in arms] == sorted(order.index(tuple(a.values())) for a in arms)


def test_random_seed_changes_the_draw():
    draws = {tuple(tuple(a.values()) for a in RandomBalanced(n=6, seed=s).arms(FACTORS, None)) for s in range(5)}
    assert len(draws) > 1


def test_random_avoids_excluded_arms():
    def allowed(arm):
        return not (arm["a"] == "1" and arm["b"] == "x")

    arms = RandomBalanced(n=12, seed=0).arms(FACTORS, None, allowed=allowed)
    assert len(arms) == 12 and all(allowed(a) for a in arms)
    assert len({tuple(a.values()) for a in arms}) == 12
    # all 30 allowed arms: exact balance is impossible for a and b, but every allowed arm is drawn
    arms = RandomBalanced(n=30, seed=0).arms(FACTORS, None, allowed=allowed)
    assert len({tuple(a.values()) for a in arms}) == 30
    with pytest.raises(ValueError, match="only 30 combinations"):
        RandomBalanced(n=31, seed=0).arms(FACTORS, None, allowed=allowed)


def test_random_checks():
    assert [p.option for p in RandomBalanced(n=0, seed="x").check(FACTORS, None)] == ["n", "seed"]
    assert "only 36 combinations" in RandomBalanced(n=37).check(FACTORS, None)[0].message


# ------------------------------------------------------------------------------- every design


def test_from_options_reports_unknown_and_missing():
    design, problems = DESIGNS.get("random").from_options({"nn": 3})
    assert design is None
    assert [(p.option, p.message) for p in problems] == [
        ("nn", "unknown option 'nn'; allowed: n, seed; did you mean 'n'?"),
        (None, "option 'n' is required"),
    ]
    design, problems = DESIGNS.get("fractional").from_options({"resolution": "V"})
    assert problems == [] and design == Fractional(resolution="V")


OPTIONS = {"full": {}, "one_at_a_time": {}, "fractional": {"resolution": 3}, "random": {"n": 3, "seed": 2}}


@pytest.mark.parametrize("name", [n for n in DESIGNS.names() if n in OPTIONS])
def test_every_builtin_design(name):
    factors = two_level("abc")
    baseline = {"a": "lo", "b": "lo", "c": "lo"}
    design, problems = DESIGNS.get(name).from_options(OPTIONS[name])
    assert problems == [] and design.check(factors, baseline) == []
    arms = design.arms(factors, baseline)
    expected = {"full": 8, "one_at_a_time": 4, "fractional": 4, "random": 3}[name]
    assert len(arms) == expected
    assert len({tuple(a.items()) for a in arms}) == expected
    assert all(set(a) == set(factors) and all(a[f] in TWO for f in a) for a in arms)


def test_every_builtin_design_has_options_in_this_test():
    assert {"full", "one_at_a_time", "fractional", "random"} <= set(OPTIONS)
