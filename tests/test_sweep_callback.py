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


def test_job_returns_drop_their_configs_and_the_summary_still_names_failed_jobs(tmp_path, capsys):
    """The multirun's callbacks as configs/hydra/callbacks configures them, in Hydra's order: each
    job's return keeps its status, value and overrides but drops its configs (the launcher holds
    every return until the sweep ends), after the failed-jobs summary has read the job's dir."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import JobReturn, JobStatus

    callbacks_cfg = OmegaConf.load(ROOT / "configs/hydra/callbacks/failed_jobs_summary.yaml")
    sweep = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(tmp_path)}, "callbacks": callbacks_cfg}}
    )
    callbacks = Callbacks(sweep)
    callbacks.on_multirun_start(config=sweep)
    returns = []
    for index, fails in enumerate([False, True, False]):
        job_dir = tmp_path / f"{index}_job"
        job_dir.mkdir()
        if fails:
            (job_dir / "error.txt").write_text("ConfigError: arch.seed=-1 is invalid")
        job_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(job_dir)}}})
        ret = JobReturn(
            overrides=[f"arch.seed={index}"],
            cfg=OmegaConf.create({"arch": {"seed": index}}),
            hydra_cfg=job_cfg,
            status=JobStatus.COMPLETED,
        )
        ret.return_value = float(index)
        callbacks.on_job_end(config=job_cfg, job_return=ret)
        returns.append(ret)
    assert [(r.cfg, r.hydra_cfg) for r in returns] == [(None, None)] * 3
    assert [r.return_value for r in returns] == [0.0, 1.0, 2.0]
    assert [r.overrides for r in returns] == [[f"arch.seed={i}"] for i in range(3)]
    with pytest.raises(SystemExit) as info:
        callbacks.on_multirun_end(config=sweep)
    assert info.value.code == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("multirun: 1 of 3 jobs failed") and "1_job/error.txt" in line
    assert "0_job" not in line and "2_job" not in line
