"""The report on synthetic results: planted effects and interactions found (and absent ones not) over
several random draws, findings as sentences with numbers, escaping of user strings, every file
written, and headless Chromium rendering index.html with every image loaded."""

from __future__ import annotations

import base64
import html
import itertools
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.report.build import write_report
from ablate.report.figures import pareto_front
from ablate.report.findings import claim_sentence, phrase
from ablate.report.html import render_html
from ablate.report.markdown import md
from ablate.report.page import ReportPage, Section
from ablate.report.shared import computation_key, seed_ranges
from ablate.report.statistics import Scale, compute_statistics, metric_unit
from ablate.stats import inference as inf
from ablate.stats.analysis import saturating_curve
from ablate.stats.contrast import Contrast, Improvement
from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.tracking import history_csv
from ablate.tracking.results import Results, build_table, level_column

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
    specs = Plan.of(study, "default").specs
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
                   parent={"ablate.version.ablate": "0.1.0", "ablate.git_commit": "abc123", "ablate.git_dirty": "false",
                           "ablate.machine.cpu": "Test CPU 9000", "ablate.machine.cpu_capability": "AVX2"})


FAST = {"fit_boot": 10}
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------- findings


def _contrast(**kw):
    base = dict(factor="loss_norm", level="token-mean", baseline="seq-mean", method=inf.PAIRED, n_seeds=5, cells=1,
                level_mean=0.6, baseline_mean=0.569, estimate=0.031, se=0.01, df=4.0, ci_low=0.004, ci_high=0.059,
                p=0.02, p_tost=math.nan, seeds=(0, 1, 2, 3, 4), per_seed=(0.02, 0.03, 0.04, 0.03, 0.035),
                d_z=1.26, improved=Improvement(5, 5, 1.0, 0.478, 1.0))
    return Contrast(**{**base, **kw})


def test_claim_sentences_hand_examples():
    scale = Scale(100.0, "points")
    fam = inf.Family((), 3, 0.05, None, inf.PAIRED, 5)
    c = _contrast()
    det = inf.Claim(c.name, c, None, 0.04, math.nan, inf.DETECTED, "", 8.0, True)
    assert claim_sentence(det, fam, scale, "max") == (
        "loss_norm: token-mean vs seq-mean: detected: +3.1 points [0.4, 5.9] (95% paired t-interval over 5 seeds "
        "(4 df); p = 0.04 (Holm over a family of 3); d_z = 1.3; higher on 5 of 5 untied seeds (exact 95% interval "
        "of the fraction [47.8, 100]%)).")
    fam_me = inf.Family((), 3, 0.05, 0.02, inf.PAIRED, 5)
    eq = inf.Claim(c.name, _contrast(estimate=0.001, ci_low=-0.01, ci_high=0.012), None, 0.9, 0.01, inf.EQUIVALENT,
                   "", 8.0, False)
    assert claim_sentence(eq, fam_me, scale, "max") == (
        "loss_norm: token-mean vs seq-mean: equivalent: no effect as large as ±2 points (+0.1 points [-1, 1.2]; "
        "TOST p = 0.01, Holm over a family of 3; 95% paired t-interval over 5 seeds (4 df)).")
    nr = inf.Claim(c.name, _contrast(ci_low=-0.01, ci_high=0.07), None, 0.3, 0.6, inf.NOT_RESOLVED,
                   "the interval includes 0 and reaches beyond the ±min_effect band", 12.0, False)
    text = claim_sentence(nr, fam_me, scale, "max")
    assert text.startswith("loss_norm: token-mean vs seq-mean: not resolved at 5 seeds: +3.1 points [-1, 7] (")
    assert text.endswith("; the interval includes 0 and reaches beyond the ±min_effect band; about 12 seeds would give 80% power "
                         "for a difference of 2 points (the study's min_effect).")
    two = _contrast(n_seeds=2, seeds=(0, 1), per_seed=(0.01, 0.05), ci_low=math.nan, ci_high=math.nan, df=1.0)
    few = inf.Claim(c.name, two, None, math.nan, math.nan, inf.NOT_RESOLVED, "2 seeds", 20.0, False)
    assert claim_sentence(few, fam, scale, "max").startswith(
        "loss_norm: token-mean vs seq-mean: not resolved at 2 seeds: per-seed differences +1, +5 points; no interval "
        "is given below 3 seeds; about 20 seeds")
    for sentence in (claim_sentence(x, fam_me, scale, "max") for x in (det, eq, nr, few)):
        assert not re.search(r"\b(significant|inconclusive|better|worse|no detectable)\b", sentence)


def test_units_come_from_the_metric_glossary():
    assert metric_unit("eval/accuracy") == "fraction" and metric_unit("policy/kl_ref") == "nats"
    assert metric_unit("reward/final_answer") == "reward" and metric_unit("reward/accuracy") == "fraction"
    assert metric_unit("eval/pass_at_8") == "fraction" and metric_unit("no/such") is None
    assert Scale.of("eval/accuracy") == Scale(100.0, "points") and Scale.of("policy/kl_ref") == Scale(1.0, "nats")


@pytest.mark.parametrize("draw", range(3))
def test_report_finds_the_planted_effect_and_leaves_the_null_one_unresolved(study, draw):
    res = synthetic(study, np.random.default_rng(draw), effect=0.1)
    stats = compute_statistics(study, res, seed=draw, **FAST)
    fam = stats.inference.family
    assert stats.inference.method == inf.PAIRED and fam.size == 3  # two contrasts and one interaction
    by = {c.name: c for c in fam.claims}
    planted, null = by[f"loss_norm: {TOKEN} vs sequence"], by["clip_high: 0.28 vs 0.2"]
    assert planted.verdict == inf.DETECTED and planted.contrast.ci_low > 0
    assert null.verdict == inf.NOT_RESOLVED  # no min_effect: equivalence cannot be claimed
    findings = phrase(stats)
    items = [s for sec in findings.sections for s in sec.items]
    c = planted.contrast
    assert f"loss_norm: {TOKEN} vs sequence: detected: +{c.estimate * 100:.3g} points " \
           f"[{c.ci_low * 100:.3g}, {c.ci_high * 100:.3g}] (95% paired t-interval over 6 seeds (5 df, each seed's " \
           "difference averaged over 2 matched cells); " in " ".join(items)
    assert any(s.startswith("clip_high: 0.28 vs 0.2: not resolved at 6 seeds: ") for s in items)
    assert any(s.startswith("interaction loss_norm × clip_high: not resolved: paired t-test of the per-seed interaction "
                            "contrast (F = t²): F(1, 5) = ") for s in items)
    assert sum("asymptote A = " in s for s in items) == 4


@pytest.mark.parametrize("draw", range(2))
def test_report_finds_a_planted_interaction(study, draw):
    res = synthetic(study, np.random.default_rng(10 + draw), effect=0.0, interaction=0.08)
    stats = compute_statistics(study, res, seed=draw, **FAST)
    (term,) = [c for c in stats.inference.family.claims if c.term is not None]
    assert term.verdict == inf.DETECTED and term.term.df == 1 and term.term.df_resid == 5
    sentence = claim_sentence(term, stats.inference.family, stats.scale, "max")
    assert sentence.startswith("interaction loss_norm × clip_high: detected: paired t-test of the per-seed interaction "
                               "contrast (F = t²): F(1, 5) = ")
    assert "the effect of one factor depends on the level of the other" in sentence


def test_primary_contrast_and_min_effect_give_a_headline_and_equivalence(tmp_path):
    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "primary: [clip_high]\nmin_effect: 0.03\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1)
    stats = compute_statistics(study, res, **FAST)
    fam = stats.inference.family
    assert [c.name for c in fam.primary] == ["clip_high: 0.28 vs 0.2"] and fam.claims[0].primary
    # clip_high has no effect; the paired noise is ~1 point, so the interval lies inside ±3 points
    assert fam.primary[0].verdict == inf.EQUIVALENT
    first = phrase(stats).sections[0]
    assert first.title == "Primary contrasts"
    assert first.items[0].startswith("clip_high: 0.28 vs 0.2: equivalent: no effect as large as ±3 points")


def test_two_seeds_give_no_interval_and_say_what_would(tmp_path):
    path = tmp_path / "synth.yaml"
    path.write_text(STUDY.replace("seeds: 6", "seeds: 2") + "primary: [loss_norm]\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(1), effect=0.1)
    stats = compute_statistics(study, res, **FAST)
    fam = stats.inference.family
    assert fam.size == 0 and all(c.verdict == inf.NOT_RESOLVED for c in fam.claims)
    assert all(math.isnan(c.contrast.ci_low) for c in fam.claims if c.contrast is not None)
    first = phrase(stats).sections[0]
    assert first.items[0].startswith("This study could not answer its primary question at 2 seeds")
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    assert (index.parent / "claims.png").is_file()


def test_a_demo_s_report_opens_with_the_demo_line_and_has_no_evidence_block(tmp_path):
    """evidence: false (the quickstart): the report is the reader's own run, never a ledger input (issue 53)."""
    from ablate.report.findings import DEMO_LINE
    from ablate.report.ledger import BEGIN, report_folders

    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "evidence: false\n")
    study = load_study(path)
    assert study.evidence is False
    res = synthetic(study, np.random.default_rng(1), effect=0.1)
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "reports" / "synth", **FAST)
    readme = (index.parent / "README.md").read_text(encoding="utf-8")
    assert readme.split("## Findings\n\n<!-- ablate:answer:begin -->\n", 1)[1].startswith(f"- {DEMO_LINE}")
    assert BEGIN not in readme and BEGIN not in index.read_text(encoding="utf-8")
    assert report_folders(tmp_path / "reports") == []


def test_a_partial_study_with_nothing_finished_still_reports(study, tmp_path):
    res = synthetic(study, np.random.default_rng(0))
    res.trials["state"] = "pending"
    res.table = res.table.iloc[0:0]
    res.samples = {}
    index = write_report(Plan.of(study, res.budget), res, tmp_path, **FAST)
    text = index.read_text()
    assert "No trial has finished yet" in text and "Missing trials" in text and "<img" not in text


# -------------------------------------------------------------------------------------- full report


@pytest.fixture(scope="module")
def report(study, tmp_path_factory):
    res = synthetic(study, np.random.default_rng(42))
    res.study = '<script>alert("name")</script>'  # a name no study file allows: the renderer must still escape it
    out = tmp_path_factory.mktemp("report")
    index = write_report(Plan.of(study, res.budget), res, out, fit_boot=20, formats=("png", "svg"))
    return index


FIGURES = ["claims", "paired_seeds", "learning_curves", "interactions", "arm_heatmap", "response_length",
           "reward_vs_kl", "diagnostics", "compute_efficiency"]


def test_every_file_is_written(report):
    out = report.parent
    for name in FIGURES:
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    summary = pd.read_csv(out / "results.csv")
    assert len(summary) == 24 and {"objective", "eval/accuracy", "loss_norm", "clip_high"} <= set(summary.columns)
    assert (out / "samples.json").is_file()
    tidy = pd.read_csv(out / "tidy.csv.gz")
    assert {"study", "key", "arm", "seed", "step", "tokens", "metric", "value"} <= set(tidy.columns)


def test_the_files_section_links_only_what_a_committed_report_keeps(report):
    """The Files section of both pages links every file of the folder a committed report keeps, and names the
    ones the repository's .gitignore leaves out of reports/<study>/ (tidy.csv.gz, problems.csv.gz,
    samples.json, the SVG copies) without a link, saying where else they are."""
    import fnmatch

    out = report.parent
    patterns = [line.strip()[len("reports/*/"):] for line in (ROOT / ".gitignore").read_text().splitlines()
                if line.strip().startswith("reports/*/") and not line.strip().endswith("/")]
    assert {"tidy.csv.gz", "problems.csv.gz", "samples.json", "*.svg"} <= set(patterns)
    written = sorted(p.name for p in out.iterdir() if p.is_file() and p.name not in ("README.md", "index.html"))
    ignored = [n for n in written if any(fnmatch.fnmatch(n, pat) for pat in patterns)]
    assert "tidy.csv.gz" in ignored and "samples.json" in ignored and "claims.svg" in ignored
    readme = (out / "README.md").read_text()
    files_md = readme.split("### Files", 1)[1]
    files_html = report.read_text().split("<h3>Files</h3>", 1)[1]
    linked_md = re.findall(r"\]\(([^)]+)\)", files_md)
    linked_html = re.findall(r'href="([^"]+)"', files_html)
    assert linked_md == linked_html and linked_md
    assert set(linked_md) == set(written) - set(ignored)  # every kept file linked, every linked file kept
    assert all((out / f).is_file() for f in linked_md)
    for name in ignored:
        assert md(name) in files_md and html.escape(name) in files_html
    assert "the study's MLflow parent run (artifacts report/)" in files_md
    assert html.escape("the study's MLflow parent run (artifacts report/)") in files_html


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
    page = render_html(ReportPage(study="<i>x</i>", description="<u>d</u>", budget="<s>b</s>", objective="<o>",
                                  generated="<g>", counts={}, sections=(Section("<h>", ("<em>f</em>",), "<p>"),),
                                  notes=("<n>",)))
    assert not re.search(r"<(i|u|s|o|g|em|n)>", page)
    assert "&lt;i&gt;x&lt;/i&gt;" in page and "&lt;em&gt;f&lt;/em&gt;" in page


def test_both_pages_state_the_same_findings(report):
    text = html.unescape(report.read_text())
    readme = (report.parent / "README.md").read_text()
    findings = re.findall(r'<li class="finding">(.*?)</li>', report.read_text())
    # the study's question (no primary, no min_effect), two contrasts, one interaction, four compute fits
    assert len(findings) == 2 + 2 + 1 + 4
    for f in findings:
        assert f"- {md(html.unescape(f))}" in readme
    for section in ("Design", "Configuration", "Sample completions", "Versions", "Analysis of variance (Type II)",
                    "Objective per arm", "Claims (one family)", "Compute efficiency (saturating fits)"):
        assert section in text and section in readme
    assert "git commit: abc123" in text and "loss.aggregation: seq-mean-token-mean" in text
    assert "machine.cpu: Test CPU 9000" in text and "AVX2" in readme  # the processor, beside the versions
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
    an = compute_statistics(study, res, **FAST)
    fig = figs.learning_curves(res.table, "eval/accuracy", an.factors, levels=an.levels, unit="fraction")
    for ax in fig.axes:
        assert ax.get_xlabel() == "step (RL updates)" and ax.get_ylabel() == "eval/accuracy (fraction)"
        assert [t.get_text() for t in ax.get_legend().get_texts()] in (["sequence", TOKEN], ["0.2", "0.28"])
    fig = figs.paired_seed_lines(an.per_trial, an.factors, metric="eval/accuracy", levels=an.levels, unit="fraction")
    assert all(len(ax.lines) >= 6 for ax in fig.axes)  # one line per seed
    assert [ax.get_xlabel() for ax in fig.axes] == ["level of loss_norm", "level of clip_high"]
    assert {ax.get_ylabel() for ax in fig.axes} == {"eval/accuracy (fraction)"}
    assert list(itertools.chain(*[[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes])) == [
        "sequence", TOKEN, "0.2", "0.28"]
    fig = figs.diagnostics(res.table, an.factors)
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
    done = res.trials["state"] == "done"  # the processor and commit of each trial's run (results.py)
    res.trials["cpu"] = np.where(done & (res.trials["seed"] == 0), "AMD EPYC 7B13", "Intel Xeon @ 2.80GHz")
    res.trials["commit"] = "abc123"
    stats = compute_statistics(study, res, **FAST)
    diag = {d.metric: {c.name: c.contrast for c in d.inference.family.claims if c.contrast} for d in stats.diagnostics}
    # planted: incorrect completions of the sequence level grow by one token a step (to ~40 tokens at the
    # end); the token level's stay at ~25; correct completions' lengths do not differ
    incorrect = diag["response/length_incorrect"][f"loss_norm: {TOKEN} vs sequence"]
    assert -17 < incorrect.estimate < -13 and incorrect.n_seeds == 6 and incorrect.ci_high < 0
    correct = diag["response/length_correct"][f"loss_norm: {TOKEN} vs sequence"]
    assert correct.ci_low < 0 < correct.ci_high
    assert stats.inference.family.size == 3  # the diagnostics are not claims of the family
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    readme = (index.parent / "README.md").read_text()
    # the provenance follows the answer (and the positive control under it), before the details
    head = readme.split("<!-- ablate:control:end -->")[1].split("### ")[0]
    assert "produced by: `ablate run studies/synth.yaml --workers 2` · at commit: `abc123`" in head
    n0, n = int((done & (res.trials["seed"] == 0)).sum()), int(done.sum())
    assert (f"trials: `ran on AMD EPYC 7B13 ({n0} trials); Intel Xeon @ 2.80GHz ({n - n0} trials), at commit abc123 "
            f"({n} trials)`") in head
    written = pd.read_csv(index.parent / "results.csv")
    assert set(written["commit"]) == {"abc123"} and "AMD EPYC 7B13" in set(written["cpu"])
    assert "Diagnostics against the baseline level" in readme and "Diagnostics against the baseline level" in \
        index.read_text()
    assert "better" not in readme.split("## Tables")[1].split("## Missing")[0].split("Diagnostics against")[1]


def test_an_unknown_report_metric_is_named_with_the_nearest_one(tmp_path):
    from ablate.study import StudyError

    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "report:\n  metrics: [response/length_incorect]\n")
    with pytest.raises(StudyError) as err:
        load_study(path)
    text = str(err.value)
    assert f"{path}:13: report.metrics[0]: unknown metric 'response/length_incorect'" in text
    assert "did you mean 'response/length_incorrect'?" in text


def test_evaluation_noise_from_per_problem_records(tmp_path):
    """With per-problem records of each trial's last evaluation, the report states how much of the
    seed-to-seed variance the evaluation's problem sampling explains, per contrast, from the
    discordant problems of each matched pair (hand-computed here)."""
    path = tmp_path / "synth.yaml"
    path.write_text(STUDY.replace("last_n: 2", "last_n: 1"))
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(2), effect=0.1)
    rows = []
    for t in res.trials.itertuples():
        token = t.loss_norm == TOKEN
        # 10 problems at the last step (16): the token level solves problems 0-5, the sequence level 2-7
        solved = set(range(0, 6)) if token else set(range(2, 8))
        rows += [{"key": t.key, "arm": t.arm, "seed": t.seed, "loss_norm": t.loss_norm, "clip_high": t.clip_high,
                  "step": 16, "problem": i, "correct": int(i in solved), "step_accuracy": 0.0, "format_ok": 1,
                  "length": 10, "truncated": 0, "partial": 0.0} for i in range(10)]
    res.problems = pd.DataFrame(rows)
    stats = compute_statistics(study, res, **FAST)
    # loss_norm: b = 2 (0, 1), c = 2 (6, 7) on each of 2 matched cells: ((2 + 2) - 0) / 100 = 0.04 per pair;
    # a seed's difference averages 2 cells: 2 * 0.04 / 4 = 0.02 -> SD sqrt(0.02)
    assert stats.eval_sd[f"loss_norm: {TOKEN} vs sequence"] == pytest.approx(math.sqrt(0.02))
    assert stats.eval_sd["clip_high: 0.28 vs 0.2"] == 0.0  # the same outcomes on both levels
    (intro,) = [sec.intro for sec in phrase(stats).sections if sec.title.startswith("Method")]
    assert "Evaluation noise, from the per-problem records" in intro and "(estimated from 6 seeds)" in intro


# ------------------------------------------------------------------------ the answer comes first


def _claim(verdict: str, estimate: float, lo: float, hi: float, n: int, per_seed=(), need: float = math.nan,
           method: str = inf.PAIRED) -> inf.Claim:
    c = Contrast(factor="loss_norm", level="token", baseline="sequence", method=method, n_seeds=n, cells=1,
                     level_mean=0.5, baseline_mean=0.5 - estimate, estimate=estimate, se=0.0 if per_seed and not any(per_seed) else 0.01, df=n - 1,
                     ci_low=lo, ci_high=hi, p=0.5, p_tost=math.nan, seeds=tuple(range(n)),
                     per_seed=tuple(per_seed), d_z=math.nan, improved=Improvement(0, 0, math.nan, math.nan, math.nan))
    return inf.Claim(c.name, c, None, 0.5, math.nan, verdict, "", need, True)


def _family(claim: inf.Claim, min_effect: float | None = 0.05) -> inf.Family:
    return inf.Family(claims=(claim,), size=1, alpha=0.05, min_effect=min_effect, method=inf.PAIRED, n_seeds=4)


@pytest.mark.parametrize(("claim", "min_effect", "expected"), [
    (_claim(inf.NOT_RESOLVED, 0.0, math.nan, math.nan, 2, per_seed=(0.0, 0.0), need=2), 0.05,  # no spread: no plan
     "loss_norm: token vs sequence: not resolved at 2 seeds (per-seed differences +0, +0 points; no interval below 3 "
     "seeds): 2 seeds cannot tell a 5-point difference from noise."),
    (_claim(inf.NOT_RESOLVED, -0.015, math.nan, math.nan, 2, per_seed=(0.0, -0.03), need=11), 0.05,
     "loss_norm: token vs sequence: not resolved at 2 seeds (per-seed differences +0, -3 points; no interval below 3 "
     "seeds): 2 seeds cannot tell a 5-point difference from noise; about 11 seeds per arm would."),
    (_claim(inf.NOT_RESOLVED, 0.04, -0.054, 0.135, 4, need=24), 0.05,
     "loss_norm: token vs sequence: not resolved at 4 seeds, +4 points [-5.4, 13.5] (95% paired t, 4 seeds): the "
     "interval holds both no difference and a 5-point difference; about 24 seeds per arm would tell them apart."),
    (_claim(inf.DETECTED, 0.058, 0.017, 0.099, 4), 0.05,
     "loss_norm: token vs sequence: detected, +5.8 points [1.7, 9.9] (95% paired t, 4 seeds): at this scale the "
     "level does better than the baseline, by more than seed noise explains."),
    (_claim(inf.EQUIVALENT, 0.014, -0.0004, 0.027, 6, method=inf.MODEL), 0.05,
     "loss_norm: token vs sequence: equivalent, +1.4 points [-0.04, 2.7] (95% model t, 6 seeds): no difference as "
     "large as ±5 points; at this scale the choice does not matter at that size."),
    (_claim(inf.NOT_RESOLVED, 0.04, -0.054, 0.135, 4, need=math.inf), None,
     "loss_norm: token vs sequence: not resolved at 4 seeds, +4 points [-5.4, 13.5] (95% paired t, 4 seeds): the "
     "interval holds both no difference and a difference of this size; more than 200 seeds per arm would be "
     "needed to tell them apart."),
])
def test_answer_sentences_by_hand(claim, min_effect, expected):
    from ablate.report.findings import answer_sentence

    expected = expected.replace("more than 200", f"more than {inf.MAX_SEEDS}")
    assert answer_sentence(claim, _family(claim, min_effect), Scale(100.0, "points"), "max") == expected


def test_a_detected_drop_says_worse():
    from ablate.report.findings import answer_sentence

    claim = _claim(inf.DETECTED, -0.094, -0.144, -0.043, 3)
    assert "the level does worse than the baseline" in answer_sentence(claim, _family(claim), Scale(100.0, "points"), "max")
    assert "the level does better than the baseline" in answer_sentence(claim, _family(claim), Scale(100.0, "points"), "min")


def test_the_page_opens_with_the_question_the_answer_and_the_claims_figure(tmp_path):
    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "primary: [loss_norm]\nmin_effect: 0.03\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1)
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    page, readme = index.read_text(), (index.parent / "README.md").read_text()
    for text, answer_at, claims_at in ((page, page.index('<li class="answer">loss_norm: '), page.index('id="fig-claims"')),
                                       (readme, readme.index("- loss\\_norm: "), readme.index("![Claims](claims.png)"))):
        assert text.count("Findings") == 1
        assert text.index("Question.") < text.index("Findings") < answer_at < claims_at < text.index("Inference")
        assert claims_at < text.index("produced by") < text.index("Inference")
    # method, model, family and tables: collapsed; the claims figure is shown once
    assert "<details><summary>Method: model, family and verdicts</summary>" in page
    assert "<details><summary>Claims (one family)</summary>" in page and page.count('id="fig-claims"') == 1
    assert readme.count("![Claims](claims.png)") == 1


def test_a_report_says_under_its_answer_whether_its_baseline_learned(tmp_path):
    """Issue 54: a new report carries the positive control right after its answer, in both pages: the block
    ablate ledger computes from the curves.csv it wrote (the same function), so splicing it again changes
    nothing."""
    from ablate.report import control

    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "primary: [loss_norm]\nmin_effect: 0.03\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1)
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    page, readme = index.read_text(), (index.parent / "README.md").read_text()
    block = control.study_block(study, pd.read_csv(index.parent / "curves.csv", dtype={"key": str, "arm": str}))
    (c,) = block.controls
    assert c.arm == next(a.name for a in study.arms if a.baseline) and c.n == 6 and c.last_steps == (16, 16)
    assert c.verdict == control.LEARNED and c.ci_low > 0.03
    assert readme.count(control.BEGIN) == 1 and block.markdown() in readme and block.html() in page
    assert "Positive control: the baseline (arm loss\\_norm=sequence,clip\\_high=0.2) gained +" in readme
    for text, answer, claims in ((readme, "- loss\\_norm: ", "![Claims](claims.png)"),
                                 (page, '<li class="answer">', 'id="fig-claims"')):
        assert text.index(answer) < text.index(control.BEGIN) < text.index(claims)
    assert control.spliced(readme, page, block) == (readme, page)


def test_an_equivalence_where_the_baseline_did_not_learn_is_reported_as_uninformative(tmp_path):
    """Issue 54: every evaluation flat at ~0.3 (nothing learned): the contrasts are inside ±min_effect, but the
    report's claims, answer and claims figure say *uninformative*, with the positive control's reason, and
    the same word comes back from the saved folder (ablate.load / the ledger's reader)."""
    from ablate.report import control
    from ablate.report.folder import read_report_pilot
    from ablate.stats.inference import UNINFORMATIVE

    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "primary: [loss_norm]\nmin_effect: 0.05\n")
    study = load_study(path)
    rng = np.random.default_rng(11)
    res = synthetic(study, rng, effect=0.0)
    flat = res.table["metric"] == "eval/accuracy"
    res.table.loc[flat, "value"] = 0.3 + rng.normal(0, 0.004, int(flat.sum()))
    stats = compute_statistics(study, res, **FAST)
    (c,) = stats.controls
    assert c.verdict == control.DID_NOT_LEARN
    verdicts = {cl.name: cl.verdict for cl in stats.inference.family.claims if cl.contrast is not None}
    assert set(verdicts.values()) == {UNINFORMATIVE}, verdicts
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    readme = (index.parent / "README.md").read_text()
    answer = readme.split("## Findings")[1].split(control.BEGIN)[0]
    assert f"- loss\\_norm: {md(TOKEN)} vs sequence: uninformative, " in answer
    assert "but the baseline did not learn (positive control: gain " in answer
    assert "an 'equivalent' verdict of this report is uninformative" in readme
    back = read_report_pilot(study, index.parent).inference.family
    assert {cl.name: cl.verdict for cl in back.claims if cl.contrast is not None} == verdicts


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed (README's test "
                    "command installs it)")
def test_the_answer_and_the_claims_figure_sit_above_the_fold_in_chromium(tmp_path):
    """At 1400 x 900 px, the answer sentences and the whole claims figure are on the first screen: a copy
    of the page measures them with getBoundingClientRect in headless Chromium (the report itself has no script)."""
    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "primary: [loss_norm, clip_high]\nmin_effect: 0.03\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1)
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    probe = index.read_text().replace("</body>", (
        "<script>const r = s => document.querySelector(s).getBoundingClientRect();"
        "const a = document.querySelectorAll('li.answer'); "
        "document.body.setAttribute('data-fold', JSON.stringify({answers: a.length, "
        "answer: a[a.length - 1].getBoundingClientRect().bottom, figure: r('#fig-claims img').bottom, "
        "inference: r('details').top}));</script></body>"))
    (tmp_path / "out" / "probe.html").write_text(probe)
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
                           "--virtual-time-budget=5000", "--dump-dom", (tmp_path / "out" / "probe.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    m = re.search(r'data-fold="([^"]+)"', proc.stdout)
    assert m, proc.stderr[-2000:]
    fold = json.loads(html.unescape(m.group(1)))
    assert fold["answers"] == 2
    assert 0 < fold["answer"] < fold["figure"] <= 900, fold  # the last answer, then the whole figure, on screen
    assert fold["figure"] < fold["inference"], fold  # the method comes after the answer and the figure


# ------------------------------------------------------------------------------------ shared trials


def test_a_report_lists_the_trials_it_shares_by_content_with_a_committed_report_beside_it(study, tmp_path):
    """A report written into reports/<study>/ finds, by content fingerprint, the trials a committed report
    beside it in reports/ also ran (same content, whatever the key) and says so in its generated evidence
    block, which links the ledger; a trial whose content differs (as if run on another processor model) is
    not shared. Its results.csv records each trial's fingerprint; its curves.csv the objective's history."""
    from ablate.metrics import CONTENT_METRICS, content_fingerprint
    from ablate.report.ledger import BEGIN, END

    res = synthetic(study, np.random.default_rng(3))
    plan = Plan.of(study, res.budget)
    reports = tmp_path / "reports"
    first = write_report(plan, res, reports / study.name, **FAST).parent
    curves = pd.read_csv(first / "curves.csv")
    assert list(curves.columns) == ["key", "arm", "seed", "step", "value"]
    assert len(curves) == len(res.table[res.table["metric"] == "eval/accuracy"])
    results = pd.read_csv(first / "results.csv", dtype={"key": str})
    metrics = [c for c in results.columns if "/" in c]
    assert list(results["fingerprint"]) == [content_fingerprint(r) for r in results[metrics].to_dict("records")]
    alone = (first / "README.md").read_text()
    assert alone.count(BEGIN) == 1 and alone.count(END) == 1
    assert "Shared trials: none of this report's" in alone and "Shared trials: 0" not in alone
    other = reports / "earlier_run"
    other.mkdir()
    copied = results.drop(columns=["fingerprint"])  # as a report written before fingerprints were recorded
    seed0 = copied["seed"] == 0
    changed = next(m for m in CONTENT_METRICS if m in copied)
    copied.loc[seed0, changed] = copied.loc[seed0, changed] + 1e-9  # as if from another processor: other content
    copied.to_csv(other / "results.csv", index=False)
    (other / "README.md").write_text(f"# earlier\n\nproduced by: `ablate run {study.path}` · at commit: `{'a' * 40}`\n")
    text = (write_report(plan, res, reports / study.name, **FAST).parent / "README.md").read_text()
    n_seeds, arms = len(study.seeds), sorted({s.arm for s in plan.specs})
    n_trials = len(results)
    assert f"Shared trials: {n_trials - len(arms)} of this report's {n_trials} finished trials" in text
    for arm in arms:  # as the Markdown prints it (escaped)
        assert md(f"{arm} at seeds 1-{n_seeds - 1} = earlier_run's {arm} (same key)") in text, arm
    assert "(../SHARED.md#" in text and text.count(BEGIN) == 1  # the block replaced, not added twice
    html = (first / "index.html").read_text()
    assert html.count(BEGIN) == 1 and "SHARED.md#" in html


def test_computation_key_resolves_what_a_setting_computes_on_the_device():
    """model.dtype auto is float32 on a CPU and bfloat16 autocast on CUDA; rollout.dtype null follows the
    trainer. A trial key keeps auto and float32 apart (another computation on a GPU); the computation key
    on a CPU does not. Setting an option to its default value gives the key of leaving it out."""
    from ablate.config import TrialConfig, field_paths

    base = TrialConfig.from_overrides({"model.name": "tiny-llama"})
    f32 = base.with_overrides({"model.dtype": "float32"})
    assert base.trial_key() != f32.trial_key()
    assert computation_key(base) == computation_key(f32) != computation_key(base, "cuda")
    assert computation_key(base, "cuda") == computation_key(base.with_overrides({"model.dtype": "bfloat16"}), "cuda")
    assert computation_key(base.with_overrides({"rollout.dtype": "float32"})) == computation_key(base)
    assert computation_key(base.with_overrides({"rollout.dtype": "bfloat16"})) != computation_key(base)
    flat = TrialConfig.from_overrides({}).to_flat_dict()
    for path in field_paths():  # every option set explicitly to its default
        assert TrialConfig.from_overrides({path: flat[path]}).trial_key() == TrialConfig.from_overrides({}).trial_key(), path
    assert seed_ranges(pd.Series([5, 0, 1, 2, 3, 7, 8])) == "0-3, 5, 7-8"


def test_a_timing_metric_gets_a_speed_ratio_by_seed(tmp_path):
    """perf/rollout_s planted per trial: 0.5 s at the sequence level and 0.25 (1 + 0.1 seed) s at the token
    level, whatever clip_high, with a 0 logged at every other step (a step that skipped the timed part).
    Per seed the ratio baseline / level is 2 / (1 + 0.1 seed); the report gives their geometric mean and the
    exponentiated t-interval of their logs, computed here by hand."""
    from scipy import stats as st

    path = tmp_path / "synth.yaml"
    path.write_text(STUDY + "report: {metrics: [perf/rollout_s]}\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(4))
    rows = res.table[res.table["metric"] == "policy/entropy"].copy()
    token = rows[level_column("loss_norm")] == TOKEN
    rows["value"] = np.where(token, 0.25 * (1 + 0.1 * rows["seed"]), 0.5)
    rows.loc[rows["step"] % 2 == 0, "value"] = 0.0
    res.table = pd.concat([res.table, rows.assign(metric="perf/rollout_s")], ignore_index=True)
    stats = compute_statistics(study, res, **FAST)
    (speed,) = [r for r in stats.speed if r.factor == "loss_norm"]
    logs = np.log(2 / (1 + 0.1 * np.array(study.seeds)))
    n = logs.size
    half = st.t.ppf(0.975, n - 1) * logs.std(ddof=1) / math.sqrt(n)
    assert (speed.level, speed.baseline, speed.ratio.n_seeds) == (TOKEN, "sequence", n)
    assert speed.ratio.ratio == pytest.approx(math.exp(logs.mean()))
    assert (speed.ratio.ci_low, speed.ratio.ci_high) == (pytest.approx(math.exp(logs.mean() - half)),
                                                          pytest.approx(math.exp(logs.mean() + half)))
    (clip,) = [r for r in stats.speed if r.factor == "clip_high"]
    assert clip.ratio.ratio == pytest.approx(1.0) and clip.ratio.ci_low == pytest.approx(1.0)
    index = write_report(Plan.of(study, res.budget), res, tmp_path / "out", **FAST)
    assert "Speed against the baseline level" in (index.parent / "README.md").read_text()
    assert inf.paired_ratio([1.0, 2.0], [2.0, 0.0]).n_seeds == 1  # a non-positive time is left out


def test_the_context_forest_draws_a_row_per_context_the_pooled_diamond_and_the_prediction_interval():
    from ablate.report.figures import context_forest

    contexts = pd.DataFrame({"context": ["task=a", "task=b", "task=c"], "estimate": [0.02, -0.01, 0.05],
                             "ci_low": [-0.01, -0.05, 0.01], "ci_high": [0.05, 0.03, 0.09], "n": [8, 8, 8]})
    pooled = {"estimate": 0.02, "ci_low": -0.03, "ci_high": 0.07, "pi_low": -0.1, "pi_high": 0.14, "tau": 0.02,
              "i2": 0.4}
    fig = context_forest("f: b vs a", contexts, pooled, verdict="not resolved", scale=100, unit="points",
                         min_effect=0.05, method="Paule-Mandel τ²")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["task=a (8 seeds)", "task=b (8 seeds)", "task=c (8 seeds)", "pooled"]
    assert "not resolved" in ax.get_title() and "τ = 2 points, I² = 40%" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "95% prediction interval for a new context" in legend and "±min_effect (5 points)" in legend
    (pi_line,) = [ln for ln in ax.get_lines() if list(ln.get_ydata()) == [0.0, 0.0]]
    assert list(pi_line.get_xdata()) == pytest.approx([-10, 14])


def test_a_study_over_contexts_reports_each_contrast_per_context_pooled_with_its_forest(tmp_path):
    """loss_norm compared across 3 contexts (clip_high's values): the report's first lines are the verdict
    across contexts with the pooled estimate, τ, I² and the prediction interval; a forest per contrast; a
    table per contrast with each context and the pooled row; no claim contrasts a context factor."""
    from ablate.stats import meta

    path = tmp_path / "ctx.yaml"
    path.write_text(STUDY.replace("values: [0.2, 0.28]", "values: [0.2, 0.28, 0.3]").replace(
        "seeds: 6", "seeds: 6\ncontexts: [clip_high]\nprimary: [loss_norm]\nmin_effect: 0.05\n"
        "entry: {learns: 0.05, band: [0.0, 1.0]}"))
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1, interaction=0.05)
    stats = compute_statistics(study, res, **FAST)
    (a,) = stats.contexts
    assert a.primary and list(a.contexts["context"]) == ["clip_high=0.2", "clip_high=0.28", "clip_high=0.3"]
    expected = meta.pool(a.contexts["estimate"].to_numpy(), a.contexts["se"].to_numpy(), a.contexts["df"].to_numpy(),
                         min_effect=0.05, labels=list(a.contexts["context"]))
    assert a.pooled.estimate == pytest.approx(expected.estimate) and a.pooled.k == 3
    assert not any("clip_high" in c.name for c in stats.inference.family.claims)
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "ctx", **FAST)
    text = (index.parent / "README.md").read_text()
    findings = text.split("## Findings", 1)[1].split("\n\n", 2)[1]
    assert findings.startswith(f"<!-- ablate:answer:begin -->\n- {md(a.claim)}: {md(a.verdict)} (3 contexts). ")
    assert "a new context" in findings and "I² =" in findings and md(a.pooled.method) in findings
    assert (index.parent / "contexts_1.png").is_file() and "### Across contexts" in text
    assert "across contexts" in text and "pooled (3 contexts)" in text
    # the positive control per context, under the answer: each context's baseline arm, one row each
    from ablate.report import control

    block = text[text.index(control.BEGIN):text.index(control.END)]
    assert text.index(findings) < text.index(control.BEGIN) < text.index("![Claims]")
    assert "Positive control per context: the baseline (loss\\_norm=sequence) learned in 3" in block
    assert all(f"| clip\\_high={v} | 6 |" in block for v in ("0.2", "0.28", "0.3"))
    # one verdict per contrast (issue 54): the family's claim is the verdict across contexts, its p the pooled
    # test's Holm adjustment; the equal-weight average is described, never judged
    (claim,) = [c for c in stats.inference.family.claims if c.contrast is not None]
    assert claim.verdict == a.verdict and claim.pooled is a.pooled and claim.p_holm == a.p_holm
    assert claim.p_holm == pytest.approx(a.pooled.p)  # a family of one test: Holm leaves it
    row = stats.inference.family.table().iloc[0]
    assert (row["verdict"], row["contexts"], row["n"]) == (a.verdict, 3, 6) and row["estimate"] == a.pooled.estimate
    assert "Described, not judged: averaged over the 3 contexts with equal weight" in text
    assert f"| {md(a.claim)} | primary | {md(a.verdict)} | 6 × 3 contexts |" in text
    assert text.count(f"{md(a.claim)}: detected") == 0 and text.count(f"{md(a.claim)}: equivalent") == 0


def test_a_context_outside_the_entry_band_is_dropped_never_pooled_and_a_study_without_a_rule_says_so(tmp_path):
    """Issue 54: the entry rule's band on the baseline's step-0 objective drops a context when the report is made
    (it is not pooled, and the answer names it with its step-0 value); a context study without 'entry:' opens
    its answer with a sentence saying it commits no learning threshold."""
    from ablate.report.findings import NO_ENTRY_RULE

    text = STUDY.replace("values: [0.2, 0.28]", "values: [0.2, 0.28, 0.3]").replace(
        "seeds: 6", "seeds: 6\ncontexts: [clip_high]\nprimary: [loss_norm]\nmin_effect: 0.05")
    path = tmp_path / "ctx.yaml"
    path.write_text(text + "entry: {learns: 0.05, band: [0.05, 0.9]}\n")
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1)
    low = (res.table["metric"] == "eval/accuracy") & (res.table["step"] == 0) & (
        res.table[level_column("clip_high")].astype(str) == "0.3")
    res.table.loc[low, "value"] = 0.02  # every arm of context clip_high=0.3 starts below the band
    stats = compute_statistics(study, res, **FAST)
    (a,) = stats.contexts
    assert list(a.contexts["context"]) == ["clip_high=0.2", "clip_high=0.28"] and a.pooled.k == 2
    (dropped,) = stats.inference.dropped
    assert dropped.startswith("clip_high=0.3 (the baseline's step-0 eval/accuracy 0.02 over 6 seeds, outside the "
                              "entry band [0.05, 0.9])")
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "ctx", **FAST)
    answer = (index.parent / "README.md").read_text().split("## Findings", 1)[1]
    assert f"- Dropped by the study's entry rule, never pooled: {md(dropped)}." in answer
    assert md(NO_ENTRY_RULE) not in answer
    path.write_text(text)  # no rule: the same trials, pooled over all 3, and the sentence at the top
    study = load_study(path)
    stats = compute_statistics(study, res, **FAST)
    assert stats.contexts[0].pooled.k == 3 and not stats.inference.dropped
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "ctx2", **FAST)
    answer = (index.parent / "README.md").read_text().split("## Findings", 1)[1]
    assert answer.lstrip().startswith(f"<!-- ablate:answer:begin -->\n- {md(NO_ENTRY_RULE)}")


def test_a_study_over_two_contexts_says_the_prediction_interval_is_undefined(tmp_path):
    """Two contexts give no prediction interval (it needs 3): the report says so in words in its answer, its
    Across contexts section and its table, and never prints nan."""
    path = tmp_path / "ctx.yaml"
    path.write_text(STUDY.replace("seeds: 6", "seeds: 6\ncontexts: [clip_high]\nprimary: [loss_norm]\nmin_effect: 0.05"))
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1, interaction=0.05)
    (a,) = compute_statistics(study, res, **FAST).contexts
    assert a.pooled.k == 2 and math.isnan(a.pooled.pi_low)
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "ctx", **FAST)
    text = (index.parent / "README.md").read_text()
    assert "nan" not in text.lower()
    assert text.count("no prediction interval for a new context (undefined with 2 contexts: it needs at least 3)") >= 2
    assert "| a new context (prediction interval) |  |  | undefined with 2 contexts (needs 3) |" in text


@pytest.mark.parametrize("sizes", [4, 3])
def test_a_size_ladder_of_contexts_gets_a_scale_trend_said_as_an_extrapolation(tmp_path, sizes):
    """One context factor setting model.name over 4 sizes (each trial logs model/params at step 0): each
    contrast gets a weighted trend in log10 parameters (ablate.stats.meta.scale_trend on the per-context estimates),
    and the report extends it to 135M parameters as an extrapolation, not a result. Over 3 sizes (1 residual
    df) no trend is fitted, and the report says why (issue 54)."""
    from ablate.stats import meta

    names = ["micro-llama", "tiny-llama", "small-llama", "base-llama"][:sizes]
    path = tmp_path / "ladder.yaml"
    path.write_text(STUDY.replace("seeds: 6", "seeds: 6\ncontexts: [size]\nmin_effect: 0.05").replace(
        "  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}",
        "  clip_high: {path: loss.clip_high, values: [0.2, 0.28]}\n"
        f"  size: {{path: model.name, values: [{', '.join(names)}]}}").replace(
        "baseline: {loss_norm: sequence, clip_high: 0.2}", "baseline: {loss_norm: sequence, clip_high: 0.2, size: tiny-llama}"))
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(2), effect=0.1, interaction=0.03)
    params = {"micro-llama": 2.0e5, "tiny-llama": 8.0e5, "small-llama": 2.9e6, "base-llama": 1.0e7}
    column = res.columns["size"]
    first = res.table[(res.table["metric"] == "eval/accuracy") & (res.table["step"] == 0)].copy()
    first["metric"] = "model/params"
    first["value"] = first[column].map(params)
    res.table = pd.concat([res.table, first], ignore_index=True)
    stats = compute_statistics(study, res, **FAST)
    token = next(a for a in stats.contexts if a.claim.startswith("loss_norm"))
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "ladder", **FAST)
    text = (index.parent / "README.md").read_text()
    if sizes == 3:
        assert token.trend is None and "per tenfold parameters" not in text
        assert token.trend_note == ("No trend with model size is fitted: 3 sizes leave a line 1 residual df; it needs "
                                    "at least 4 sizes.") and token.trend_note in text
        return
    assert token.trend is not None
    frame = token.contexts.set_index("context")
    x = [np.log10(params[c.split("=")[1]]) for c in frame.index]
    expected = meta.scale_trend(x, frame["estimate"].to_numpy(), frame["se"].to_numpy())
    assert token.trend.slope == pytest.approx(expected.slope) and token.trend.k == 4
    assert "per tenfold parameters" in text and "an extrapolation beyond the sizes measured, not a result" in text


def test_a_contrast_with_fewer_than_two_contexts_with_a_spread_is_said_not_pooled(tmp_path):
    """One seed per context gives no paired-t spread: the contrast is not skipped but reported as not resolved
    across its contexts, with why (no context has a spread) and what would resolve it (more seeds), and no
    forest is drawn for it."""
    path = tmp_path / "ctx2.yaml"
    path.write_text(STUDY.replace("values: [0.2, 0.28]", "values: [0.2, 0.28, 0.3]").replace(
        "seeds: 6", "seeds: 1\ncontexts: [clip_high]\nprimary: [loss_norm]\nmin_effect: 0.05"))
    study = load_study(path)
    stats = compute_statistics(study, synthetic(study, np.random.default_rng(5), effect=0.1), **FAST)
    (a,) = stats.contexts
    assert a.pooled is None and a.verdict == "not resolved" and len(a.contexts) == 3
    assert a.reason.startswith("0 of its 3 contexts have a spread") and "more seeds per context" in a.reason
    index = write_report(Plan.of(study), synthetic(study, np.random.default_rng(5), effect=0.1),
                         tmp_path / "reports" / "ctx2", **FAST)
    text = (index.parent / "README.md").read_text()
    assert f"{md(a.claim)}: not resolved (3 contexts). 0 of its 3 contexts have a spread" in text
    assert not (index.parent / "contexts_1.png").exists()


def test_the_scope_of_a_committed_context_report_is_recomputed_from_its_files(tmp_path):
    """ablate ledger's scope (docs/findings.md, README) reads a committed report with contexts from its
    results.csv and study file, and gives the report's own verdict across contexts, filed under the mission
    factor its options belong to; a report without contexts is listed as tested in one context."""
    from ablate.report import scope

    path = tmp_path / "ctx.yaml"
    path.write_text(STUDY.replace("values: [0.2, 0.28]", "values: [0.2, 0.28, 0.3]").replace(
        "seeds: 6", "seeds: 6\ncontexts: [clip_high]\nprimary: [loss_norm]\nmin_effect: 0.05"))
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(5), effect=0.1, interaction=0.05)
    (a,) = compute_statistics(study, res, **FAST).contexts
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "synth", **FAST)
    readme = index.parent / "README.md"  # as `ablate run` writes it (synthetic results record no command)
    readme.write_text(re.sub(r"(?m)^produced by: .*$", f"produced by: `ablate run {path}` · at commit: `abc1234`",
                             readme.read_text()))
    rows = scope.context_verdicts(index.parent, tmp_path)
    (row,) = rows.itertuples()
    assert (row.claim, row.verdict, row.k, row.mission) == (a.claim, a.verdict, 3, "loss normalization")
    assert row.estimate == pytest.approx(a.pooled.estimate) and row.pi_low == pytest.approx(a.pooled.pi_low)
    assert row.contexts == "clip_high ∈ {0.2, 0.28, 0.3}"
    assert row.up == [c for c, lo in zip(a.contexts["context"], a.contexts["ci_low"]) if lo > 0]
    text = scope.findings_scope(rows, {"addition / tiny-llama": ["other"]})
    assert f"| loss normalization | {a.claim} ★ | synth | 3: clip_high ∈ {{0.2, 0.28, 0.3}} | **{a.verdict}** |" in text
    assert "Tested in one context only (addition / tiny-llama): the claims of 1 reports, other" in text
    assert f"**loss normalization** ({a.claim.split(': ', 1)[1]}): {a.verdict} (3 contexts, synth)" in \
        scope.readme_scope(rows, {})
    assert scope.mission_factor(["reward.components"]) == "reward granularity"
    assert scope.mission_factor(["loss.ratio_level", "loss.clip_low"]) == "ratio level"
    assert scope.mission_factor(["optim.lr"]) == "other"


def test_the_claims_figure_title_counts_the_claims_it_draws(tmp_path):
    """At 2 seeds nothing is tested: the title says how many claims it draws and that none was tested,
    not 'family of 0'; at 6 seeds every drawn claim is in the Holm family."""
    from ablate.report.figures import forest_plot

    for seeds in (2, 6):
        path = tmp_path / f"synth{seeds}.yaml"
        path.write_text(STUDY.replace("seeds: 6", f"seeds: {seeds}"))
        study = load_study(path)
        fam = compute_statistics(study, synthetic(study, np.random.default_rng(1)), **FAST).inference.family
        n = len([c for c in fam.claims if c.contrast is not None])
        title = forest_plot(fam).axes[0].get_title()
        expected = (f"Claims ({n} claims, none testable (fewer than 3 seeds, or no spread))" if seeds == 2 else
                    f"Claims (family of {fam.size}, Holm; its {n} contrasts drawn)")  # + the interaction, not drawn
        assert n == 2 and title.startswith(expected), title


def test_a_report_with_no_testable_claim_never_says_family_of_0(tmp_path):
    """At 2 seeds (the quickstart's budget) the family holds no test: neither the claims figure's title nor the
    claims table's caption nor the method paragraph says 'family of 0'; the caption says why nothing was
    adjusted."""
    path = tmp_path / "synth2.yaml"
    path.write_text(STUDY.replace("seeds: 6", "seeds: 2"))
    study = load_study(path)
    res = synthetic(study, np.random.default_rng(1))
    assert compute_statistics(study, res, **FAST).inference.family.size == 0
    index = write_report(Plan.of(study), res, tmp_path / "reports" / "synth2", **FAST)
    for page in ("README.md", "index.html"):
        assert "family of 0" not in (index.parent / page).read_text(), page
    text = (index.parent / "README.md").read_text()
    assert "its Holm adjustment (none here: no claim could be tested, each has fewer than 3 seeds or no spread)" in text


def test_the_provenance_line_names_the_logged_diff_and_reads_back(tmp_path):
    """A study run from a dirty checkout logged its diff (issue 54): the report's provenance line says so with
    the diff's hash, and PRODUCED / parent_tags read commit, dirty flag and hash back from README.md, so that
    a report rendered again from its folder prints the same line; a clean run and one from before diffs were
    logged print what they printed before."""
    from ablate.report.build import commit_text
    from ablate.report.folder import PRODUCED, parent_tags

    path = tmp_path / "synth2.yaml"
    path.write_text(STUDY.replace("seeds: 6", "seeds: 2"))
    study = load_study(path)
    sha, diff = "0123456789abcdef0123456789abcdef01234567", "abc123def456"
    cases = {"clean": ({"ablate.git_dirty": "false"}, ""),
             "dirty, no diff logged": ({"ablate.git_dirty": "true"}, " (with uncommitted changes)"),
             "dirty": ({"ablate.git_dirty": "true", "ablate.git_diff_sha256": diff},
                       f" (with uncommitted changes, diff sha256 {diff} logged as diff.patch)")}
    for name, (tags, suffix) in cases.items():
        tags = {"ablate.git_commit": sha, "ablate.command": "ablate run synth2.yaml --budget default", **tags}
        assert commit_text(tags) == sha + suffix, name
        if name == "dirty":  # a whole report (2 s) for the new line; the line alone for the others
            res = synthetic(study, np.random.default_rng(1))
            res.parent.update(tags)
            index = write_report(Plan.of(study), res, tmp_path / "out", **FAST)
            readme = (index.parent / "README.md").read_text(encoding="utf-8")
            assert f"git commit: {sha}{suffix}" in readme.replace("\\", "")  # the Versions block says it too
        else:
            readme = f"produced by: `{tags['ablate.command']}` · at commit: `{commit_text(tags)}`\n"
        m = PRODUCED.search(readme)
        assert m and (m["commit"], m["dirty"]) == (sha, suffix), name
        back = parent_tags(readme)
        assert {k: back.get(k) for k in tags} == tags, name
        assert commit_text(back) == sha + suffix, name


def test_many_failed_compute_fits_are_said_once_per_kind_of_failure():
    """Issue 54: generalization's compute-efficiency section was 48 sentences of failed fits; beyond 4 failures
    the arms are counted per kind of reason in one sentence each, a fit that worked still gets its own."""
    from ablate.report.findings import MAX_FAILED_FITS, compute_sentences

    bad = [{"arm": f"a{i}", "ok": False, "reason": ("the fit failed: B ran into its bound (0.05)" if i % 2 else
                                                     f"no saturating trend: the curve explains {i}% of the variance")}
           for i in range(6)]
    good = {"arm": "g", "ok": True, "reason": "", "a": 0.6, "a_low": 0.5, "a_high": 0.7, "b": 1.2, "b_low": 0.9,
            "b_high": 1.5, "c_mid": 8e3, "r0": 0.1, "r2": 0.9, "n_seeds": 6, "extrapolated": False}
    fits = pd.DataFrame(bad + [good])
    out = compute_sentences(fits, {}, Scale.of("eval/accuracy"))
    assert out[:2] == ["No compute-efficiency fit for 3 of the 7 arms (no saturating trend): a0; a2; a4.",
                       "No compute-efficiency fit for 3 of the 7 arms (the fit failed): a1; a3; a5."]
    assert len(out) == 3 and out[2].startswith("g: asymptote A = 60 points")
    # no fit at all: the sentences say why, and no table repeats it per arm (generalization: 60 rows of failures)
    from types import SimpleNamespace

    from ablate.report.findings import _descriptive_tables
    stats = SimpleNamespace(scale=Scale.of("eval/accuracy"), diagnostics=(), speed=(), fits=pd.DataFrame(bad),
                            labels={}, legend_title="arm")
    assert not [t for t in _descriptive_tables(stats) if t.title.startswith("Compute efficiency")]
    stats.fits = pd.DataFrame(bad + [good])
    assert [t.title for t in _descriptive_tables(stats)] == ["Compute efficiency (saturating fits)"]
    few = compute_sentences(pd.DataFrame(bad[:MAX_FAILED_FITS]), {"a0": "arm zero"}, Scale.of("eval/accuracy"))
    assert few[0] == "arm zero: no compute-efficiency fit (no saturating trend: the curve explains 0% of the variance)."
    assert len(few) == MAX_FAILED_FITS
