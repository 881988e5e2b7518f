"""``ablate ledger``: the evidence across the committed reports, regenerated from their files."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "list the trials committed reports share (by content) and correct every claim project-wide"
DESCRIPTION = """\
Read every committed report under --reports (reports/<study>/README.md and results.csv) and write what
is generated from all of them together, so that none of it is a copy that goes stale:

  reports/SHARED.md      the ledger: every pair of content-identical trials across reports (the same
                         content fingerprint: the final losses, gradient norm, rewards and evaluation to
                         the last bit, whatever the keys),
                         and the trials with one key but other content (another processor or code)
  reports/<study>/       each report's README.md and index.html gain (or refresh) the block "Evidence
                         across the committed reports": its shared trials, and each of its claims
                         beside Holm over every tested claim of every committed report; its
                         positive control; and its verdicts (answer, claims figure, sections and
                         tables of claims) re-rendered from its results.csv by today's statistics,
                         so its body says what its evidence block says (claims.png redrawn
                         when the claims it shows changed)
  docs/findings.md       the table of every claim with its per-report and project-wide adjusted p
                         (between the ablate:claims markers)

Run it after committing or regenerating any report (`ablate run` and `ablate report` do not touch the
other reports). --check writes nothing and exits 1 when a file is stale, naming it.

  ablate ledger
  ablate ledger --check
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports", metavar="DIR", default="reports",
                        help="the folder of committed reports (default: reports)")
    parser.add_argument("--findings", metavar="FILE", default="docs/findings.md",
                        help="the findings page whose claims table is regenerated (default: docs/findings.md; "
                             "skipped when it does not exist)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale")


def run(args: argparse.Namespace) -> int:
    from ablate.errors import AblateError
    from ablate.report.ledger import stale_files, write_all

    reports = Path(args.reports)
    if not reports.is_dir():
        raise AblateError(f"--reports {reports}: no such folder; pass the folder of committed reports (reports/)")
    root = reports.resolve().parent
    findings = Path(args.findings)
    if args.check:
        stale = stale_files(reports, root, findings)
        for p in stale:
            print(f"stale: {p} (run `ablate ledger` to regenerate it)")
        if not stale:
            print(f"ablate ledger: every generated file under {reports}/ and {findings} is up to date")
        return 1 if stale else 0
    written = write_all(reports, root, findings)
    for p in written:
        print(f"wrote {p}")
    print(f"ablate ledger: {len(written)} file(s) written; the ledger is {reports / 'SHARED.md'}")
    return 0
