"""Where a result was made: the CPU model and core count of this machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` where there is one)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


def cpu_description() -> str:
    """``"<CPU model>, <n> cores"``."""
    return f"{cpu_model()}, {os.cpu_count()} cores"
