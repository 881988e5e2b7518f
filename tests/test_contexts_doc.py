"""docs/contexts.md, the page on studies over contexts: its study file validates as the page says, its
positive-control snippet prints what the page shows, and it names the verdicts ablate.stats.meta gives."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "contexts.md").read_text(encoding="utf-8")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE, flags=re.S)


def test_the_study_file_of_the_page_validates_as_the_page_says(tmp_path):
    """The page's YAML is a whole study file: it validates, replicates over the contexts it names, drops the
    combination it excludes, and gives the arms and trials the page quotes from `ablate validate`."""
    import ablate

    (text,) = blocks("yaml")
    path = tmp_path / "study.yaml"
    path.write_text(text, encoding="utf-8")
    study = ablate.validate(path)
    assert study.contexts == ("task", "model") and [f.name for f in study.compared] == ["ratio"]
    assert {study.context_of(a.levels) for a in study.excluded} == {"task=countdown,model=tiny-gpt2"}
    contexts = {study.context_of(a.levels) for a in study.arms}
    n_trials = len(study.arms) * len(study.seeds)
    assert len(contexts) == 5 and f"`ok ({len(study.arms)} arms x {len(study.seeds)} seeds = {n_trials} trials)`" in PAGE
    assert f"2 arms in each of the {len(contexts)} contexts left" in PAGE


def test_the_page_names_every_verdict_across_contexts_and_the_prediction_interval_s_minimum():
    from ablate.stats import meta

    for verdict in meta.VERDICTS:
        assert f"**{verdict}**" in PAGE, verdict
    assert f"It needs at least {meta.MIN_CONTEXTS_PI} contexts" in PAGE


@pytest.mark.slow
def test_the_positive_control_snippet_prints_what_the_page_shows():
    """The page's Python reads the committed generalization report and prints each context's baseline change;
    its output is the text block after it, line for line (trailing spaces aside)."""
    (code,) = blocks("python")
    (shown,) = blocks("text")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [line.rstrip() for line in r.stdout.splitlines()] == [line.rstrip() for line in shown.splitlines()]
