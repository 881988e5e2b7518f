"""README's figures about the test suite, generated from a measured run (issue 53).

README's test command runs the whole suite; its paragraph states what the last measured run gave. That
sentence is generated here from ``benchmarks/suite.json``, which records one real run, so the text cannot
drift from the measurement (``tests/test_readme.py`` checks the README block against the record):

    # 1. README's test command from a clean checkout, with a JUnit file
    PYTEST_ADDOPTS=--junitxml=/tmp/suite.xml bash .ci/run
    # 2. record it (pytest's session time, as JUnit gives it), then write README's block
    python benchmarks/suite_record.py record /tmp/suite.xml
    python benchmarks/suite_record.py readme
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "suite.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- ablate:suite:begin -->", "<!-- ablate:suite:end -->"


def cpu_name() -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m[1].strip() if m else "unknown processor"


def record_from_junit(junit: Path, wall_s: float | None = None) -> dict:
    """The counts and times of one pytest run's JUnit XML, with the machine and commit it ran on (the wall
    seconds: ``wall_s``, else the JUnit file's own session time)."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    if wall_s is None:
        wall_s = max(float(s.get("time", 0)) for s in suites)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {
        "commit": commit, "date": dt.date.today().isoformat(), "cpu": cpu_name(), "cores": os.cpu_count(),
        "passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
        "failed": total["failures"] + total["errors"], "skipped": total["skipped"],
        "wall_s": round(wall_s),
    }


def readme_block(rec: dict) -> str:
    """The sentence README's test paragraph carries, from a record."""
    failed = f", {rec['failed']} failed" if rec["failed"] else ""
    return (f"Last measured at {rec['commit']} ({rec['date']}, {rec['cpu']}, {rec['cores']} cores): "
            f"{rec['passed']} passed{failed}, {rec['skipped']} skipped in {rec['wall_s'] / 60:.1f} min of pytest "
            "([record](benchmarks/suite.json)).")


def splice(text: str, block: str) -> str:
    """``text`` with the block between README's suite markers replaced by ``block``."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}{block}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="write benchmarks/suite.json from a run's JUnit XML")
    rec.add_argument("junit", type=Path)
    rec.add_argument("--wall", type=float, default=None, help="the run's wall seconds (default: the JUnit time)")
    sub.add_parser("readme", help="write README's block from benchmarks/suite.json")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        RECORD.write_text(json.dumps(record_from_junit(args.junit, args.wall), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {RECORD.relative_to(ROOT)}")
    else:
        block = readme_block(json.loads(RECORD.read_text(encoding="utf-8")))
        README.write_text(splice(README.read_text(encoding="utf-8"), block), encoding="utf-8")
        print(f"wrote README.md: {block}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
