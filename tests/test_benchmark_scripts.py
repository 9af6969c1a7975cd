"""Bad input to scripts/benchmark.py ends in a one-line error before anything is compiled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmark.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--networks", "nope"], "unknown network 'nope'"),
        (["--envs", "gymnax/Nope-v0"], "unknown env 'gymnax/Nope-v0'"),
        (["--num-envs", "6"], "--num-envs 6 must be a positive multiple of --minibatches"),
        (["--chunk-steps", "100"], "--chunk-steps must be at least one update"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ],
)
def test_bad_input_is_a_one_line_error(args, message):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr
