"""The report's figures, drawn with seaborn on matplotlib's Agg canvas (no display, no pyplot state).

Each function draws one figure that says one thing and returns it (a ``matplotlib.figure.Figure``),
or None when the results hold no data for it (e.g. no ``policy/kl_ref`` logged). The data are
first reduced to one value per seed (per level and step: the mean over the arms with that level).
A band or error bar is the 95% t-interval over those seeds (:func:`ablate.stats.inference.t_interval`),
drawn only where there are at least 3 seeds; with fewer, each seed is drawn as its own line or dot.
The first figure, :func:`forest_plot`, shows the report's claims with the intervals the claims used.

Common arguments:
    table: the tidy results table (:mod:`ablate.tracking.results`).
    factors: factor name -> its column in ``table`` / ``per_trial``.
    levels: factor name -> level order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ablate.stats import inference, meta
from ablate.stats.analysis import seed_level_means

#: Width of a figure in inches (at :data:`DPI`: 1100 pixels, the width of the report's column).
WIDTH = 11.0
DPI = 100
#: Metrics of the diagnostics figure: (metric names summed, label, unit).
DIAGNOSTICS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("policy/entropy",), "entropy", "nats"),
    (("policy/clip_frac_low", "policy/clip_frac_high"), "clipped (low + high)", "fraction"),
    (("optim/grad_norm",), "grad norm", "L2 norm"),
)
LENGTH_METRICS = (("response/length_correct", "correct completions"), ("response/length_incorrect",
                                                                       "incorrect completions"))
KL_METRIC, REWARD_METRIC = "policy/kl_ref", "reward/total"


@contextmanager
def theme() -> Iterator[None]:
    """seaborn's ``whitegrid`` style and ``notebook`` context, for the figures drawn inside only."""
    rc = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.85)}
    with matplotlib.rc_context(rc):
        yield


def ci_errorbar(values: pd.Series) -> tuple[float, float]:
    """A seaborn ``errorbar=`` function: the 95% t-interval over the values given (one per seed);
    NaN (nothing drawn) below 3 seeds."""
    return inference.t_interval(values.to_numpy(float))


def _seed_count(d: pd.DataFrame) -> int:
    """The smallest number of seeds behind any (level, step) point of ``d``."""
    keys = [c for c in ("level", "step") if c in d]
    return int(d.groupby(keys)["seed"].nunique().min()) if not d.empty else 0


def _curves(ax: Any, d: pd.DataFrame, order: list[str], **kw: Any) -> str:
    """Lines per level over steps: mean with a 95% t band over seeds (>= 3 seeds), else one thin
    line per seed. Returns what was drawn, for the caption."""
    if _seed_count(d) >= inference.MIN_SEEDS:
        sns.lineplot(d, x="step", y="value", hue="level", hue_order=order, errorbar=ci_errorbar, ax=ax, **kw)
        return "mean with 95% t-band over seeds"
    sns.lineplot(d, x="step", y="value", hue="level", hue_order=order, units="seed", estimator=None, lw=1,
                 alpha=0.8, ax=ax, **{k: v for k, v in kw.items() if k not in ("marker", "markersize")})
    return "one line per seed (no band below 3 seeds)"


def label(metric: str, unit: str | None) -> str:
    """An axis label: ``metric (unit)``."""
    return f"{metric} ({unit})" if unit else metric


def _grid(n_panels: int, per_row: int = 3, height: float = 3.4, sharey: bool = True) -> tuple[Figure, np.ndarray]:
    cols = min(per_row, max(1, n_panels))
    rows = math.ceil(max(1, n_panels) / cols)
    fig = Figure(figsize=(WIDTH, height * rows), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharey=sharey, squeeze=False)).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def _per_seed_curves(table: pd.DataFrame, metrics: Sequence[str], column: str) -> pd.DataFrame:
    """Per (level, seed, step): the sum of ``metrics`` (each a mean over the arms with the level)."""
    rows = table[table["metric"].isin(metrics)]
    if rows.empty:
        return pd.DataFrame(columns=["level", "seed", "step", "value"])
    g = rows.groupby([column, "seed", "step", "metric"], sort=False)["value"].mean().reset_index()
    g = g.groupby([column, "seed", "step"], sort=False)["value"].sum(min_count=len(metrics)).reset_index()
    g = g.dropna(subset=["value"])
    return g.rename(columns={column: "level"})


def _order(levels: Mapping[str, Sequence[str]] | None, factor: str, present: Sequence[str]) -> list[str]:
    base = list(levels[factor]) if levels is not None and factor in levels else sorted(set(present))
    have = set(map(str, present))
    return [str(lv) for lv in base if str(lv) in have]


def learning_curves(table: pd.DataFrame, metric: str, factors: Mapping[str, str], *,
                    levels: Mapping[str, Sequence[str]] | None = None, unit: str | None = None) -> Figure | None:
    """The objective over training, one panel per factor, one line per level (mean over seeds of the
    per-seed mean over the arms with that level, averaging over the other factors), with its 95%
    t-band over seeds from 3 seeds on, else one line per seed."""
    data = table[table["metric"] == metric]
    if data.empty:
        return None
    drawn = ""
    with theme():
        fig, axes = _grid(len(factors))
        for ax, (factor, col) in zip(axes, factors.items()):
            d = _per_seed_curves(data, [metric], col)
            d["level"] = d["level"].astype(str)
            drawn = _curves(ax, d, _order(levels, factor, d["level"]), marker="o", markersize=3)
            ax.set_title(f"factor: {factor}" + (" (mean over the other factors)" if len(factors) > 1 else ""))
            ax.set_xlabel("step (RL updates)")
            ax.set_ylabel(label(metric, unit))
            ax.legend(title=factor, fontsize="small")
        fig.suptitle(f"Learning curves of {metric} by level: {drawn}")
    return fig


def paired_seed_lines(per_trial: pd.DataFrame, factors: Mapping[str, str], *, metric: str,
                      levels: Mapping[str, Sequence[str]] | None = None, unit: str | None = None) -> Figure | None:
    """The objective of each level, one grey line per seed joining that seed's values across the
    levels (a seed's value at a level: the mean over the arms with that level), and the mean over
    seeds with its 95% t-interval (from 3 seeds on). One panel per factor; parallel seed lines that
    all rise or fall are a consistent paired effect even where the per-level intervals overlap."""
    if per_trial.empty:
        return None
    with theme():
        fig, axes = _grid(len(factors), per_row=4)
        n_min = 0
        for ax, (factor, col) in zip(axes, factors.items()):
            d = seed_level_means(per_trial, col).dropna(subset=["value"])
            d["level"] = d["level"].astype(str)
            order = _order(levels, factor, d["level"])
            pos = {lv: i for i, lv in enumerate(order)}
            d["x"] = d["level"].map(pos)
            for _, g in d.sort_values("x").groupby("seed"):
                ax.plot(g["x"], g["value"], "-o", color="0.6", lw=0.9, markersize=3, alpha=0.8, zorder=2)
            n_min = int(d.groupby("level")["seed"].nunique().min()) if not d.empty else 0
            means = d.groupby("level")["value"].agg(list)
            for lv in order:
                vals = np.asarray(means.get(lv, []), float)
                if vals.size == 0:
                    continue
                lo, hi = inference.t_interval(vals)
                ax.errorbar(pos[lv], vals.mean(), yerr=None if not np.isfinite(lo) else
                            [[vals.mean() - lo], [hi - vals.mean()]], fmt="D", color="C0", capsize=5, markersize=7,
                            zorder=3)
            ax.set_xticks(range(len(order)), order)
            ax.set_title(f"factor: {factor}" + (" (mean over the other factors)" if len(factors) > 1 else ""))
            ax.set_xlabel(f"level of {factor}")
            ax.set_ylabel(label(metric, unit))
        band = "mean with 95% t-interval" if n_min >= inference.MIN_SEEDS else "mean (no interval below 3 seeds)"
        fig.suptitle(f"Objective ({metric}) per level: grey lines join each seed's values; blue: {band}")
    return fig


def forest_plot(family: inference.Family, *, scale: float = 1.0, unit: str = "", metric: str = "",
                min_effect: float | None = None) -> Figure | None:
    """The report's claims (contrasts): the estimate, the 95% interval the claim used, the per-seed
    differences as dots, the ±min_effect band shaded; primary claims on top, verdicts on the right."""
    claims = [c for c in family.claims if c.contrast is not None]
    if not claims:
        return None
    with theme():
        fig = Figure(figsize=(WIDTH, 1.2 + 0.5 * len(claims)), dpi=DPI, layout="constrained")
        ax = fig.subplots()
        if min_effect:
            ax.axvspan(-min_effect * scale, min_effect * scale, color="0.85", alpha=0.6, lw=0,
                       label=f"±min_effect ({min_effect * scale:g} {unit})")
        ax.axvline(0, color="0.3", lw=0.8)
        colours = {inference.DETECTED: "C3", inference.EQUIVALENT: "C2", inference.NOT_RESOLVED: "C7",
                   inference.UNINFORMATIVE: "C1", meta.HOLDS: "C3", meta.EQUIVALENT: "C2",
                   meta.CONTEXT_DEPENDENT: "C4"}
        names = []
        for i, cl in enumerate(claims):
            # a context study's claim: the pooled estimate and interval, one dot per context's own estimate
            c = cl.pooled if cl.pooled is not None else cl.contrast
            assert c is not None
            dots = [x.estimate for x in c.contexts] if cl.pooled is not None else c.per_seed
            y = len(claims) - 1 - i
            ax.scatter(np.asarray(dots) * scale, np.full(len(dots), y) + 0.18, s=12, color="0.45",
                       zorder=2, label=("contexts" if cl.pooled is not None else "seeds") if i == 0 else None)
            if np.isfinite(c.ci_low):
                ax.plot([c.ci_low * scale, c.ci_high * scale], [y, y], color=colours[cl.verdict], lw=2.5, zorder=3)
            ax.plot(c.estimate * scale, y, "D", color=colours[cl.verdict], markersize=7, zorder=4)
            names.append(("★ " if cl.primary else "") + cl.name)
            verdict = (cl.verdict if cl.verdict != inference.NOT_RESOLVED or cl.pooled is not None
                       else f"not resolved at {c.n_seeds} seeds")
            ax.annotate(verdict, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize="small",
                        color=colours[cl.verdict])
        ax.set_yticks(range(len(claims)), names[::-1])
        ax.set_ylim(-0.6, len(claims) - 0.35)
        ax.set_xlabel(f"difference level − baseline in {metric} ({unit})" if unit else "difference level − baseline")
        tested = (f"{len(claims)} claims, none testable (fewer than 3 seeds, or no spread)" if not family.size else
                  f"family of {family.size}, Holm" + (f"; its {len(claims)} contrasts drawn" if family.size != len(claims)
                                                      else ""))
        pooled = any(cl.pooled is not None for cl in claims)
        ax.set_title(f"Claims ({tested}): diamond = estimate, bar = 95% interval "
                     + ("(random effects across contexts), dots = contexts; ★ primary" if pooled else
                        f"({'model t' if family.method == inference.MODEL else 'paired t'}), dots = seeds; ★ primary"))
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / len(claims)), ncol=2,
                  frameon=False)
    return fig


def context_forest(claim: str, contexts: pd.DataFrame, pooled: Mapping[str, float], *, verdict: str,
                   scale: float = 1.0, unit: str = "", min_effect: float | None = None,
                   method: str = "", gains: Mapping[str, Any] | None = None) -> Figure:
    """One contrast across contexts: a row per context (its estimate and 95% paired-t interval over its
    seeds), the pooled random-effects diamond (its interval's width), the prediction interval for a new
    context (a thin bar under the diamond) and the ±min_effect band shaded; beside each row, the
    baseline's learning gain there (the positive control), a context where it did not learn drawn hollow.

    Args:
        contexts: one row per context: ``context, estimate, ci_low, ci_high, n`` (objective units).
        pooled: ``estimate, ci_low, ci_high, pi_low, pi_high, tau, i2`` (objective units; NaN for none).
        verdict: the verdict across contexts, printed in the title; method: the estimator and interval.
        gains: context -> its :class:`ablate.report.control.Control` (``gain, ci_low, ci_high, verdict,
            learned``; objective units); a context without one gets no gain.
    """
    gains = gains or {}
    k = len(contexts)
    with theme():
        fig = Figure(figsize=(WIDTH, 1.6 + 0.38 * (k + 2)), dpi=DPI, layout="constrained")
        ax = fig.subplots()
        if min_effect:
            ax.axvspan(-min_effect * scale, min_effect * scale, color="0.85", alpha=0.6, lw=0,
                       label=f"±min_effect ({min_effect * scale:g} {unit})")
        ax.axvline(0, color="0.3", lw=0.8)
        for i, r in enumerate(contexts.itertuples()):
            y = k + 1 - i
            if np.isfinite(r.ci_low):
                ax.plot([r.ci_low * scale, r.ci_high * scale], [y, y], color="C0", lw=2)
            g = gains.get(r.context)
            hollow = g is not None and not g.learned
            ax.plot(r.estimate * scale, y, "s", color="C0", markersize=6, markerfacecolor="white" if hollow else "C0")
            if g is not None:
                ci = (f" [{g.ci_low * scale:+.3g}, {g.ci_high * scale:+.3g}]" if np.isfinite(g.ci_low) else "")
                ax.annotate(f"{g.gain * scale:+.3g}{ci}: {g.verdict}".replace("-", "−"), xy=(1.01, y),
                            xycoords=("axes fraction", "data"), va="center", fontsize="x-small",
                            color="C2" if g.learned else "C1")
        est, lo, hi = (pooled.get(x, math.nan) for x in ("estimate", "ci_low", "ci_high"))
        if np.isfinite(est):
            ax.fill([lo * scale, est * scale, hi * scale, est * scale], [0.5, 0.8, 0.5, 0.2], color="C3",
                    label="pooled (random effects) and its 95% interval")
        pl, ph = pooled.get("pi_low", math.nan), pooled.get("pi_high", math.nan)
        if np.isfinite(pl):
            ax.plot([pl * scale, ph * scale], [0.0, 0.0], color="C3", lw=1.2, alpha=0.7,
                    label="95% prediction interval for a new context")
        names = [f"{r.context} ({int(r.n)} seeds)" for r in contexts.itertuples()]
        ax.set_yticks([k + 1 - i for i in range(k)] + [0.5], names + ["pooled"])
        ax.set_ylim(-0.5, k + 1.6)
        ax.set_xlabel(f"difference level − baseline ({unit})" if unit else "difference level − baseline")
        tau, i2 = pooled.get("tau", math.nan), pooled.get("i2", math.nan)
        ax.set_title(f"{claim}: {verdict}\n" + (f"τ = {tau * scale:.3g} {unit}, I² = {100 * i2:.0f}%" if np.isfinite(tau)
                                                else "") + (f"\n{method}" if method else ""), fontsize="medium")
        if gains:
            ax.annotate(f"baseline's gain, step 0 → last ({unit}), 95% paired t", xy=(1.01, k + 1.45),
                        xycoords=("axes fraction", "data"), va="center", fontsize="x-small", color="0.3")
            ax.plot([], [], "s", color="C0", markerfacecolor="white", label="a context where the baseline did not learn")
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    return fig


def interaction_plots(per_trial: pd.DataFrame, factors: Mapping[str, str], *, metric: str,
                      levels: Mapping[str, Sequence[str]] | None = None, unit: str | None = None) -> Figure | None:
    """One panel per pair of factors: the objective against the levels of the first, one line per
    level of the second (cell means over seeds and over any other factor, with a 95% t-interval from
    3 seeds on). Parallel lines: no interaction."""
    pairs = list(itertools.combinations(factors, 2))
    if not pairs or per_trial.empty:
        return None
    with theme():
        fig, axes = _grid(len(pairs), per_row=3, sharey=False)
        for ax, (a, b) in zip(axes, pairs):
            ca, cb = factors[a], factors[b]
            d = per_trial.groupby([ca, cb, "seed"], sort=False)["objective"].mean().reset_index().dropna()
            d[ca], d[cb] = d[ca].astype(str), d[cb].astype(str)
            sns.pointplot(d, x=ca, y="objective", hue=cb, order=_order(levels, a, d[ca]),
                          hue_order=_order(levels, b, d[cb]), errorbar=ci_errorbar, dodge=0.15,
                          capsize=0.1, ax=ax)
            ax.set_title(f"{a} × {b}")
            ax.set_xlabel(f"level of {a}")
            ax.set_ylabel(label(metric, unit))
            ax.legend(title=b, fontsize="small")
        others = "; averaged over the other factor(s)" if len(factors) > 2 else ""
        fig.suptitle("Interactions: cell means, 95% t-interval over seeds from 3 seeds on (non-parallel lines = "
                     f"interaction){others}")
    return fig


def arm_heatmap(arm_means: pd.DataFrame, factors: Mapping[str, str], *, metric: str,
                unit: str | None = None) -> Figure | None:
    """Mean objective of every arm as a heatmap: rows are the combinations of all factors but the
    last, columns the levels of the last factor; missing arms are blank."""
    if arm_means.empty:
        return None
    cols = list(factors.values())
    names = list(factors)
    d = arm_means.copy()
    for c in cols:
        d[c] = d[c].astype(str)
    col_factor = cols[-1]
    if len(cols) > 1:
        d["_row"] = d[cols[:-1]].agg(" / ".join, axis=1)
        row_title = " / ".join(names[:-1])
    else:
        d["_row"] = "all arms"
        row_title = ""
    grid = d.pivot_table(index="_row", columns=col_factor, values="mean", aggfunc="mean", sort=False)
    with theme():
        fig = Figure(figsize=(min(WIDTH, 2.5 + 1.6 * grid.shape[1]), 1.2 + 0.45 * grid.shape[0]), dpi=DPI,
                     layout="constrained")
        ax = fig.subplots()
        sns.heatmap(grid, annot=True, fmt=".3g", cmap="viridis", cbar_kws={"label": label(metric, unit)}, ax=ax)
        ax.grid(False)
        ax.set_xlabel(f"level of {names[-1]}")
        ax.set_ylabel(row_title)
        ax.set_title(f"Mean {metric} per arm (over seeds)")
    return fig


def response_length(table: pd.DataFrame, factors: Mapping[str, str], *,
                    levels: Mapping[str, Sequence[str]] | None = None) -> Figure | None:
    """Mean completion length over training, correct and incorrect completions apart (columns), one
    row per factor, one line per level: the length bias that Dr. GRPO (Liu et al. 2025) attributes
    to per-sequence loss normalization shows as incorrect completions growing longer."""
    have = [m for m, _ in LENGTH_METRICS if (table["metric"] == m).any()]
    if not have:
        return None
    drawn = ""
    with theme():
        fig = Figure(figsize=(WIDTH, 3.2 * len(factors)), dpi=DPI, layout="constrained")
        axes = fig.subplots(len(factors), len(LENGTH_METRICS), squeeze=False, sharey=True)
        for r, (factor, col) in enumerate(factors.items()):
            for c, (metric, title) in enumerate(LENGTH_METRICS):
                ax = axes[r, c]
                d = _per_seed_curves(table, [metric], col)
                if d.empty:
                    ax.set_visible(False)
                    continue
                d["level"] = d["level"].astype(str)
                drawn = _curves(ax, d, _order(levels, factor, d["level"]))
                ax.set_title(f"{title} — {factor}")
                ax.set_xlabel("step (RL updates)")
                ax.set_ylabel("mean length (tokens)")
                ax.legend(title=factor, fontsize="small")
        fig.suptitle(f"Response length of correct vs incorrect completions: {drawn}")
    return fig


def pareto_front(x: Sequence[float], y: Sequence[float]) -> list[int]:
    """Indices of the points not dominated when low ``x`` and high ``y`` are better, by rising x."""
    pts = sorted(range(len(x)), key=lambda i: (x[i], -y[i]))
    front, best = [], -math.inf
    for i in pts:
        if y[i] > best:
            front.append(i)
            best = y[i]
    return front


def reward_vs_kl(finals: pd.DataFrame, arm_labels: Mapping[str, str], *, legend_title: str = "arm") -> Figure | None:
    """Each arm's final reward against its final KL to the reference policy (means over seeds with
    95% t-intervals on both axes from 3 seeds on); the line joins the arms no other arm beats on both (the Pareto front).

    Args:
        finals: per trial ``arm, seed, kl, reward`` (final values, see
            :func:`ablate.stats.analysis.final_values`).
        arm_labels: arm -> its short label (the level names).
    """
    d = finals.dropna(subset=["kl", "reward"])
    if d.empty:
        return None
    rows = []
    for arm, g in d.groupby("arm", sort=False):
        kx, ry = g.groupby("seed")["kl"].mean(), g.groupby("seed")["reward"].mean()
        rows.append({"arm": arm_labels.get(arm, arm), "kl": kx.mean(), "reward": ry.mean(),
                     "kl_ci": inference.t_interval(kx), "reward_ci": inference.t_interval(ry)})
    m = pd.DataFrame(rows)
    with theme():
        ncol, height = legend_layout(len(m) + 1)
        fig = Figure(figsize=(WIDTH * (0.75 if ncol == 1 else 1.2), height), dpi=DPI, layout="constrained")
        ax = fig.subplots()
        palette = dict(zip(m["arm"], sns.color_palette("tab10" if len(m) <= 10 else "husl", len(m))))
        pts = d.assign(arm=d["arm"].map(lambda a: arm_labels.get(a, a)))
        sns.scatterplot(pts, x="kl", y="reward", hue="arm", palette=palette, alpha=0.3, s=18, legend=False, ax=ax)
        for _, r in m.iterrows():
            xerr = np.array([[r["kl"] - r["kl_ci"][0]], [r["kl_ci"][1] - r["kl"]]])
            yerr = np.array([[r["reward"] - r["reward_ci"][0]], [r["reward_ci"][1] - r["reward"]]])
            ax.errorbar(r["kl"], r["reward"], xerr=np.nan_to_num(xerr), yerr=np.nan_to_num(yerr), fmt="o",
                        color=palette[r["arm"]], capsize=3, label=r["arm"], markersize=7)
        front = pareto_front(m["kl"].tolist(), m["reward"].tolist())
        ax.plot(m["kl"].iloc[front], m["reward"].iloc[front], "--", color="0.3", lw=1, label="Pareto front")
        ax.set_xlabel("KL(policy ‖ reference) at the end of training (nats per completion)")
        ax.set_ylabel("total reward at the end of training (reward)")
        ax.set_title("Reward against KL to the reference: up and left is better")
        ax.legend(title=legend_title, fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=ncol)
    return fig


def diagnostics(table: pd.DataFrame, factors: Mapping[str, str], *,
                levels: Mapping[str, Sequence[str]] | None = None) -> Figure | None:
    """Training health over steps: policy entropy, clipped fraction and gradient norm (rows) per
    factor (columns), one line per level, 95% t-bands over seeds from 3 seeds on."""
    present = [(ms, name, unit) for ms, name, unit in DIAGNOSTICS if all((table["metric"] == m).any() for m in ms)]
    if not present:
        return None
    drawn = ""
    with theme():
        fig = Figure(figsize=(WIDTH, 2.9 * len(present)), dpi=DPI, layout="constrained")
        axes = fig.subplots(len(present), len(factors), squeeze=False, sharex=True)
        for r, (metrics, name, unit) in enumerate(present):
            for c, (factor, col) in enumerate(factors.items()):
                ax = axes[r, c]
                d = _per_seed_curves(table, metrics, col)
                d["level"] = d["level"].astype(str)
                drawn = _curves(ax, d, _order(levels, factor, d["level"]), legend=(r == 0))
                ax.set_xlabel("step (RL updates)")
                ax.set_ylabel(f"{name} ({unit})" if c == 0 else "")
                if r == 0:
                    ax.set_title(f"factor: {factor}")
                    ax.legend(title=factor, fontsize="small")
        fig.suptitle(f"Diagnostics: entropy, clipping and gradient norm: {drawn}")
    return fig


def legend_layout(entries: int) -> tuple[int, float]:
    """Columns and figure height (inches) for a legend of ``entries`` beside the axes: one column up to 16
    entries, two beyond (a study over contexts has one arm per context), and ~0.21 inch per legend row."""
    ncol = 1 if entries <= 16 else 2
    return ncol, max(5.0, 0.21 * math.ceil(entries / ncol) + 1.0)


def compute_efficiency(points: pd.DataFrame, fits: pd.DataFrame, arm_labels: Mapping[str, str], *, metric: str,
                       unit: str | None = None, legend_title: str = "arm") -> Figure | None:
    """The objective against generated tokens per arm (mean over seeds at each step, at the mean
    token count, with 95% t-intervals from 3 seeds on) and each arm's fitted saturating curve (dashed; none where the fit
    failed); log-scaled compute axis. Arms in the order of ``arm_labels``."""
    from ablate.stats.analysis import saturating_curve

    if points.empty:
        return None
    present = set(points["arm"])
    arms = [a for a in arm_labels if a in present] + [a for a in dict.fromkeys(points["arm"]) if a not in arm_labels]
    ncol, height = legend_layout(len(arms))
    with theme():
        fig = Figure(figsize=(WIDTH * (0.8 if ncol == 1 else 1.2), height), dpi=DPI, layout="constrained")
        ax = fig.subplots()
        palette = dict(zip(arms, sns.color_palette("tab10" if len(arms) <= 10 else "husl", len(arms))))
        fit_by_arm = {r["arm"]: r for _, r in fits.iterrows()} if not fits.empty else {}
        cmax = float(points["tokens"].max())
        for arm in arms:
            g = points[(points["arm"] == arm) & (points["tokens"] > 0)]
            if g.empty:
                continue
            per_step = g.groupby("step").agg(tokens=("tokens", "mean"), value=("value", "mean")).reset_index()
            cis = np.array([inference.t_interval(g.loc[g["step"] == s, "value"]) for s in per_step["step"]])
            name = arm_labels.get(arm, arm)
            ax.plot(per_step["tokens"], per_step["value"], "o", color=palette[arm], markersize=4, label=name)
            ax.fill_between(per_step["tokens"], cis[:, 0], cis[:, 1], color=palette[arm], alpha=0.15, lw=0)
            fit = fit_by_arm.get(arm)
            if fit is not None and bool(fit["ok"]):
                grid = np.geomspace(max(float(g["tokens"].min()) / 2, 1.0), cmax * 3, 200)
                ax.plot(grid, saturating_curve(grid, fit["r0"], fit["a"], fit["b"], fit["c_mid"]), "--",
                        color=palette[arm], lw=1.2)
        ax.set_xscale("log")
        ax.set_xlabel("generated training tokens (tokens, log scale)")
        ax.set_ylabel(label(metric, unit))
        ax.set_title("Compute efficiency: dots = mean over seeds (95% t-band from 3 seeds on)," + (" " if ncol == 1 else "\n")
                     + "dashed = saturating fit")  # two lines beside a two-column legend
        ax.legend(title=legend_title, fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=ncol)
    return fig


def save(fig: Figure, folder: Path, name: str, formats: Sequence[str] = ("png", "svg")) -> dict[str, Path]:
    """Write ``fig`` as ``folder/name.<format>`` for each format; returns format -> path."""
    out = {}
    for fmt in formats:
        path = Path(folder) / f"{name}.{fmt}"
        fig.savefig(path, format=fmt, dpi=DPI, metadata={"Date": None} if fmt == "svg" else None)
        out[fmt] = path
    return out
