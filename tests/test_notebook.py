"""The example notebooks (examples/*.ipynb) run from top to bottom in a fresh kernel, as a reader runs them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))


def test_there_is_a_notebook():
    assert NOTEBOOKS, "examples/*.ipynb: the notebook of docs/api.md"


def _git_status() -> str | None:
    """``git status --porcelain`` of the repository (untracked files listed one by one), or None outside a
    git checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    return out.stdout if out.returncode == 0 else None


def _files_under(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_the_notebook_runs_draws_inline_and_writes_nothing(path):
    """Executed with nbclient in its own folder of the repository, as a reader runs it: every cell runs
    without error, its figures are inline outputs (image/png), and it writes nothing: neither ``git status``
    nor the files of its folder (ignored ones included) change. The two_reports notebook prints each
    report's claims."""
    import nbformat
    from nbclient import NotebookClient

    before, files_before = _git_status(), _files_under(path.parent)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    images = [o for o in outputs if o.get("output_type") in ("display_data", "execute_result")
              and "image/png" in o.get("data", {})]
    assert images, "no figure drawn inline (no image/png output)"
    assert _files_under(path.parent) == files_before, "the notebook wrote into its folder"
    assert _git_status() == before, "the notebook changed the repository's git status"
    if path.name == "two_reports.ipynb":
        text = "\n".join(o.get("text", "") for o in outputs)
        assert "loss_normalization (paired t):" in text and "ratio_level (paired t):" in text
        assert "equivalent" in text and len(images) == 2
