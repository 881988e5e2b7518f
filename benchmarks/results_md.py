"""One helper shared by the benchmark scripts: each owns a delimited section of benchmarks/RESULTS.md."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, body: str, begin: str, end: str) -> None:
    """Replace (or append) the section between the ``begin`` and ``end`` markers in ``path``; the rest
    of the file is kept."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        start, stop = text.index(begin), text.index(end) + len(end)
        text = text[:start] + block + text[stop:]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
