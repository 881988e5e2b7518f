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

import pandas as pd
import pytest

from ablate.plan import Plan
from ablate.study import load_study

ROOT = Path(__file__).resolve().parent.parent
REPORTS = sorted(p.parent for p in (ROOT / "reports").glob("*/README.md"))
PROVENANCE = re.compile(r"^produced by: `(?P<command>[^`]+)` · at commit: `(?P<commit>[0-9a-f]{40})(?P<dirty>[^`]*)`$",
                        re.M)
ANALYSED = re.compile(r"^analysed by: `(?P<command>.+?) · at commit: (?P<commit>[0-9a-f]{40})(?P<dirty>[^`]*)`$", re.M)


def test_the_required_reports_are_committed():
    assert {"quickstart", "loss_normalization", "reward_granularity"} <= {p.name for p in REPORTS}


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


REANALYSED = ("reward_granularity", "granularity_cross", "adv_scope_x_aggregation")


def reanalysis_table() -> str:
    """The re-analysis table of docs/statistics.md: every contrast of the committed crossed studies,
    from their results.csv, with the paired default."""
    from ablate.planning import read_report_pilot

    rows = ["| report | claim | n seeds | estimate [95% interval], points | df | p | Holm p (family) | verdict |",
            "|---|---|---:|---|---:|---:|---:|---|"]
    for name in REANALYSED:
        fam = read_report_pilot(load_study(ROOT / "studies" / f"{name}.yaml"), ROOT / "reports" / name).inference.family
        for claim in fam.claims:
            c = claim.contrast
            if c is None:  # an interaction: its paired test (Hotelling's T², or t² at 1 df) as F
                t = claim.term
                tested = math.isfinite(t.p)
                rows.append(f"| {name} | {claim.name} | {fam.n_seeds} | "
                            + (f"F({t.df}, {t.df_resid}) = {t.F:.2f} | {t.df_resid} | {t.p:.3f} | "
                               f"{claim.p_holm:.3f} ({fam.size}) | {claim.verdict} |" if tested else
                               f"not tested: {t.note} | – | – | – | {claim.verdict} |"))
                continue
            pts = lambda v, sign="": f"{100 * v:{sign}.1f}".replace("-", "−")  # noqa: E731
            rows.append(f"| {name} | {claim.name}{' (primary)' if claim.primary else ''} | {c.n_seeds} | "
                        f"{pts(c.estimate, '+')} [{pts(c.ci_low)}, {pts(c.ci_high)}] | {c.df:g} | "
                        f"{c.p:.3f} | {claim.p_holm:.3f} ({fam.size}) | {claim.verdict} |")
    return "\n".join(rows)


def test_the_reanalysis_table_of_docs_statistics_is_what_the_code_computes():
    text = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- reanalysis:begin -->\n(.*?)\n?<!-- reanalysis:end -->", text, re.S)
    assert m, "docs/statistics.md lacks the reanalysis markers"
    assert m.group(1).strip() == reanalysis_table(), "docs/statistics.md's re-analysis table is stale: regenerate it " \
        "with tests.test_committed_reports.reanalysis_table()"


def test_the_code_finds_the_trials_precisions_fp32_arm_shares_with_other_reports():
    """precision's fp32 arm (model.dtype: float32) is the same computation on a CPU as the baselines of
    aa_control, reward_granularity and adv_scope_x_aggregation (model.dtype: auto): found by
    ablate.report.shared, with equal objectives in all 4 seeds. The same computation in behaviour_logp and
    cpu_bf16, run on another processor model (cpu_bf16's report names an AMD EPYC), differs in every seed."""
    from ablate.report.shared import committed_report, shared_trials

    rep = committed_report(ROOT / "reports" / "precision")
    shared = shared_trials(rep.plan, rep.trials, ROOT / "reports")
    fp32 = shared[shared["arm"] == "precision=fp32"].set_index("report")
    same = {"aa_control": "stream=0", "reward_granularity": "reward=final,advantage=grpo",
            "adv_scope_x_aggregation": "adv_std=group,aggregation=seq-mean"}
    for report, arm in same.items():
        row = fp32.loc[report]
        assert (row["other_arm"], row["seeds"], row["how"], row["same_objective"], row["n"]) == (
            arm, "0-3", "same computation on CPU", 4, 4), report
    for report in ("behaviour_logp", "cpu_bf16"):
        assert (fp32.loc[report, "n"], fp32.loc[report, "same_objective"]) == (4, 0), report
    assert "AMD EPYC" in (ROOT / "reports" / "cpu_bf16" / "README.md").read_text(encoding="utf-8")
