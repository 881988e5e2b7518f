"""keep_freed_memory: freed memory stays mapped in the process (glibc), so a worker's next trial reuses it."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = r"""
import sys
import torch
from ablate.running.memory import keep_freed_memory

if sys.argv[1] == "keep":
    assert keep_freed_memory()
page = 4096
def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20
before = resident_mib()
x = torch.ones(16 * 2**20 // 4)  # 16 MiB, touched
during = resident_mib()
del x
after = resident_mib()
print(f"{during - before:.1f} {after - before:.1f}")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt, Linux only")
def test_freed_memory_stays_resident_only_when_kept():
    def run(mode: str) -> tuple[float, float]:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
        during, after = map(float, out.stdout.split())
        return during, after

    during, after = run("default")  # 16 MiB is above glibc's initial mmap threshold: unmapped on free
    assert during > 15 and after < 4
    during, after = run("keep")  # served from the heap and kept for the next allocation
    assert during > 15 and after > 15
