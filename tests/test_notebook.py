"""The example notebooks (examples/*.ipynb) run from top to bottom in a fresh kernel, as a reader runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))


def test_there_is_a_notebook():
    assert NOTEBOOKS, "examples/*.ipynb: the notebook of docs/api.md"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_the_notebook_runs_and_prints_the_verdicts(path, tmp_path):
    """Executed with nbclient in a folder laid out as the repository (its reports and studies linked), every
    cell runs without error; the two_reports notebook prints each report's claims and saves its figure."""
    import nbformat
    from nbclient import NotebookClient

    for name in ("reports", "studies"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    work = tmp_path / "examples"
    work.mkdir()
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    if path.name == "two_reports.ipynb":
        assert "loss_normalization (paired t):" in text and "ratio_level (paired t):" in text
        assert "equivalent" in text and (work / "two_reports.png").is_file()
