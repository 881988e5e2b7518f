"""A run from a dirty checkout logs the tree's diff (issue 54): ``diff.patch`` on the study's parent run and
on each trial's run, its sha256 prefix as tag ``ablate.git_diff_sha256``; a clean checkout logs neither.
Real git repositories in tmp folders, a real SQLite MLflow store."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import servers

from ablate.study import load_study
from ablate.study.plan import Plan
from ablate.tracking import (
    DIFF_FILE,
    TAG_GIT_DIFF,
    Tracker,
    TrialIdentity,
    diff_sha256,
    diff_tags,
    dirty_diff,
    git_diff,
    git_tags,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

STUDY = """\
name: dif
factors:
  loss_norm:
    levels:
      sequence: {loss.aggregation: seq-mean-token-mean}
      token: {loss.aggregation: token-mean}
seeds: 1
objective: {metric: eval/accuracy, mode: max}
"""


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          check=True, capture_output=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A checkout with one commit: code.py and reports/r.md tracked, nothing changed."""
    path = tmp_path / "repo"
    (path / "reports").mkdir(parents=True)
    (path / "code.py").write_text("x = 1\ny = 2\n")
    (path / "reports" / "r.md").write_text("old\n")
    git(path, "init", "-q")
    git(path, "add", "code.py", "reports/r.md")
    git(path, "commit", "-q", "-m", "first")
    return path


@pytest.fixture
def study(tmp_path):
    path = tmp_path / "dif.yaml"
    path.write_text(STUDY)
    return load_study(path)


def runs_of(tracker: Tracker, study) -> tuple[str, str]:
    """The parent run and one trial's run of ``study``, created by ``tracker``."""
    parent = tracker.parent_run(study, "default")
    spec = Plan.of(study, "default").specs[0]
    logger = tracker.start_trial(parent, TrialIdentity(spec.study, spec.key, spec.arm, spec.seed, spec.budget,
                                                       spec.levels, spec.config.to_flat_dict(), "host:1"))
    logger.close()
    return parent, logger.run_id


def test_a_dirty_checkout_logs_its_diff_on_the_parent_and_each_trial(repo, study, tmp_path):
    (repo / "code.py").write_text("x = 1\ny = 3\n")  # unstaged
    (repo / "new.py").write_text("z = 0\n")
    git(repo, "add", "new.py")  # staged: git diff HEAD holds it too
    (repo / "reports" / "r.md").write_text("new\n")  # output, not code: neither dirty nor in the diff
    (repo / "untracked.txt").write_text("ignored\n")
    expected = git(repo, "diff", "HEAD", "--", ".", ":(exclude)reports")
    assert b"+y = 3" in expected and b"+z = 0" in expected and b"reports" not in expected
    assert git_tags(repo)["ablate.git_dirty"] == "true"
    assert git_diff(repo) == dirty_diff(repo) == expected
    sha = hashlib.sha256(expected).hexdigest()[:12]
    assert diff_sha256(expected) == sha and diff_tags(expected) == {TAG_GIT_DIFF: sha}

    tracker = Tracker(servers.fresh_mlflow_db(tmp_path), code_root=repo)
    parent, trial = runs_of(tracker, study)
    c = tracker.client
    for run_id in (parent, trial):
        assert DIFF_FILE in {a.path for a in c.list_artifacts(run_id)}
        assert Path(c.download_artifacts(run_id, DIFF_FILE)).read_bytes() == expected
        assert c.get_run(run_id).data.tags[TAG_GIT_DIFF] == sha
    # the diff was read once: a change after the tracker read it is not this run's
    (repo / "code.py").write_text("x = 9\n")
    assert tracker.code_diff() == expected

    # ablate run's closing record_command keeps the parent's diff; a later run from a clean tree drops the tag
    tracker.record_command(parent, "ablate run dif.yaml")
    assert c.get_run(parent).data.tags[TAG_GIT_DIFF] == sha
    git(repo, "checkout", "-q", "HEAD", "--", ".")
    git(repo, "rm", "-q", "--cached", "new.py")
    clean = Tracker(tracker.uri, code_root=repo)
    clean.record_command(parent, "ablate run dif.yaml")
    assert TAG_GIT_DIFF not in c.get_run(parent).data.tags


def test_a_clean_checkout_or_no_checkout_logs_no_diff(repo, study, tmp_path):
    (repo / "reports" / "r.md").write_text("new\n")  # a regenerated report leaves the checkout clean
    (repo / "untracked.txt").write_text("ignored\n")
    assert git_tags(repo)["ablate.git_dirty"] == "false"
    assert git_diff(repo) == b"" and dirty_diff(repo) is None and diff_tags(None) == {}
    not_a_checkout = tmp_path / "plain"
    not_a_checkout.mkdir()
    assert git_tags(not_a_checkout) == {} and git_diff(not_a_checkout) is None and dirty_diff(not_a_checkout) is None

    for i, root in enumerate((repo, not_a_checkout)):
        tracker = Tracker(servers.fresh_mlflow_db(tmp_path, f"mlflow{i}.db"), code_root=root)
        parent, trial = runs_of(tracker, study)
        tracker.record_command(parent, "ablate run dif.yaml")
        for run_id in (parent, trial):
            assert DIFF_FILE not in {a.path for a in tracker.client.list_artifacts(run_id)}
            assert TAG_GIT_DIFF not in tracker.client.get_run(run_id).data.tags


def test_without_git_a_run_logs_no_diff_and_does_not_fail(repo, study, tmp_path, monkeypatch):
    (repo / "code.py").write_text("changed\n")
    monkeypatch.setenv("PATH", str(repo))  # no git on the PATH
    assert git_tags(repo) == {} and git_diff(repo) is None and dirty_diff(repo) is None
    tracker = Tracker(servers.fresh_mlflow_db(tmp_path), code_root=repo)
    parent, trial = runs_of(tracker, study)
    for run_id in (parent, trial):
        assert DIFF_FILE not in {a.path for a in tracker.client.list_artifacts(run_id)}
        assert TAG_GIT_DIFF not in tracker.client.get_run(run_id).data.tags
