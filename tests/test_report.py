"""The report on synthetic results: planted effects and interactions found (and absent ones not) over
several random draws, findings as sentences with numbers, escaping of user strings, every file
written, and headless Chromium rendering index.html with every image loaded."""

from __future__ import annotations

import base64
import html
import itertools
import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from ablate.analysis import saturating_curve
from ablate.report.build import ReportData, Scale, analyse, comparison_sentence, metric_unit, write_report
from ablate.report.figures import pareto_front
from ablate.report.html import render_html
from ablate.report.markdown import md
from ablate.results import Results, build_table, level_column
from ablate.study import load_study
from ablate.tracking import history_csv

STUDY = """\
name: synth
description: 'Planted effects; <img src=x onerror=alert(1)> & <b>bold</b>'
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      <script>alert(1)</script>: {loss.aggregation: token-mean}
  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}
seeds: 6
baseline: {loss_norm: sequence, clip_high: 0.2}
objective: {metric: eval/accuracy, mode: max, summary: last, last_n: 2}
"""
TOKEN = "<script>alert(1)</script>"  # the name of the second loss_norm level


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "synth.yaml"
    path.write_text(STUDY)
    return load_study(path)


def synthetic(study, rng: np.random.Generator, *, effect: float = 0.1, interaction: float = 0.0,
              steps: int = 16) -> Results:
    """Results of every trial: eval/accuracy rises on a saturating curve of the generated tokens to an
    asymptote 0.6, + ``effect`` for the second loss_norm level, + ``interaction`` for that level
    together with clip_high 0.28, nothing for clip_high alone; seed offsets shared by a seed's arms.
    Training metrics (KL, reward, lengths, entropy, clipping, gradient norm) come along."""
    histories = {}
    specs = study.expand("default")
    offsets = {s: rng.normal(0, 0.03) for s in study.seeds}
    for spec in specs:
        token = spec.levels["loss_norm"] == TOKEN
        top = 0.6 + offsets[spec.seed] + effect * token + interaction * (token and spec.levels["clip_high"] == "0.28")
        tokens, rows = 0.0, []
        for step in range(steps + 1):
            m = {"compute/tokens": tokens}
            if step % 2 == 0:
                m["eval/accuracy"] = float(saturating_curve(tokens, 0.1, top, 1.5, 8e3)) + rng.normal(0, 0.01)
            if step > 0:
                m.update({
                    "policy/kl_ref": 0.01 * step * (1 + rng.normal(0, 0.1)), "reward/total": top * step / steps,
                    "response/length_correct": 20 + rng.normal(0, 1),
                    "response/length_incorrect": 25 + step * (not token) + rng.normal(0, 1),
                    "policy/entropy": 1 - 0.02 * step, "policy/clip_frac_low": 0.01, "policy/clip_frac_high": 0.02,
                    "optim/grad_norm": 1 + rng.normal(0, 0.1),
                })
            rows.append((step, m))
            tokens += 1000 * (1 + rng.normal(0, 0.05))
        histories[spec.key] = history_csv(rows)
    cols = {f.name: level_column(f.name) for f in study.factors}
    trials = pd.DataFrame([{"key": s.key, "arm": s.arm, "seed": s.seed, **{cols[f]: s.levels[f] for f in cols},
                            "state": "done", "run_id": "", "error": ""} for s in specs])
    table = build_table(study.name, "default", histories, trials, list(cols.values()))
    samples = {s.key: [{"prompt": "What is 2+2?", "completion": "<answer>4</answer>", "correct": True,
                        "reward/final_answer": 1.0, "reward/format": 0.5}] for s in specs}
    return Results(study.name, "default", list(cols), cols, table, trials, samples=samples,
                   parent={"ablate.version.ablate": "0.1.0", "ablate.git_commit": "abc123", "ablate.git_dirty": "false"})


FAST = {"n_boot": 500, "fit_boot": 10}


# ---------------------------------------------------------------------------------------- findings


def test_sentence_format_hand_example():
    row = {"factor": "loss_norm", "level": "token-mean", "baseline": "seq-mean-token-mean", "n_seeds": 5,
           "diff": 0.031, "ci_low": 0.004, "ci_high": 0.059, "p_holm": 0.02, "prob_improvement": 0.84,
           "hedges_g": 1.26, "ci_excludes_zero": True, "detected": True, "improved": True, "seeds_needed": 4.0}
    scale = Scale(100.0, "points")
    assert comparison_sentence(row, scale, "eval/accuracy", "max") == (
        "loss_norm: token-mean vs seq-mean-token-mean: +3.1 points [0.4, 5.9] in eval/accuracy (better), "
        "p = 0.02 (Holm), P(improvement) = 0.84, Hedges' g = 1.3, 5 seeds.")
    null = {**row, "diff": 0.004, "ci_low": -0.02, "ci_high": 0.03, "p_holm": 0.71, "ci_excludes_zero": False,
            "detected": False, "improved": False, "seeds_needed": 40.0}
    assert comparison_sentence(null, scale, "eval/accuracy", "max") == (
        "loss_norm: token-mean vs seq-mean-token-mean: no detectable effect (+0.4 points [-2, 3] in eval/accuracy, "
        "p = 0.71 (Holm), P(improvement) = 0.84, Hedges' g = 1.3, 5 seeds); about 40 seeds would resolve a "
        "difference of this size.")
    worse = {**row, "diff": -0.031, "ci_low": -0.059, "ci_high": -0.004, "improved": False}
    assert "+" not in comparison_sentence(worse, scale, "m", "max") and "(worse)" in comparison_sentence(
        worse, scale, "m", "max")
    unsure = {**worse, "p_holm": 0.2, "detected": False}
    assert comparison_sentence(unsure, scale, "m", "max").startswith(
        "loss_norm: token-mean vs seq-mean-token-mean: inconclusive: -3.1 points [-5.9, -0.4] in m; the interval "
        "excludes 0 but the difference is not significant after Holm's correction (p = 0.2 (Holm)")
    same = {**null, "diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    assert comparison_sentence(same, scale, "m", "max") == (
        "loss_norm: token-mean vs seq-mean-token-mean: no detectable effect: m was identical on all 5 seeds.")
    one = {**row, "n_seeds": 1, "ci_low": math.nan, "ci_high": math.nan}
    assert "no interval can be computed from one seed" in comparison_sentence(one, scale, "m", "max")


def test_units_come_from_the_metric_glossary():
    assert metric_unit("eval/accuracy") == "fraction" and metric_unit("policy/kl_ref") == "nats"
    assert metric_unit("reward/final_answer") == "reward" and metric_unit("reward/accuracy") == "fraction"
    assert metric_unit("eval/pass_at_8") == "fraction" and metric_unit("no/such") is None
    assert Scale.of("eval/accuracy") == Scale(100.0, "points") and Scale.of("policy/kl_ref") == Scale(1.0, "nats")


@pytest.mark.parametrize("draw", range(3))
def test_report_finds_the_planted_effect_and_calls_the_other_not_detectable(study, draw):
    res = synthetic(study, np.random.default_rng(draw), effect=0.1)
    an = analyse(study, res, seed=draw, **FAST)
    by_factor = an.comparisons.set_index("factor")
    assert by_factor.loc["loss_norm", "detected"] and by_factor.loc["loss_norm", "ci_low"] > 0
    assert not by_factor.loc["clip_high", "detected"]
    planted, null = an.data.findings
    d = by_factor.loc["loss_norm"]
    assert planted.startswith(f"loss_norm: {TOKEN} vs sequence: +{d['diff'] * 100:.3g} points "
                              f"[{d['ci_low'] * 100:.3g}, {d['ci_high'] * 100:.3g}] in eval/accuracy (better), ")
    assert "(Holm)" in planted and "no detectable effect" not in planted
    assert null.startswith("clip_high: 0.28 vs 0.2: no detectable effect (")
    assert an.data.interaction_findings[0].startswith("interaction loss_norm × clip_high: no detectable interaction")
    assert len(an.data.compute_findings) == 4 and all("asymptote A = " in s for s in an.data.compute_findings)


@pytest.mark.parametrize("draw", range(2))
def test_report_finds_a_planted_interaction(study, draw):
    res = synthetic(study, np.random.default_rng(10 + draw), effect=0.0, interaction=0.08)
    an = analyse(study, res, seed=draw, **FAST)
    (sentence,) = an.data.interaction_findings
    assert sentence.startswith("interaction loss_norm × clip_high: F(1, 15) = ")
    assert "the effect of one factor depends on the level of the other" in sentence
    assert an.anova.set_index("term").loc["loss_norm:clip_high", "p"] < 0.01


def test_a_partial_study_with_nothing_finished_still_reports(study, tmp_path):
    res = synthetic(study, np.random.default_rng(0))
    res.trials["state"] = "not started"
    res.table = res.table.iloc[0:0]
    res.samples = {}
    index = write_report(study, res, tmp_path, **FAST)
    text = index.read_text()
    assert "No trial has finished yet" in text and "Missing trials" in text and "<img" not in text


# -------------------------------------------------------------------------------------- full report


@pytest.fixture(scope="module")
def report(study, tmp_path_factory):
    res = synthetic(study, np.random.default_rng(42))
    res.study = '<script>alert("name")</script>'  # a name no study file allows: the renderer must still escape it
    out = tmp_path_factory.mktemp("report")
    index = write_report(study, res, out, n_boot=500, fit_boot=20, figure_boot=100)
    return index


FIGURES = ["learning_curves", "final_by_level", "interactions", "arm_heatmap", "response_length", "reward_vs_kl",
           "diagnostics", "compute_efficiency"]


def test_every_file_is_written(report):
    out = report.parent
    for name in FIGURES:
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    summary = pd.read_csv(out / "results.csv")
    assert len(summary) == 24 and {"objective", "eval/accuracy", "loss_norm", "clip_high"} <= set(summary.columns)
    tidy = pd.read_csv(out / "tidy.csv.gz")
    assert {"study", "key", "arm", "seed", "step", "tokens", "metric", "value"} <= set(tidy.columns)


def test_html_embeds_every_figure_as_png(report):
    text = report.read_text()
    srcs = re.findall(r'<img src="([^"]+)"', text)
    assert len(srcs) == len(FIGURES)
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in text and "https://" not in text and "<link" not in text  # nothing to fetch


def test_user_strings_are_escaped(report, study):
    text = report.read_text()
    assert "<script" not in text.lower()  # the study name and the level name, both escaped
    assert "&lt;script&gt;alert(&quot;name&quot;)&lt;/script&gt;" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text and "<b>bold</b>" not in text
    assert "&lt;answer&gt;4&lt;/answer&gt;" in text  # a sample completion
    readme = (report.parent / "README.md").read_text()
    # code blocks (the study file, the configuration) show their text verbatim; outside them, nothing raw
    fenced = re.findall(r"^(`{3,})yaml\n.*?^\1$", readme, flags=re.S | re.M)
    assert len(fenced) == 2
    prose = re.sub(r"^(`{3,})yaml\n.*?^\1$", "", readme, flags=re.S | re.M)
    assert "<script" not in prose.lower() and "<img src=x" not in prose and "<answer>" not in prose
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in prose
    # a page of nothing but markup in every field renders it as text
    page = render_html(ReportData(study="<i>x</i>", description="<u>d</u>", budget="<s>b</s>", objective="<o>",
                                  generated="<g>", counts={}, findings=["<em>f</em>"], notes=["<n>"]))
    assert not re.search(r"<(i|u|s|o|g|em|n)>", page)
    assert "&lt;i&gt;x&lt;/i&gt;" in page and "&lt;em&gt;f&lt;/em&gt;" in page


def test_both_pages_state_the_same_findings(report):
    text = html.unescape(report.read_text())
    readme = (report.parent / "README.md").read_text()
    findings = re.findall(r'<li class="finding">(.*?)</li>', report.read_text())
    assert len(findings) == 2 + 1 + 4  # two comparisons, one interaction, four compute fits
    for f in findings:
        assert f"- {md(html.unescape(f))}" in readme
    for section in ("Design", "Configuration", "Sample completions", "Versions", "Analysis of variance",
                    "Objective per arm", "Levels against the baseline level", "Compute efficiency (saturating fits)"):
        assert section in text and section in readme
    assert "git commit: abc123" in text and "loss.aggregation: seq-mean-token-mean" in text
    assert "![Learning curves](learning_curves.png)" in readme


def test_pareto_front_hand_example():
    # (kl, reward): a=(0.1, 0.5) b=(0.2, 0.7) c=(0.3, 0.6) dominated by b, d=(0.05, 0.2)
    assert pareto_front([0.1, 0.2, 0.3, 0.05], [0.5, 0.7, 0.6, 0.2]) == [3, 0, 1]


# ------------------------------------------------------------------------------------------ browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]
PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.setAttribute('data-images', ok + '/' + imgs.length);
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)")
def test_chromium_renders_the_page_with_every_image_loaded(report, tmp_path):
    import matplotlib.image

    shot = tmp_path / "shot.png"
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1200,3000", report.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (3000, 1200)
    assert (pixels.min(axis=2) < 0.9).mean() > 0.02 and pixels.std() > 0.05  # text and figures, not blank
    # the same page with a probe that counts the loaded images (the report itself has no script)
    probe = report.parent / "probe.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    try:
        dom = subprocess.run([*common, "--dump-dom", "--virtual-time-budget=10000", probe.resolve().as_uri()],
                             check=True, capture_output=True, text=True, timeout=120).stdout
    finally:
        probe.unlink()
    assert f'data-images="{len(FIGURES)}/{len(FIGURES)}"' in dom


def test_figures_have_labelled_axes(study):
    """The axes say what they show, with the objective's unit; levels keep the study's order."""
    from ablate.report import figures as figs

    res = synthetic(study, np.random.default_rng(3))
    an = analyse(study, res, **FAST)
    fig = figs.learning_curves(res.table, "eval/accuracy", an.factors, levels=an.levels, unit="fraction", n_boot=50)
    for ax in fig.axes:
        assert ax.get_xlabel() == "step (RL updates)" and ax.get_ylabel() == "eval/accuracy (fraction)"
        assert [t.get_text() for t in ax.get_legend().get_texts()] in (["sequence", TOKEN], ["0.2", "0.28"])
    fig = figs.final_by_level(an.per_trial, an.factors, metric="eval/accuracy", levels=an.levels, unit="fraction",
                              n_boot=50)
    assert [ax.get_xlabel() for ax in fig.axes] == ["level of loss_norm", "level of clip_high"]
    assert {ax.get_ylabel() for ax in fig.axes} == {"eval/accuracy (fraction)"}
    assert list(itertools.chain(*[[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes])) == [
        "sequence", TOKEN, "0.2", "0.28"]
    fig = figs.diagnostics(res.table, an.factors, n_boot=50)
    assert [ax.get_ylabel() for ax in fig.axes] == ["entropy (nats)", "", "clipped (low + high) (fraction)", "",
                                                    "grad norm (L2 norm)", ""]


# ------------------------------------------------------------------- report.metrics and provenance


def test_report_metrics_are_compared_without_a_direction_and_the_command_is_shown(tmp_path):
    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "report: {metrics: [response/length_incorrect, response/length_correct]}\n")
    study = load_study(path)
    assert study.report_metrics == ("response/length_incorrect", "response/length_correct")
    res = synthetic(study, np.random.default_rng(3))
    res.parent["ablate.command"] = "ablate run studies/synth.yaml --workers 2"
    an = analyse(study, res, **FAST)
    found = an.data.secondary_findings
    # planted: incorrect completions of the sequence level grow by one token a step (to ~40 tokens at the
    # end); the token level's stay at ~25; correct completions' lengths do not differ
    incorrect = next(s for s in found if "loss_norm" in s and "length_incorrect" in s)
    diff = float(re.search(r": (-\d+(\.\d+)?) tokens \[", incorrect).group(1))
    assert -17 < diff < -13 and incorrect.endswith("6 seeds.") and "(lower)" in incorrect
    assert "better" not in " ".join(found) and "worse" not in " ".join(found)
    correct = next(s for s in found if "loss_norm" in s and "length_correct" in s)
    assert "no detectable effect" in correct
    assert an.data.provenance == {"produced by": "ablate run studies/synth.yaml --workers 2",
                                  "at commit": "abc123"}
    index = write_report(study, res, tmp_path / "out", figure_boot=50, **FAST)
    readme = (index.parent / "README.md").read_text()
    head = readme.split("## Findings")[0]
    assert "produced by: `ablate run studies/synth.yaml --workers 2` · at commit: `abc123`" in head
    assert "### Secondary metrics (diagnostics)" in readme and f"- {md(incorrect)}" in readme
    assert "Secondary metrics against the baseline level" in index.read_text()


def test_an_unknown_report_metric_is_named_with_the_nearest_one(tmp_path):
    from ablate.study import StudyError

    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "report:\n  metrics: [response/length_incorect]\n")
    with pytest.raises(StudyError) as err:
        load_study(path)
    text = str(err.value)
    assert f"{path}:13: report.metrics[0]: unknown metric 'response/length_incorect'" in text
    assert "did you mean 'response/length_incorrect'?" in text
