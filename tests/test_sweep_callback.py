"""The failed-jobs callback of sweeps (stoixlite/cli/sweep_callback.py): no failure, no summary;
error files of an earlier sweep are not counted. A whole multirun with failed jobs (non-zero exit,
one summary line naming their error files, the other jobs' results kept) runs in
tests/test_experiments.py (test_multirun_with_wandb_failing_job_and_aggregate)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from stoixlite.cli.sweep_callback import FailedJobsSummary

ROOT = Path(__file__).resolve().parents[1]


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
