"""Sweeps: a multirun with failed jobs exits non-zero with a one-line summary of them, after the
other jobs have finished and kept their results (stoixlite/cli/sweep_callback.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY
from omegaconf import OmegaConf

from stoixlite.cli.sweep_callback import FailedJobsSummary

ROOT = Path(__file__).resolve().parents[1]


def test_two_job_multirun_with_one_bad_input(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "stoixlite.rec_ppo",
        "-m",
        *TINY,
        "logger.plot=false",
        "system.lr=0.001,-1",  # the second job has an invalid learning rate
        f"hydra.sweep.dir={sweep}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    (good,) = [j for j in jobs if (j / "metrics.jsonl").exists()]
    (bad,) = [j for j in jobs if (j / "error.txt").exists()]
    assert "system.lr" in (bad / "error.txt").read_text()
    assert not (good / "error.txt").exists()
    summary = [line for line in proc.stderr.splitlines() if line.startswith("multirun:")]
    assert len(summary) == 1 and proc.stderr.rstrip().endswith(summary[0])
    assert "1 of 2 jobs failed" in summary[0]
    assert f"{sweep.resolve()}/{{{bad.name}/error.txt}}" in summary[0]
    assert "Traceback" not in proc.stderr


def _sweep_config(sweep: Path):
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}})


def test_callback_without_failures_exits_normally(tmp_path):
    (tmp_path / "0_job").mkdir()
    callback = FailedJobsSummary()
    callback.on_multirun_start(_sweep_config(tmp_path))
    callback.on_multirun_end(_sweep_config(tmp_path))  # no SystemExit


def test_callback_ignores_error_files_from_an_earlier_sweep(tmp_path, capsys):
    old = tmp_path / "0_old" / "error.txt"
    old.parent.mkdir()
    old.write_text("old failure")
    os.utime(old, (1_000_000, 1_000_000))
    callback = FailedJobsSummary()
    callback.on_multirun_start(_sweep_config(tmp_path))
    callback.on_multirun_end(_sweep_config(tmp_path))
    new = tmp_path / "1_new" / "error.txt"
    new.parent.mkdir()
    new.write_text("new failure")
    with pytest.raises(SystemExit) as info:
        callback.on_multirun_end(_sweep_config(tmp_path))
    assert info.value.code == 1
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "1_new/error.txt" in line and "0_old" not in line
