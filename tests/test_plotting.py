"""Plots: no third-party log lines (matplotlib, Pillow) leak into a run's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Log everything to stderr (more verbose than Hydra's INFO setup), then plot with a fresh
# matplotlib config directory, so the font cache is rebuilt as on a new machine.
SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
import stoixlite.tracking.plots as plotting
if sys.argv[3] == "defaults":  # the control: undo the silencing
    for name in plotting.QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
plotting.plot_learning_curve(sys.argv[1], sys.argv[2], title="t")
"""


def _plot_stderr(tmp_path: Path, mode: str) -> list[str]:
    metrics = tmp_path / "metrics.jsonl"
    rows = [
        {"step": 64 * i, "train/episode_return": 0.1 * i, "eval/episode_return": i} for i in (1, 2)
    ]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / f"mpl_{mode}"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(metrics), str(tmp_path / f"{mode}.png"), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / f"{mode}.png").stat().st_size > 0
    return [line for line in proc.stderr.splitlines() if line.startswith(("matplotlib", "PIL"))]


def test_plot_leaks_no_third_party_log_lines(tmp_path):
    assert _plot_stderr(tmp_path, "quiet") == []
    # The check can fail: with matplotlib's loggers at their defaults the same plot logs.
    assert _plot_stderr(tmp_path, "defaults")
