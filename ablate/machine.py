"""The processor's name, as trial runs, reports and benchmarks state it (one reader for all of them)."""

from __future__ import annotations

import platform

__all__ = ["cpu_name"]


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (e.g. ``Intel(R) Xeon(R) Processor``), else what
    :mod:`platform` says (``platform.processor()``, else the architecture), never empty."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    if name:
                        return name
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
