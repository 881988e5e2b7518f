"""The study report, in three steps with one typed value between each:

1. :func:`ablate.report.statistics.compute_statistics` -> ``ReportStatistics`` (the inference of
   :mod:`ablate.stats.inference`, arm tables, diagnostics, compute fits);
2. :func:`ablate.report.findings.phrase` -> ``Findings`` (sentences with verdicts, formatted tables);
3. :mod:`ablate.report.build`: seaborn figures (:mod:`ablate.report.figures`), one
   :class:`ablate.report.page.ReportPage`, rendered as HTML and Markdown.

``build_report(study, budget=..., tracking_uri=..., out_dir=...) -> Path`` (the path of
``reports/<study>/index.html``) is what ``ablate report`` and the end of ``ablate run`` call;
``write_report(study, results, out_dir)`` writes the report of results already loaded. Uploading the
folder to the study's MLflow parent run is the caller's job (``ablate.commands.report.upload_report``).
"""

from __future__ import annotations

from ablate.report.build import build_report, default_out_dir, write_report

__all__ = ["build_report", "default_out_dir", "write_report"]
