"""The study report: seaborn figures and the HTML / Markdown pages (see :mod:`ablate.report.build`).

``build_report(study, budget=..., tracking_uri=..., out_dir=...) -> Path`` (the path of
``reports/<study>/index.html``) is what ``ablate report`` and the end of ``ablate run`` call;
``write_report(study, results, out_dir)`` writes the report of results already loaded.
"""

from __future__ import annotations

from ablate.report.build import build_report, default_out_dir, write_report

__all__ = ["build_report", "default_out_dir", "write_report"]
