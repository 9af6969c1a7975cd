"""Where a result was made: the CPU model and core count of this machine, and its GPUs."""

from __future__ import annotations

import os
import platform
import subprocess
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


def gpu_names() -> list[str]:
    """The NVIDIA GPUs ``nvidia-smi`` lists (empty where there is none or no driver)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine_description() -> str:
    """``"<CPU model>, <n> cores"``, then ``"; GPU: <name> x <count>"`` where there are GPUs
    (JAX uses them when its CUDA plugin is installed)."""
    gpus = gpu_names()
    if not gpus:
        return cpu_description()
    return f"{cpu_description()}; GPU: {gpus[0]} x {len(gpus)}"
