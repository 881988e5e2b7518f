"""ablate from Python (ablate/api.py): ``import ablate`` exports exactly the API, stays light, and each
function returns what the command line prints: the same trials, claims and seed plans."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import servers
import yaml

import ablate
from ablate.report.folder import read_report_pilot
from ablate.report.ledger import report_claims
from ablate.stats.planning import plan_seeds
from ablate.store import StudyStore
from ablate.study import load_study

ROOT = Path(__file__).resolve().parent.parent


def test_import_ablate_exports_exactly_the_api_and_imports_no_torch():
    code = ("import sys, ablate; print(sorted(ablate.__all__)); "
            "print(any(m in sys.modules for m in ('torch', 'pandas', 'mlflow', 'optuna')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == str(sorted(["AblateError", "StudyError", "StudyResults", "load", "plan_seeds", "run",
                                 "validate"]))
    assert out[1] == "False"  # the command line's start-up is not slowed by the API
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ablate.nope  # noqa: B018


def test_load_a_committed_report_gives_its_trials_curves_claims_and_figures():
    folder = ROOT / "reports" / "loss_normalization"
    res = ablate.load(folder)
    assert (res.name, res.budget, res.folder) == ("loss_normalization", "default", folder)
    results = pd.read_csv(folder / "results.csv", dtype={"key": str, "arm": str})
    assert list(res.trials["key"]) == list(results["key"]) and len(res.curves) == len(pd.read_csv(folder / "curves.csv"))
    expected = report_claims(folder, ROOT).claims  # the ledger's recomputation of the same report
    assert list(res.claims["claim"]) == list(expected["claim"])
    assert res.claims["estimate"].to_numpy() == pytest.approx(expected["estimate"].to_numpy(), nan_ok=True)
    assert list(res.claims["verdict"]) == list(expected["verdict"]) and set(res.claims["method"]) == {"paired t"}
    assert res.figures["claims"] == folder / "claims.png" and "loss_normalization" in repr(res)
    assert list(res.curves.columns) == ["key", "arm", "seed", "loss_norm", "step", "value"]  # the factor, as trials'
    level = dict(zip(res.trials["key"], res.trials["loss_norm"]))
    assert len(level) > 1 and all(level[k] == v for k, v in zip(res.curves["key"], res.curves["loss_norm"]))


def test_plan_seeds_is_ablate_plan_from_a_report():
    study = load_study(ROOT / "studies" / "loss_normalization.yaml")
    pilot = read_report_pilot(study, ROOT / "reports" / "loss_normalization")
    expected = plan_seeds(pilot.inference.contrasts, min_effect=study.min_effect,
                          family_size=len(pilot.inference.family.claims))
    got = ablate.plan_seeds(ROOT / "studies" / "loss_normalization.yaml", report=ROOT / "reports" / "loss_normalization")
    assert [(c.name, c.seeds_needed) for c in got.contrasts] == [(c.name, c.seeds_needed) for c in expected.contrasts]
    assert all(math.isfinite(c.seeds_needed) for c in got.contrasts)


def test_a_bad_study_mapping_raises_one_typed_error_with_every_problem_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ablate.StudyError) as caught:
        ablate.validate({"name": "bad", "factors": {}, "design": "full"})
    keys = {p.key for p in caught.value.problems}
    assert {"seeds", "objective", "factors"} <= keys and isinstance(caught.value, ablate.AblateError)
    assert list(tmp_path.iterdir()) == []  # the temporary study file went with the error
    good = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    assert ablate.validate(good).name == "quickstart" and list(tmp_path.iterdir()) == []  # and with success
    with pytest.raises(ablate.AblateError, match="a value YAML cannot write"):
        ablate.validate({**good, "seeds": object()})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ablate.AblateError, match="not a report folder"):
        ablate.load(tmp_path)


def test_load_by_name_where_nothing_ran_creates_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ablate.AblateError, match="there is no MLflow store"):
        ablate.load("quickstart")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_run_from_python_gives_the_cli_s_trials_and_report(tmp_path, monkeypatch, ablate_cli):
    """quickstart at its smoke budget, once through `ablate run` and once through ablate.run from a mapping
    of the same file: the same trial keys and content fingerprints, the same claims."""
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    for d in (cli_dir, api_dir):
        d.mkdir()
        servers.fresh_mlflow_db(d)
    study = ROOT / "studies" / "quickstart.yaml"
    code, out, err, _ = ablate_cli(["run", str(study), "--budget", "smoke", "--threads", "1", "--no-progress"], cli_dir,
                                   tmp_path / "cache")
    assert code == 0, err
    monkeypatch.chdir(api_dir)
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
        monkeypatch.delenv(var, raising=False)
    res = ablate.run(yaml.safe_load(study.read_text()), budget="smoke", threads=1)
    assert res.folder == Path("reports") / "quickstart-smoke" and res.budget == "smoke"
    kept = api_dir / "runs" / "quickstart" / "quickstart.yaml"  # the mapping's file, which the workers read
    assert kept.is_file() and f"produced by: `ablate run {kept.relative_to(api_dir)} --budget smoke --workers 1`" in \
        (api_dir / res.folder / "README.md").read_text()
    cli = pd.read_csv(cli_dir / "reports" / "quickstart-smoke" / "results.csv", dtype={"key": str})
    assert sorted(res.trials["key"]) == sorted(cli["key"]) and len(res.trials) == 8
    assert dict(zip(res.trials["key"], res.trials["fingerprint"])) == dict(zip(cli["key"], cli["fingerprint"]))
    assert list(res.claims["claim"]) == list(ablate.load(cli_dir / "reports" / "quickstart-smoke").claims["claim"])
    assert not (api_dir / "reports" / "quickstart").exists()  # a smoke run never writes the study's own report


def _script_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
        env.pop(var, None)
    return env


@pytest.mark.slow
def test_run_with_two_workers_from_a_script_with_no_main_guard(tmp_path):
    """`ablate.run(study, workers=2)` at a script's top level, no `if __name__ == "__main__":` (docs/api.md):
    the workers are fresh interpreters that never import the script, so it runs to the end, every trial done
    once by the two pool workers (the spawned processes of before re-ran the script and failed every trial)."""
    work = tmp_path / "work"
    work.mkdir()
    servers.fresh_mlflow_db(work)
    script = work / "two_workers.py"
    script.write_text(f"""import ablate

res = ablate.run({str(ROOT / "studies" / "quickstart.yaml")!r}, budget="smoke", workers=2, threads=1)
print("states:", list(res.trials["state"]))
""")
    r = subprocess.run([sys.executable, str(script)], cwd=work, env=_script_env(tmp_path), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"states: {['done'] * 8}" in r.stdout and "bootstrapping" not in r.stderr, (r.stdout, r.stderr[-3000:])
    store = StudyStore(str(work / "runs" / "quickstart" / "store.journal"), "quickstart", create=False)
    attempts = [a for a in store.attempts("smoke")]
    assert len(attempts) == 8 and {a.state for a in attempts} == {"done"}, attempts
    assert {a.claim["name"].rsplit("/", 1)[-1] for a in attempts} <= {"0", "1"}  # pool workers /0 and /1


def test_a_component_registered_by_the_script_itself_is_refused_with_two_workers(tmp_path):
    """The workers never run the calling script, so a component it registers would be unknown to them:
    ablate.run with workers=2 refuses at once (before MLflow or any folder is touched), naming it and the
    two ways out (a plugins: module, or one worker)."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "own_reward.py"
    script.write_text(f"""import ablate
from ablate.rewards import REWARDS

@REWARDS.register("mine")
def mine(ctx):
    return ctx.mask * 0.0

try:
    ablate.run({str(ROOT / "studies" / "quickstart.yaml")!r}, budget="smoke", workers=2)
except ablate.AblateError as exc:
    print("refused:", exc)
""")
    r = subprocess.run([sys.executable, str(script)], cwd=work, env=_script_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("refused: reward component 'mine' registered in the running script (__main__)"), r.stdout
    assert "plugins:" in r.stdout and "1 worker" in r.stdout, r.stdout
    assert sorted(p.name for p in work.iterdir()) == ["own_reward.py"]  # nothing created


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.slow
def test_the_python_snippets_of_readme_and_docs_api_run_as_printed(tmp_path):
    """Every ```python block of README.md, docs/api.md and docs/factors.md, run as printed in a fresh
    interpreter, in a folder laid out as the repository (studies/, the committed report they load, an empty MLflow store)."""
    work = tmp_path / "work"
    (work / "reports").mkdir(parents=True)
    (work / "studies").symlink_to(ROOT / "studies", target_is_directory=True)
    shutil.copytree(ROOT / "reports" / "loss_normalization", work / "reports" / "loss_normalization")
    servers.fresh_mlflow_db(work)
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    for var in ("MLFLOW_TRACKING_URI", "ABLATE_STORAGE"):
        env.pop(var, None)
    pages = ("README.md", "docs/api.md", "docs/factors.md")
    blocks = [(page, b) for page in pages for b in python_blocks((ROOT / page).read_text())]
    assert len(blocks) >= 3
    for page, block in blocks:
        r = subprocess.run([sys.executable, "-c", block], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (page, block, r.stderr[-3000:])
    assert (work / "reports" / "quickstart-smoke" / "index.html").is_file()  # docs/api.md's smoke run
