"""The example reports committed under reports/<study>/ were produced by study files that still
validate, and by exactly the trials those files define today: if a study file changes its design
(arms, seeds, budget overrides, anything in a trial's configuration), its trial keys change and this
test says to run the study again. Each report names the command and the commit that produced it."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.report.build import trials_provenance
from ablate.report.folder import parent_tags
from ablate.report.ledger import report_folders
from ablate.study import load_study
from ablate.study.plan import Plan

ROOT = Path(__file__).resolve().parent.parent
REPORTS = report_folders(ROOT / "reports")  # the default budget's reports (a local smoke run's are not committed)
PROVENANCE = re.compile(r"^produced by: `(?P<command>[^`]+)` · at commit: `(?P<commit>[0-9a-f]{40})(?P<dirty>[^`]*)`$",
                        re.M)
ANALYSED = re.compile(r"^analysed by: `(?P<command>.+?) · at commit: (?P<commit>[0-9a-f]{40})(?P<dirty>[^`]*)`$", re.M)


def test_the_required_reports_are_committed():
    assert {"loss_normalization", "reward_granularity"} <= {p.name for p in REPORTS}
    assert "quickstart" not in {p.name for p in REPORTS}  # the demo (evidence: false): the reader's own run


def provenance(report: Path) -> tuple[list[str], str, str]:
    m = PROVENANCE.search((report / "README.md").read_text(encoding="utf-8"))
    assert m, f"{report}/README.md does not start with 'produced by: `ablate run ...` · at commit: `<sha>`'"
    return shlex.split(m["command"]), m["commit"], m["dirty"]


@pytest.mark.parametrize("report", REPORTS, ids=[p.name for p in REPORTS])
def test_report_matches_its_study_file(report):
    argv, commit, dirty = provenance(report)
    assert argv[:2] == ["ablate", "run"], argv
    assert dirty == "", f"{report.name} was produced from a working tree with uncommitted changes"
    study_file = ROOT / argv[2]
    budget = argv[argv.index("--budget") + 1] if "--budget" in argv else "default"
    study = load_study(study_file)  # still validates
    assert study.name == report.name
    tuned = report / "tuned.json"  # a study with tune: ran each arm at its tuned values (in its keys)
    plan = Plan.of(study, budget, tuned=json.loads(tuned.read_text()) if tuned.is_file() else None)
    expected = {s.key: s for s in plan.specs}
    results = pd.read_csv(report / "results.csv", dtype={"key": str})
    assert set(results["key"]) == set(expected), (
        f"reports/{report.name} holds other trials than {argv[2]} defines at budget {budget} today: "
        f"run `{shlex.join(argv)}` again to regenerate it")
    assert set(results["state"]) == {"done"}
    for _, row in results.iterrows():
        spec = expected[row["key"]]
        assert (row["arm"], int(row["seed"])) == (spec.arm, spec.seed)
    for name in ("index.html", "claims.png", "paired_seeds.png", "learning_curves.png"):
        assert (report / name).is_file(), name
    text = (report / "README.md").read_text(encoding="utf-8")
    assert f"Budget **{budget}**" in text
    # the processor and commits its trials ran on (RL amplifies float rounding): the line trials_provenance
    # writes from results.csv's cpu and commit columns or, in a report logged before them, the run's own
    # record (its Versions section, as ablate report --from reads it back)
    # every trial from a clean commit, so that the commit reproduces it (issue 54: the engines report's 152
    # extension trials had run from a314864-dirty; rerun from a clean commit)
    if "commit" in results:
        dirty_trials = results["commit"].astype(str).str.endswith("-dirty")
        assert not dirty_trials.any(), (f"reports/{report.name}: {int(dirty_trials.sum())} trials ran from a working "
                                        "tree with uncommitted changes: run them again from a clean commit")
    ran_on = trials_provenance(results)
    if ran_on:
        assert ran_on.startswith("ran on ") and f"trials: `{ran_on}`" in text, report.name
        assert results["cpu"].nunique() == 1, f"reports/{report.name} mixes processor models"  # one per study
    else:
        assert parent_tags(text).get("ablate.version.machine.cpu"), (
            f"reports/{report.name} does not name the processor its trials ran on: run it again")
    analysed = ANALYSED.search(text)
    if analysed:  # analysed again by a later commit's statistics (ablate report --from): from a clean tree
        assert analysed["dirty"] == "", f"{report.name} was analysed from a working tree with uncommitted changes"
        assert shlex.split(analysed["command"])[:2] == ["ablate", "report"]


@pytest.mark.parametrize("report", REPORTS, ids=[p.name for p in REPORTS])
def test_plan_on_the_committed_results_says_what_the_primary_contrasts_resolve(report, capsys):
    """`ablate plan --from reports/<study>` (results.csv alone, no MLflow) says for the primary contrasts
    either that they are resolved, or the effect size the study's seeds can resolve."""
    from ablate.cli import main

    argv, _, _ = provenance(report)
    study_file = ROOT / argv[2]
    assert main(["plan", str(study_file), "--from", str(report)]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("resolved: ")]
    assert ("every planned contrast" in line and "is detected or equivalent" in line) or re.search(
        r"the others can resolve \(power 0\.8, alpha 0\.05 / \d+\) true differences of .+: [0-9.]+ points at \d+ seeds",
        line) or re.search(r"; below 3 seeds no claim is tested, so .+ resolve no difference at the pilot's seeds", line) \
        or re.search(r"had the same difference in every pilot seed \(zero spread\): no test applies", line), line


def generated_block(marker: str) -> str:
    """The text of docs/statistics.md between ``<!-- marker:begin -->`` and ``<!-- marker:end -->``."""
    text = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    m = re.search(rf"<!-- {marker}:begin -->\n(.*?)\n?<!-- {marker}:end -->", text, re.S)
    assert m, f"docs/statistics.md lacks the {marker} markers"
    return m.group(1).strip()


def test_the_code_finds_the_trials_precisions_fp32_arm_shares_with_other_reports():
    """precision's fp32 arm (model.dtype: float32) is the same computation on a CPU as the baselines of
    aa_control (seeds 0-23), reward_granularity (seeds 0-29), adv_scope_x_aggregation (seeds 0-15) and
    behaviour_logp (seeds 0-7) (model.dtype: auto): found by ablate.report.shared, with equal objectives in
    every shared seed (all run on one processor model, an Intel Xeon). The same computation in cpu_bf16,
    run on another processor model (its report names an AMD EPYC), differs in every seed."""
    from ablate.report.shared import committed_report, shared_trials

    rep = committed_report(ROOT / "reports" / "precision")
    shared = shared_trials(rep.plan, rep.trials, ROOT / "reports")
    fp32 = shared[shared["arm"] == "precision=fp32"].set_index("report")
    same = {"aa_control": ("stream=0", 24), "reward_granularity": ("reward=final,advantage=grpo", 30),
            "adv_scope_x_aggregation": ("adv_std=group,aggregation=seq-mean", 16),
            "behaviour_logp": ("behaviour_logp=recompute", 8)}
    for report, (arm, n) in same.items():
        row = fp32.loc[report]
        assert (row["other_arm"], row["seeds"], row["how"], row["same_objective"], row["n"]) == (
            arm, f"0-{n - 1}", "same computation on CPU", n, n), report
    assert (fp32.loc["cpu_bf16", "n"], fp32.loc["cpu_bf16", "same_objective"]) == (16, 0)
    assert "AMD EPYC" in (ROOT / "reports" / "cpu_bf16" / "README.md").read_text(encoding="utf-8")


#: The summaries of a trial's evaluation curve compared on aa_objective's A/A design: name -> (summary,
#: last_n, first step used as a fraction of the last, evaluations it needs after step 0).
NOISE_SUMMARIES = {
    "the last evaluation (every study's objective)": ("last", 1, 0.0, 1),
    "the mean of the last 3 evaluations": ("last", 3, 0.0, 3),
    "the mean of the last 5 evaluations": ("last", 5, 0.0, 5),
    "the area under the last third of the curve": ("auc", 1, 2 / 3, 3),
}


def objective_noise_table() -> str:
    """docs/statistics.md's A/A noise table: for each rollout shape of reports/aa_objective, the SD of one
    seed's stream=1 - stream=0 difference under each summary of the eval curve (curves.csv, evaluations
    every 10 steps), with its 95% chi-square interval, and the Pitman-Morgan test of equal variance
    against the last evaluation on the same seeds; then the two shapes' last evaluations (F-test)."""
    from scipy import stats

    from ablate.objective import summarize

    folder = ROOT / "reports" / "aa_objective"
    curves = pd.read_csv(folder / "curves.csv", dtype={"key": str})
    arms = pd.read_csv(folder / "results.csv", dtype={"key": str}).set_index("key")[["stream", "shape"]]
    curves = curves.join(arms, on="key")
    rows = ["| completions per step | summary of eval/accuracy | evaluations after step 0 | SD of one seed's A/A "
            "difference, points [95% χ² interval] | n seeds | variance / the last evaluation's (Pitman-Morgan p) |",
            "|---|---|---:|---|---:|---|"]
    last = {}
    for shape, label in (("g8", "4 prompts × 8"), ("g16", "2 prompts × 16")):
        diffs = {}
        for name, (summary, last_n, start, _) in NOISE_SUMMARIES.items():
            per = {}
            for (stream, seed), g in curves[curves["shape"] == shape].groupby(["stream", "seed"]):
                g = g[g["step"] >= start * g["step"].max()]
                per[(int(stream), int(seed))] = summarize(g["step"].to_numpy(), g["value"].to_numpy(), summary, last_n)
            seeds = sorted({s for _, s in per})
            diffs[name] = np.array([per[(1, s)] - per[(0, s)] for s in seeds])
        base = diffs[next(iter(NOISE_SUMMARIES))]
        last[shape] = base
        for name, d in diffs.items():
            n = d.size
            sd = d.std(ddof=1)
            lo, hi = (sd * math.sqrt((n - 1) / stats.chi2.ppf(q, n - 1)) for q in (0.975, 0.025))
            vs = ("–" if d is base else
                  f"{d.var(ddof=1) / base.var(ddof=1):.2f} (p = {stats.pearsonr(d + base, d - base).pvalue:.2f})")
            rows.append(f"| {label} | {name} | {NOISE_SUMMARIES[name][3]} | {100 * sd:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] "
                        f"| {n} | {vs} |")
    a, b = last["g16"], last["g8"]
    ratio = a.var(ddof=1) / b.var(ddof=1)
    p = 2 * min(stats.f.cdf(ratio, a.size - 1, b.size - 1), stats.f.sf(ratio, a.size - 1, b.size - 1))
    rows.append("")
    rows.append(f"2 prompts × 16 against 4 prompts × 8, the last evaluation: variance ratio {ratio:.2f}, "
                f"F({a.size - 1}, {b.size - 1}) two-sided p = {p:.2f}.")
    return "\n".join(rows)


def test_the_objective_noise_table_of_docs_statistics_is_what_the_committed_curves_give():
    assert generated_block("objective-noise") == objective_noise_table(), "docs/statistics.md's objective-noise " \
        "table is stale: regenerate it with tests.test_committed_reports.objective_noise_table()"


def test_aa_objective_reproduces_aa_control_on_the_same_processor_model_at_a_later_commit():
    """aa_objective's g8 arms are aa_control's trials at seeds 0-15 evaluated every 10 steps instead of
    20 (the evaluation draws nothing from the training streams): run on the same processor model
    (both reports name it) at different commits, every one of the 32 shared trials reached the same
    last accuracy exactly. behaviour_logp's and cpu_bf16's runs of the same computation (another
    processor: cpu_bf16's report names an AMD EPYC) differ in every seed (the shared-trials test)."""
    objective, control = (pd.read_csv(ROOT / "reports" / name / "results.csv") for name in ("aa_objective", "aa_control"))
    # one processor model in both (a re-render from MLflow adds its instruction set to the name, in both)
    assert set(objective["cpu"]) == set(control["cpu"]) and len(set(control["cpu"])) == 1
    assert next(iter(control["cpu"])).startswith("Intel(R) Xeon(R) Processor @ 2.80GHz")
    g8 = objective[objective["shape"] == "g8"].set_index(["stream", "seed"])["objective"]
    control = control.set_index(["stream", "seed"])["objective"]
    assert len(g8) == 32 and (control.loc[g8.index] == g8).all()
    _, commit_control, _ = provenance(ROOT / "reports" / "aa_control")
    _, commit_objective, _ = provenance(ROOT / "reports" / "aa_objective")
    assert commit_control != commit_objective


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.name)
def test_every_file_a_committed_report_links_is_committed_with_it(report):
    """A committed report names the files .gitignore leaves out (tidy.csv.gz, problems.csv.gz, samples.json,
    SVG copies) without a link: every link of its Files section resolves in a clean clone (issue 53)."""
    for page, pattern in (("README.md", r"### Files\n\n(.+)\n"), ("index.html", r"<h3>Files</h3><p>(.+?)</p>")):
        m = re.search(pattern, (report / page).read_text(encoding="utf-8"))
        assert m, f"{report.name}/{page} has no Files section"
        links = re.findall(r"\]\(([^)]+)\)", m[1]) if page == "README.md" else re.findall(r'href="([^"]+)"', m[1])
        assert links and all((report / link).is_file() for link in links), (page, links)
        assert not {"tidy.csv.gz", "problems.csv.gz", "samples.json"} & set(links)
