"""``ablate status FILE``: per arm, how many trials are done, running, failed and pending."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from ablate.states import FAILED, PENDING, RUNNING, STATES, zero_counts

if TYPE_CHECKING:
    from ablate.store import StudyStore
    from ablate.study import Study

HELP = "show a study's progress: per arm done / running / failed / pending, with errors"
DESCRIPTION = """\
Read the study store (nothing is created or changed) and print, for the design of one budget, a table
of arms with their trials done / running / failed / pending, then every failed trial with its error
(the exception; --verbose for the whole traceback) and every running trial with its worker, step and
last heartbeat.

  ablate status studies/quickstart.yaml
  ablate status studies/x.yaml --storage postgresql://... --budget full --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="study file (YAML)")
    parser.add_argument("--budget", default="default", help="budget to show (default: default)")
    parser.add_argument("--storage", metavar="URL",
                        help="study store (default: $ABLATE_STORAGE, else runs/<study>/store.journal)")
    parser.add_argument("--runs", default="runs", metavar="DIR", help="folder of run folders (default: runs)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-v", "--verbose", action="store_true", help="print whole tracebacks of failed trials")


def _error_line(error: str | None) -> str:
    """The most telling line of an error: the last non-empty line (a traceback's exception)."""
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def collect(study: Study, store: StudyStore | None, budget: str, storage: str | None = None) -> dict[str, Any]:
    """Everything ``ablate status`` prints, as JSON-ready data (``store`` None: never run there;
    ``storage``: its URL, to read a tuned study's best values)."""
    from ablate.running.session import status_plan

    plan, note = status_plan(study, store, budget, storage)
    current = {s.key: [s.arm, s.seed] for s in plan.specs}
    design = store.frozen_design(budget) if store is not None else None
    if design is None:
        design = {"trials": current}
        note = "not run yet at this budget" + (f"; {note}" if note else "")
    elif set(design["trials"]) != set(current):
        note = "the study file's design differs from the one frozen in the store (`ablate run` explains how)"
    statuses = store.status(budget, design=design) if store is not None else None
    if statuses is None:
        from ablate.store import TrialStatus

        statuses = [TrialStatus(key=k, arm=a, seed=int(s), state=PENDING) for k, (a, s) in design["trials"].items()]
    arms: dict[str, dict[str, int]] = {}
    for st in statuses:
        arms.setdefault(st.arm, zero_counts())[st.state] += 1
    now = time.time()
    failed, running = [], []
    for st in statuses:
        if st.state == FAILED:
            failed.append({"arm": st.arm, "seed": st.seed, "key": st.key, "attempts": len(st.attempts),
                           "error": st.error or ""})
        elif st.state == RUNNING:
            a = st.active
            seen = a.last_seen if a is not None else None
            running.append({
                "arm": st.arm, "seed": st.seed, "key": st.key,
                "worker": (a.claim or {}).get("name") if a is not None else None,
                "step": a.step if a is not None else None,
                "steps": (a.heartbeat or {}).get("steps") if a is not None else None,
                "heartbeat_age_s": None if seen is None else round(now - seen, 1),
                "stale": store.stale_reason(a) if a is not None else None,
            })
    totals = zero_counts()
    for c in arms.values():
        for k, v in c.items():
            totals[k] += v
    return {"study": study.name, "budget": budget, "store": store.description if store is not None else None,
            "note": note, "arms": arms, "totals": totals, "failed": failed, "running": running}


def render(data: dict[str, Any], verbose: bool = False) -> str:
    """The text ``ablate status`` prints."""
    out = [f"study {data['study']}, budget {data['budget']}; store: {data['store'] or '(none yet)'}"]
    if data["note"]:
        out.append(f"note: {data['note']}")
    cols = STATES
    width = max([len("arm"), len("total"), *(len(a) for a in data["arms"])])
    out.append("  " + "arm".ljust(width) + "".join(c.rjust(9) for c in cols))
    for arm, c in data["arms"].items():
        out.append("  " + arm.ljust(width) + "".join(str(c[k]).rjust(9) for k in cols))
    out.append("  " + "total".ljust(width) + "".join(str(data["totals"][k]).rjust(9) for k in cols))
    if data["failed"]:
        out.append("failed:")
        for f in data["failed"]:
            head = f"  {f['arm']} seed={f['seed']} (key {f['key']}, {f['attempts']} attempt(s))"
            if verbose:
                out.append(head + ":")
                out.extend("    " + ln for ln in f["error"].rstrip().splitlines())
            else:
                out.append(f"{head}: {_error_line(f['error'])}")
    if data["running"]:
        out.append("running:")
        for r in data["running"]:
            step = "no step reported yet" if r["step"] is None else f"step {r['step']}/{r['steps']}"
            age = "" if r["heartbeat_age_s"] is None else f", last heartbeat {r['heartbeat_age_s']:.0f} s ago"
            stale = f" STALE: {r['stale']}" if r["stale"] else ""
            out.append(f"  {r['arm']} seed={r['seed']} (key {r['key']}) on {r['worker']}: {step}{age}{stale}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Print the study's status; creates nothing."""
    from ablate.running.preflight import existing_store
    from ablate.running.session import RunOptions, make_settings
    from ablate.study import load_study

    study = load_study(args.file)
    settings = make_settings(study, args.budget, RunOptions(storage=args.storage, runs=args.runs))
    store = existing_store(study, settings, read_only=True)  # a read-only command: nothing on disk changes
    if store is None:
        print(f"note: study {study.name!r} is not in the store {settings.storage}: it has not been run there "
              "(ablate run FILE, with the same --storage)", file=sys.stderr)
    data = collect(study, store, args.budget, settings.storage)
    from ablate.tracking.outbox import unsent_files

    data["unsent"] = [p.parent.name for p in unsent_files(study.name, args.runs)]
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(render(data, verbose=args.verbose))
        if data["unsent"]:
            print(f"{len(data['unsent'])} finished trial(s) wait in {args.runs}/{study.name}/trials/<key>/unsent.json for "
                  "an MLflow server that did not answer: `ablate run` of the study uploads them")
    return 0
