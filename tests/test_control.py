"""The positive control (issue 54): did the baseline learn? Hand-computed gains, intervals and verdicts of
:func:`ablate.report.control.learning_gain`, the block's words and its place in a report, and every committed
report's control recomputed from its curves.csv and found in its README."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from tolerance import EXACT, assert_close

from ablate.report import control as C
from ablate.report.findings import num
from ablate.report.ledger import report_folders
from ablate.report.markdown import md

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"


def curves(arms: dict[str, dict[int, list[tuple[int, float]]]]) -> pd.DataFrame:
    """A curves table (``key, arm, seed, step, value``) from arm -> seed -> [(step, value), ...]."""
    rows = [{"key": f"{arm}-{seed}", "arm": arm, "seed": seed, "step": step, "value": value}
            for arm, seeds in arms.items() for seed, points in seeds.items() for step, value in points]
    return pd.DataFrame(rows)


#: Four seeds of the baseline: step 0, 30 and 60; gains 0.10, 0.12, 0.08, 0.10 (mean 0.10, SD sqrt(0.0008/3)).
BASE = {0: [(0, 0.30), (30, 0.35), (60, 0.40)], 1: [(0, 0.20), (30, 0.30), (60, 0.32)],
        2: [(0, 0.25), (30, 0.26), (60, 0.33)], 3: [(0, 0.30), (30, 0.31), (60, 0.40)]}
#: Another arm's rows: never read for the baseline's control.
OTHER = {s: [(0, 0.9), (60, 0.1)] for s in range(4)}


def test_the_gain_is_last_minus_step_0_per_seed_with_its_paired_t_interval_by_hand():
    (c,) = C.learning_gain(curves({"base": BASE, "other": OTHER}), "base", min_effect=0.05)
    assert (c.context, c.arm, c.seeds, c.n, c.last_steps) == ("", "base", (0, 1, 2, 3), 4, (60, 60))
    assert_close(np.array(c.gains), [0.10, 0.12, 0.08, 0.10], EXACT)
    assert_close([c.start, c.end, c.gain], [0.2625, 0.3625, 0.10], EXACT)
    # by hand: SD sqrt(0.0008 / 3) = 0.016330, SE 0.0081650, t(0.975, 3) = 3.182446: half-width 0.025984
    half = stats.t.ppf(0.975, 3) * math.sqrt(0.0008 / 3) / 2
    assert_close([c.ci_low, c.ci_high], [0.10 - half, 0.10 + half], EXACT)
    assert round(c.ci_low, 5) == 0.07402 and round(c.ci_high, 5) == 0.12598
    ci = stats.ttest_1samp([0.10, 0.12, 0.08, 0.10], 0.0).confidence_interval(0.95)  # scipy on the gains alone
    assert_close([c.ci_low, c.ci_high], [ci.low, ci.high], EXACT)
    assert c.verdict == C.LEARNED and c.learned


def _gains(gains: list[float], start: float = 0.3) -> dict[int, list[tuple[int, float]]]:
    return {s: [(0, start), (60, start + g)] for s, g in enumerate(gains)}


@pytest.mark.parametrize("gains, min_effect, verdict", [
    ([0.10, 0.12, 0.08, 0.10], 0.05, C.LEARNED),  # interval [0.074, 0.126]: above 0, mean >= min_effect
    ([0.10, 0.12, 0.08, 0.10], None, C.LEARNED),  # no min_effect: any gain whose interval is above 0
    ([0.10, 0.12, 0.08, 0.10], 0.11, C.DID_NOT_LEARN),  # above 0, but a mean below min_effect
    ([0.05, -0.03, 0.02, 0.00], 0.05, C.DID_NOT_LEARN),  # the interval holds 0
    ([-0.10, -0.12, -0.08, -0.10], 0.05, C.COLLAPSED),  # the whole interval below 0
    ([0.10, 0.12], 0.05, C.NOT_RESOLVED),  # 2 seeds: no interval
    ([0.05, 0.05, 0.05], 0.05, C.LEARNED),  # no spread: a zero-width interval at the mean, = min_effect
])
def test_each_verdict(gains, min_effect, verdict):
    (c,) = C.learning_gain(curves({"base": _gains(gains)}), "base", min_effect=min_effect)
    assert c.verdict == verdict and c.n == len(gains)
    assert_close(c.gain, float(np.mean(gains)), EXACT, scale=1.0)
    if len(gains) < 3:
        assert math.isnan(c.ci_low) and math.isnan(c.ci_high)
    elif np.ptp(gains) == 0:
        assert_close([c.ci_low, c.ci_high], [gains[0], gains[0]], EXACT)


def test_a_seed_without_a_step_0_or_a_later_evaluation_is_not_paired():
    arms = {"base": {**BASE, 4: [(30, 0.5), (60, 0.6)], 5: [(0, 0.4)], 6: [(0, 0.3), (60, float("nan"))]}}
    (c,) = C.learning_gain(curves(arms), "base")
    assert c.seeds == (0, 1, 2, 3)
    (none,) = C.learning_gain(curves({"base": {0: [(30, 0.5), (60, 0.6)]}}), "base")
    assert none.n == 0 and none.verdict == C.NOT_RESOLVED and math.isnan(none.gain)
    assert C.learning_gain(curves({"other": OTHER}), "base")[0].n == 0  # an arm with no rows


def test_a_minimised_objective_gains_by_going_down():
    (up,) = C.learning_gain(curves({"base": BASE}), "base", mode="max")
    (down,) = C.learning_gain(curves({"base": BASE}), "base", mode="min")
    assert_close([down.gain, down.ci_low, down.ci_high], [-up.gain, -up.ci_high, -up.ci_low], EXACT)
    assert down.verdict == C.COLLAPSED
    with pytest.raises(ValueError, match="mode"):
        C.learning_gain(curves({"base": BASE}), "base", mode="up")


def test_one_control_per_context_of_its_own_baseline_arm():
    arms = {"r=a,task=x": BASE, "r=b,task=x": OTHER, "r=a,task=y": _gains([-0.1, -0.12, -0.08]),
            "r=a,task=z": _gains([0.01, 0.02])}
    out = C.learning_gain(curves(arms), {"task=x": "r=a,task=x", "task=y": "r=a,task=y", "task=z": "r=a,task=z"},
                          min_effect=0.05)
    assert [(c.context, c.arm, c.n, c.verdict) for c in out] == [
        ("task=x", "r=a,task=x", 4, C.LEARNED), ("task=y", "r=a,task=y", 3, C.COLLAPSED),
        ("task=z", "r=a,task=z", 2, C.NOT_RESOLVED)]
    assert_close(out[1].gain, -0.1, EXACT, scale=1.0)


def test_the_block_says_the_verdict_with_its_numbers_and_when_equivalence_is_no_evidence():
    (c,) = C.learning_gain(curves({"base": BASE}), "base", min_effect=0.05)
    block = C.control_block([c], metric="eval/accuracy", factor=100.0, unit="points")
    # the means 0.2625 and 0.3625 sit on a rounding boundary: printed as num() prints their float sums
    assert block.paragraphs == (
        "Positive control: the baseline (arm base) gained +10 points [7.4, 12.6] from step 0 to step 60 (95% paired "
        f"t, 4 seeds; mean eval/accuracy {num(c.start)} → {num(c.end)}): learned.",)
    (flat,) = C.learning_gain(curves({"base": _gains([0.05, -0.03, 0.02, 0.0])}), "base", min_effect=0.05)
    text = C.control_block([flat], metric="eval/accuracy", factor=100.0, unit="points").paragraphs
    assert text[0].endswith(": did not learn (the interval holds 0).")
    assert "an 'equivalent' verdict of this report is uninformative" in text[1]
    (few,) = C.learning_gain(curves({"base": _gains([0.1, 0.12])}), "base", min_effect=0.05)
    assert C.control_block([few], metric="eval/accuracy", factor=100.0, unit="points").paragraphs == (
        "Positive control: the baseline (arm base) gained +11 points from step 0 to step 60 at 2 seeds (per seed +10, "
        "+12; mean eval/accuracy 0.3 → 0.41): not resolved at 2 seeds (no interval below 3 seeds).",)
    md_text = C.control_block([c], metric="eval/accuracy", factor=100.0, unit="points").markdown()
    assert md_text.startswith(f"{C.BEGIN}\n### {C.TITLE}\n\n") and md_text.endswith(C.END)
    html_text = C.control_block([c], metric="eval/accuracy", factor=100.0, unit="points").html()
    assert html_text.startswith(C.BEGIN) and "<h3 id=\"positive-control\">" in html_text


def test_a_context_study_s_block_has_one_row_per_context_and_counts_its_verdicts():
    arms = {"r=a,task=x": BASE, "r=a,task=y": _gains([-0.1, -0.12, -0.08]), "r=a,task=z": _gains([0.05, -0.03, 0.02])}
    controls = C.learning_gain(curves(arms), {f"task={t}": f"r=a,task={t}" for t in "xyz"}, min_effect=0.05)
    block = C.control_block(controls, metric="eval/accuracy", factor=100.0, unit="points", levels="r=a")
    assert block.paragraphs[0].startswith("Positive control per context: the baseline (r=a) learned in 1 (task=x), "
                                          "did not learn in 1, collapsed in 1 (task=y) of the 3 contexts")
    assert "in those 2 contexts is uninformative" in block.paragraphs[1] and "prevented the collapse" in block.paragraphs[1]
    assert list(block.table["context"]) == ["task=x", "task=y", "task=z"]
    assert list(block.table["verdict"]) == [C.LEARNED, C.COLLAPSED, C.DID_NOT_LEARN]
    assert list(block.table["gain (points)"]) == ["+10", "-10", "+1.33"]


def test_the_block_goes_under_the_answer_and_a_second_splice_replaces_it():
    (c,) = C.learning_gain(curves({"base": BASE}), "base")
    block = C.control_block([c], metric="m")
    readme = "# Ablation study x\n\n## Findings\n\n- a: detected.\n- b: equivalent.\n\n![Claims](claims.png)\n\nrest\n"
    page = '<h1>x</h1>\n<h2>Findings</h2>\n<ul class="answer"><li class="answer">a</li></ul>\n<figure id="fig-claims">\n'
    md1, html1 = C.spliced(readme, page, block)
    assert md1 == readme.replace("![Claims]", block.markdown() + "\n\n![Claims]")
    assert html1 == page.replace("<figure", block.html() + "\n<figure")
    other = C.control_block([C.learning_gain(curves({"base": _gains([0.1, 0.2, 0.3])}), "base")[0]], metric="m")
    md2, html2 = C.spliced(md1, html1, other)
    assert md2 == readme.replace("![Claims]", other.markdown() + "\n\n![Claims]") and md2.count(C.BEGIN) == 1
    assert html2 == page.replace("<figure", other.html() + "\n<figure")
    # an older report with notes, not bullets, under its Findings heading: right under the heading
    old = "## Findings\n\n> a note\n"
    assert C.spliced("# x\n\n" + old, "", block) == ("# x\n\n## Findings\n\n" + block.markdown() + "\n\n> a note\n", "")


def test_baseline_arms_of_a_context_study_are_its_baseline_levels_in_each_context():
    from ablate.study import load_study

    study = load_study(ROOT / "studies" / "generalization.yaml")
    arms = C.baseline_arms(study)
    assert len(arms) == 15 and arms["context=countdown2/tiny-qwen2"] == (
        "loss_norm=sequence,ratio=token,reward=final,context=countdown2/tiny-qwen2")
    plain = load_study(ROOT / "studies" / "aa_control.yaml")
    assert C.baseline_arms(plain) == {"": next(a.name for a in plain.arms if a.baseline)}


# ------------------------------------------------------------------------------------- committed reports


def _expected(folder: Path) -> list[tuple[str, str, str, int, str]]:
    """(context, gain, interval, seeds, verdict) of the report's baseline, recomputed here from curves.csv
    alone (the baseline levels' arms of its study file; pandas and scipy, not ablate.report.control)."""
    from ablate.report.findings import ci_text, signed
    from ablate.report.shared import committed_report

    study = committed_report(folder, ROOT).plan.study
    base = study.baseline_levels
    curves_ = pd.read_csv(folder / "curves.csv", dtype={"arm": str})
    out = []
    for arm in study.arms:
        if any(arm.levels[f.name] != base[f.name] for f in study.compared):
            continue
        rows = curves_[curves_["arm"] == arm.name].sort_values("step")
        per_seed = rows.groupby("seed").agg(first_step=("step", "first"), first=("value", "first"),
                                            last=("value", "last"))
        gains = (per_seed["last"] - per_seed["first"])[per_seed["first_step"] == 0].to_numpy()
        ci = stats.ttest_1samp(gains, 0.0).confidence_interval(0.95)
        mean = gains.mean()
        verdict = ("learned" if ci.low > 0 and mean >= study.min_effect else "collapsed" if ci.high < 0
                   else "did not learn")
        out.append((study.context_of(arm.levels), signed(100 * mean), ci_text(ci.low, ci.high, 100), len(gains), verdict))
    return out


def _block(text: str) -> str:
    i, j = text.find(C.BEGIN), text.find(C.END)
    assert 0 <= i < j, "no positive-control block"
    return text[i:j]


@pytest.mark.parametrize("folder", report_folders(REPORTS), ids=lambda f: f.name)
def test_every_committed_report_states_whether_its_baseline_learned(folder):
    """Issue 54: each committed report's README and index.html hold the control under the answer, and its
    numbers and verdict are what curves.csv gives (recomputed here on its own)."""
    readme = (folder / "README.md").read_text(encoding="utf-8")
    page = (folder / "index.html").read_text(encoding="utf-8")
    block = _block(readme)
    assert _block(page) and readme.index("## Findings") < readme.index(C.BEGIN)
    assert C.TITLE in block and "Positive control" in block
    if not (folder / "curves.csv").is_file():  # cpu_bf16 predates curves.csv: it says it cannot tell
        assert "commits no curves.csv" in block and "cannot be told" in block
        return
    expected = _expected(folder)
    assert expected
    for context, gain, ci, n, verdict in expected:
        if not context:
            assert md(f"gained {gain} points {ci} from step 0 to step") in block, (gain, ci, block)
            assert md(f"(95% paired t, {n} seeds;") in block and re.search(rf": {verdict}[ .(]", block)
        else:
            row = f"| {md(context)} | {n} |"
            line = next(s for s in block.splitlines() if s.startswith(row))
            assert f"| {gain} | {md(ci)} | {verdict} |" in line, (line, gain, ci, verdict)
    if any(v != "learned" for *_, v in expected):
        assert "uninformative" in block


def test_the_rerun_generalization_s_baseline_learned_in_12_of_its_15_contexts():
    """Issue 54's rerun on the contexts where the pilot saw the baseline learn, at seeds the pilot did not use
    (10-14): it learned in 12 of 15; addition / tiny-llama (+5.0 [-9.76, 19.8]), addition / tiny-gpt2 (+4.76)
    and countdown2 / tiny-gpt2 (+2.12) did not, none collapsed, and the 5 contexts of the pilot's third stage
    all learned (addition / small-qwen2 +31.6)."""
    from ablate.study import load_study

    study = load_study(ROOT / "studies" / "generalization.yaml")
    controls = C.study_controls(study, pd.read_csv(REPORTS / "generalization" / "curves.csv", dtype={"arm": str}))
    by = {c.context: c for c in controls}
    assert sum(c.verdict == C.LEARNED for c in controls) == 12 and len(controls) == 15
    assert {k for k, c in by.items() if c.verdict != C.LEARNED} == {
        "context=addition/tiny-llama", "context=addition/tiny-gpt2", "context=countdown2/tiny-gpt2"}
    assert round(100 * by["context=addition/small-llama"].gain, 1) == 21.9
    assert round(100 * by["context=addition/small-qwen2"].gain, 1) == 31.6
    assert round(100 * by["context=countdown2/tiny-gpt2"].gain, 2) == 2.12
    assert all(c.n == 5 for c in controls) and not any(c.verdict == C.COLLAPSED for c in controls)


def test_nine_or_more_generalization_contexts_learned_recomputed_from_the_curves_alone():
    """Issue 54's bar, recomputed without ablate's control code: per context, the baseline arm's last minus its
    step-0 evaluation, paired over seeds (scipy's paired t), a mean gain >= min_effect with the 95% interval
    above 0 in at least 9 contexts, across 3 tasks and 3 architectures; every step-0 accuracy >= the band's
    floor (0.1)."""
    from scipy import stats

    curves = pd.read_csv(REPORTS / "generalization" / "curves.csv", dtype={"arm": str})
    base = curves[curves["arm"].str.startswith("loss_norm=sequence,ratio=token,reward=final,context=")]
    learned = []
    for arm, d in base.groupby("arm"):
        d = d.sort_values("step")
        first = d.groupby("seed")["value"].first()
        last = d.groupby("seed")["value"].last()
        assert (first >= 0.1).all(), arm
        ci = stats.ttest_rel(last, first).confidence_interval(0.95)
        if (last - first).mean() >= 0.05 and ci.low > 0:
            learned.append(arm.split("context=")[1])
    assert len(learned) == 12 >= 9
    assert {c.split("/")[0].split("-")[0].rstrip("23") for c in learned} == {"addition", "countdown", "chain"}
    assert {c.split("/")[1].split("-")[1] for c in learned} == {"llama", "gpt2", "qwen2"}


# ------------------------------------------------------------------------- uninformative equivalences


def _family():
    """A family of two contrasts at 6 seeds, min_effect 0.05: one equivalent (differences within ±0.01),
    one detected (+0.2 on every seed, with spread)."""
    from ablate.stats.inference import make_family, paired_contrast

    y = np.full(6, 0.5)
    flat = paired_contrast(y + [0.01, -0.01, 0.0, 0.005, -0.005, 0.0], y, range(6), factor="a", level="x",
                           baseline="b", min_effect=0.05)
    big = paired_contrast(y + [0.2, 0.21, 0.19, 0.2, 0.22, 0.18], y, range(6), factor="c", level="z", baseline="d",
                          min_effect=0.05)
    return make_family([flat, big], min_effect=0.05)


def test_an_equivalence_where_the_baseline_did_not_learn_is_uninformative_and_nothing_else_changes():
    from ablate.stats.inference import DETECTED, EQUIVALENT, UNINFORMATIVE

    family = _family()
    assert [c.verdict for c in family.claims] == [EQUIVALENT, DETECTED]
    (learned,) = C.learning_gain(curves({"base": BASE}), "base", min_effect=0.05)
    (flat,) = C.learning_gain(curves({"base": _gains([0.05, -0.03, 0.02, 0.0])}), "base", min_effect=0.05)
    assert C.judged(family, [learned]) is family  # learned: every verdict stands
    out = C.judged(family, [flat])
    assert [c.verdict for c in out.claims] == [UNINFORMATIVE, DETECTED]
    assert out.claims[0].reason.startswith("the baseline did not learn (positive control: gain +0.01 [")
    assert [c.p_holm for c in out.claims] == [c.p_holm for c in family.claims] and out.size == family.size
    none = C.judged(family, None)  # no curves.csv: cannot be told, so no evidence either
    assert none.claims[0].verdict == UNINFORMATIVE and "cannot be told" in none.claims[0].reason
    # a context study: evidence only when the baseline learned in every context
    both = [replace(learned, context="task=x"), replace(flat, context="task=y")]
    mixed = C.judged(family, both)
    assert mixed.claims[0].verdict == UNINFORMATIVE
    assert mixed.claims[0].reason == "the baseline learned in 1 of the 2 contexts (did not learn in 1 (task=y))"
    assert C.judged(family, [replace(learned, context="task=x"), replace(learned, context="task=y")]) is family


def test_an_equivalence_across_contexts_needs_the_baseline_to_learn_in_every_pooled_context():
    from ablate.report.statistics import AcrossContexts
    from ablate.stats import meta
    from ablate.stats.inference import UNINFORMATIVE

    frame = pd.DataFrame({"context": ["task=x", "task=y"]})
    eq = AcrossContexts("a: x vs b", True, frame, None, meta.EQUIVALENT, "pooled +0.1 points")
    dep = AcrossContexts("c: z vs d", True, frame, None, meta.CONTEXT_DEPENDENT, "opposite")
    (learned,) = C.learning_gain(curves({"base": BASE}), "base", min_effect=0.05)
    (flat,) = C.learning_gain(curves({"base": _gains([0.05, -0.03, 0.02, 0.0])}), "base", min_effect=0.05)
    good = [replace(learned, context="task=x"), replace(learned, context="task=y")]
    assert C.judged_across([eq, dep], good) == (eq, dep)
    out = C.judged_across([eq, dep], [good[0], replace(flat, context="task=y")])
    assert out[0].verdict == UNINFORMATIVE and out[1] == dep
    assert out[0].reason.startswith("pooled +0.1 points; but the baseline learned in 1 of the 2 contexts")
    # a pooled context without a control (not in curves) cannot count as learned
    assert C.judged_across([eq], good[:1])[0].verdict == UNINFORMATIVE
    assert C.judged_across([eq], None)[0].verdict == UNINFORMATIVE


@pytest.mark.parametrize("report", ["generalization", "generalization_scale"])
def test_a_context_study_has_one_verdict_per_contrast_wherever_it_is_printed(report):
    """Issue 54: a context study's claim is its verdict across contexts, the same word in ablate.load(...).claims,
    the report's evidence block, docs/findings.md's claims table and its scope table, and README's 'does a verdict
    travel' line; generalization's token-mean equivalence is uninformative (its baseline learned in 12 of 15)."""
    import ablate
    from ablate.report.markdown import md

    claims = ablate.load(REPORTS / report).claims
    assert claims["contexts"].notna().all() and (claims["method"].str.contains("Hartung-Knapp")).all()
    block = (REPORTS / report / "README.md").read_text(encoding="utf-8")
    findings = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    travels = readme[readme.index("Does a verdict travel?"):]
    k = int(claims["contexts"].max())
    for r in claims.itertuples():
        seeds = f"{int(r.n)} × {int(r.contexts)} contexts"
        assert f"| {md(r.claim)} ★ | {seeds} |" in block and f"| {r.verdict} |" in block
        row = next(line for line in findings.splitlines() if line.startswith(f"| {md(report)} | {md(r.claim)} ★ |"))
        assert f"| {r.verdict} |" in row
        scope = next(line for line in findings.splitlines()
                     if f"| {r.claim} ★ | {report} | {int(r.contexts)}:" in line)
        assert f"| **{r.verdict}** |" in scope
        assert f"{r.verdict} ({k} contexts, {report})" in travels
    if report == "generalization":
        verdicts = dict(zip(claims["claim"], claims["verdict"]))
        assert verdicts["loss_norm: token vs sequence"] == "uninformative"


def test_ablate_load_gives_a_context_study_s_table_per_context_with_its_pooled_and_new_context_rows():
    import ablate

    res = ablate.load(REPORTS / "generalization")
    t = res.contexts
    assert list(t.columns) == ["claim", "row", "seeds", "estimate", "ci_low", "ci_high", "verdict"]
    assert len(t) == 3 * (15 + 2) and set(t["claim"]) == set(res.claims["claim"])
    pooled = t[t["row"] == "pooled"].set_index("claim")
    claims = res.claims.set_index("claim")
    assert (pooled["verdict"] == claims.loc[pooled.index, "verdict"]).all()
    assert_close(pooled["estimate"].to_numpy(float), claims.loc[pooled.index, "estimate"].to_numpy(float), EXACT)
    assert (pooled["seeds"] == 75).all()  # 5 seeds x 15 contexts
    assert ablate.load(REPORTS / "ratio_level").contexts.empty
