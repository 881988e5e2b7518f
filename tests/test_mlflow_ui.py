"""The MLflow UI on a study that ablate tracked: a real ``mlflow server`` (tests/servers.py), the study's
experiment, parent run and trial runs made by ablate's own :class:`ablate.tracking.Tracker`, and the
experiment's page rendered by headless Chromium (``--dump-dom``), whose DOM is checked for the runs
table: the page title, the grid with its "Run Name" column, the parent run's row with the expander of
its nested trials, and the count of matching runs (parent + trials).

MLflow 3.17's UI picks an experiment's landing page from its "GenAI / Model training" switch (it starts
at GenAI, whose landing is the traces overview), not from the experiment's ``mlflow.experimentKind``
tag; so ablate's link to an experiment (:func:`ablate.tracking.experiment_url`) sets the switch, and the
bare experiment address is checked too, as an expected failure that shows when MLflow follows the tag.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import servers

from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.tracking import EXPERIMENT_KIND_TAG, Tracker, TrialIdentity, experiment_url

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]

STUDY = """\
name: ui
description: MLflow UI test study.
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
seeds: 1
objective: {metric: eval/accuracy, mode: max}
"""

needs_chromium = pytest.mark.skipif(CHROMIUM is None,
                                    reason="Chromium is not installed (Debian: apt-get install -y chromium)")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """A running MLflow server holding one study as ablate logs it: (server URI, experiment id, parent
    run id, its name, the trial runs' names)."""
    folder = tmp_path_factory.mktemp("mlflow-ui")
    path = folder / "ui.yaml"
    path.write_text(STUDY)
    study = load_study(path)
    with servers.mlflow_server(folder / "server") as uri:
        tracker = Tracker(uri)
        parent = tracker.parent_run(study, "default")
        trials = []
        for spec in Plan.of(study, "default").specs:
            logger = tracker.start_trial(parent, TrialIdentity(spec.study, spec.key, spec.arm, spec.seed, spec.budget,
                                                                 spec.levels, spec.config.to_flat_dict(), "host:1"))
            logger({"eval/accuracy": 0.5}, 0)
            logger.close()
            tracker.finish_trial(logger.run_id, config_yaml="", history=[(0, {"eval/accuracy": 0.5})], samples=[],
                                 result={}, objective=0.5)
            trials.append(tracker.client.get_run(logger.run_id).info.run_name)
        tracker.finish_parent(parent, failed=False)
        exp = tracker.experiment_id(study.name, create=False)
        yield uri, exp, parent, tracker.client.get_run(parent).info.run_name, trials


def render(url: str, profile) -> str:
    """The DOM of ``url`` once MLflow's single-page app has rendered it (a fresh browser profile: no
    remembered UI settings)."""
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000",
                           "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def runs_table_problems(dom: str, exp: str, parent: str, parent_name: str, n_runs: int) -> list[str]:
    """What the rendered experiment page lacks of a runs table showing the study (empty: none)."""
    problems = []
    title = re.search(r"<title>(.*?)</title>", dom)
    if not (title and title.group(1).startswith(f"Runs - Experiment {exp}")):
        problems.append(f"page title {title.group(1) if title else None!r}, not the runs page's")
    if 'role="grid"' not in dom or 'data-testid="sort-header-Run Name"' not in dom:
        problems.append("no runs grid with a Run Name column")
    link = re.search(rf'href="#/experiments/{exp}/runs/{parent}"[^>]*>(?:<[^>]+>)*([^<]*)<', dom)
    if not (link and link.group(1) == parent_name):
        problems.append(f"no row of the parent run {parent_name!r}")
    else:  # the parent's row has the button that expands its nested trial runs
        row = dom[dom.rfind('role="row"', 0, link.start()):link.start()]
        if "runnamecellrenderer" not in row.lower():
            problems.append("the parent run's row has no expander of nested runs")
    if not re.search(rf"<strong>{n_runs}</strong>\s*matching runs", dom):
        problems.append(f"not '{n_runs} matching runs' (the parent and its trials)")
    if "Detect Issues" in dom or re.search(r"<title>Overview", dom):
        problems.append("the GenAI traces overview")
    return problems


def test_the_study_experiment_is_tagged_as_model_training(tracked):
    uri, exp, parent, _, trials = tracked
    client = Tracker(uri).client
    assert client.get_experiment(exp).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    children = client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(r.info.run_name for r in children) == sorted(trials) == ["loss_norm=sequence seed=0",
                                                                           "loss_norm=token seed=0"]


@needs_chromium
def test_the_experiment_link_opens_on_the_runs_table(tracked, tmp_path):
    uri, exp, parent, parent_name, trials = tracked
    dom = render(experiment_url(uri, exp), tmp_path / "profile")
    assert runs_table_problems(dom, exp, parent, parent_name, 1 + len(trials)) == []
