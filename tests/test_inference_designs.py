"""Inference per design, on real study files: a fractional design's contrasts come from the
main-effects model (no arm differs from another in one factor alone), a one-at-a-time design's from
paired t-tests against the baseline arm, and the committed reward_granularity table (empty cells)
gets the right degrees of freedom."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.stats import inference as inf
from ablate.study import load_study

ROOT = Path(__file__).resolve().parent.parent
FRACTIONAL = """\
name: frac
factors:
  a: {path: loss.clip_high, values: [0.2, 0.28]}
  b: {path: loss.clip_low, values: [0.2, 0.25]}
  c: {path: optim.lr, values: [1.0e-5, 2.0e-5]}
  d: {path: loss.aggregation, values: [token-mean, seq-mean-token-mean]}
design: {name: fractional, resolution: 4}
seeds: 4
objective: {metric: eval/accuracy, mode: max}
"""
ONE_AT_A_TIME = """\
name: oat
factors:
  a: {path: loss.clip_high, values: [0.2, 0.28]}
  b: {path: loss.clip_low, values: [0.2, 0.25]}
design: one_at_a_time
baseline: {a: 0.2, b: 0.2}
seeds: 5
objective: {metric: eval/accuracy, mode: max}
"""


def _per_trial(study, effect, rng, noise=0.02):
    rows = []
    for s in study.seeds:
        offset = rng.normal(0, 0.05)
        for arm in study.arms:
            y = 0.5 + offset + effect(arm.levels) + rng.normal(0, noise)
            rows.append({"arm": arm.name, "seed": s, **arm.levels, "objective": y})
    return pd.DataFrame(rows)


def _infer(study, per_trial):
    factors = {f.name: f.name for f in study.factors}
    levels = {f.name: f.level_names() for f in study.factors}
    return inf.infer(per_trial, factors, levels, study.baseline_levels, design=study.design_name)


def test_fractional_design_contrasts_come_from_the_main_effects_model(tmp_path):
    path = tmp_path / "frac.yaml"
    path.write_text(FRACTIONAL)
    study = load_study(path)
    assert study.aliasing is not None and len(study.arms) == 8
    run = _infer(study, _per_trial(study, lambda lv: 0.1 * (lv["a"] == "0.28"), np.random.default_rng(0)))
    assert run.method == inf.PAIRED and not run.model.interactions  # the model: its main-effects ANOVA
    # 32 trials - (intercept + 3 seed + 4 main effects) = 24 residual df
    assert run.model.df_resid == 24 and [t.term for t in run.model.anova if t.kind == "main"] == list("abcd")
    by = {c.factor: c for c in run.contrasts}
    assert by["a"].cells == 0 and by["a"].estimate == pytest.approx(0.1, abs=0.02)
    assert {c.name: c.verdict for c in run.family.claims}["a: 0.28 vs 0.2"] == inf.DETECTED
    assert run.family.size == 4  # four contrasts, no interaction tested


def test_one_at_a_time_design_uses_paired_t_against_the_baseline_arm(tmp_path):
    path = tmp_path / "oat.yaml"
    path.write_text(ONE_AT_A_TIME)
    study = load_study(path)
    assert len(study.arms) == 3
    per_trial = _per_trial(study, lambda lv: 0.05 * (lv["b"] == "0.25"), np.random.default_rng(1))
    run = _infer(study, per_trial)
    assert run.method == inf.PAIRED and run.model is None
    c = {c.factor: c for c in run.contrasts}["b"]
    base = per_trial[(per_trial["a"] == "0.2") & (per_trial["b"] == "0.2")].set_index("seed")["objective"]
    lvl = per_trial[per_trial["b"] == "0.25"].set_index("seed")["objective"]
    d = (lvl - base).to_numpy()
    assert c.estimate == pytest.approx(d.mean()) and c.df == 4
    assert c.se == pytest.approx(d.std(ddof=1) / np.sqrt(5))


def test_committed_reward_granularity_table_has_the_reward_factors_three_df():
    """5 arms x 48 seeds (4 rewards under grpo, final+prm also under grpo_process): df by rank; the F
    recorded from the committed 48-seed report (the statsmodels comparison is in test_inference)."""
    table = pd.read_csv(ROOT / "reports" / "reward_granularity" / "results.csv")
    study = load_study(ROOT / "studies" / "reward_granularity.yaml")
    run = _infer(study, table)
    rows = {t.term: t for t in run.model.anova}
    assert (rows["reward"].df, rows["reward"].df_resid) == (3, 188)  # 240 observations - 48 seeds - 3 - 1
    assert rows["advantage"].df == 1 and rows["reward:advantage"].df == 0
    assert rows["reward"].F == pytest.approx(40.57, abs=0.01)


def test_paired_eval_variance_hand_values():
    # 10 problems; x solves 1-6, y solves 4-9: b = 3 (1, 2, 3), c = 3 (7, 8, 9), difference 0
    x = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    y = [0, 0, 0, 1, 1, 1, 1, 1, 1, 0]
    assert inf.paired_eval_variance(x, y) == pytest.approx((6 - 0) / 100)
    # b = 3, c = 1: ((3 + 1) - (3 - 1)^2 / 10) / 10^2 = 3.6 / 100
    y2 = [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    assert inf.paired_eval_variance(x, y2) == pytest.approx(3.6 / 100)
    assert inf.paired_eval_variance(x, x) == 0.0
    assert np.isnan(inf.paired_eval_variance([], []))


def test_paired_eval_variance_matches_the_spread_of_simulated_evaluations():
    """Two policies whose per-problem solve probabilities differ: the variance of the accuracy
    difference over many fresh problem sets agrees with the estimate from one set."""
    rng = np.random.default_rng(0)
    p_x = rng.uniform(0.2, 0.9, 200_000)
    p_y = np.clip(p_x + rng.normal(0, 0.2, p_x.size), 0, 1)
    draws, est = [], []
    for _ in range(400):
        idx = rng.integers(0, p_x.size, 100)
        u = rng.uniform(size=100)  # a shared draw: the two policies' outcomes are correlated on a problem
        x, y = (u < p_x[idx]).astype(float), (u < p_y[idx]).astype(float)
        draws.append(x.mean() - y.mean())
        est.append(inf.paired_eval_variance(x, y))
    assert np.mean(est) == pytest.approx(np.var(draws), rel=0.15)
