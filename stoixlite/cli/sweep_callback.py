"""Hydra callback: a multirun with failed jobs ends with a one-line summary and a non-zero exit.

A failing multirun job does not stop the sweep: :mod:`stoixlite.rec_ppo` writes its error to
``<job dir>/error.txt`` and returns NaN, and the other jobs run on and keep their results. Once
every job has finished, :class:`FailedJobsSummary` prints one line to stderr naming the failed
jobs and where their ``error.txt`` is, and exits with status 1, so a script or scheduler running
the sweep sees the failure. A sweep without failures is untouched (exit 0).

Failed jobs are found two ways, so any launcher works: the jobs whose ``on_job_end`` reports a
failure or whose directory holds an ``error.txt`` (launchers that run jobs in this process), and
every ``error.txt`` written below the sweep directory since the multirun started (launchers
that run jobs elsewhere).

:class:`LightJobReturns` keeps a long multirun's launcher bounded: Hydra's sweepers keep every
job's :class:`JobReturn` until the sweep ends, and each carries two copies of configs (the job's
``cfg`` and Hydra's ``hydra_cfg``, about 140 KiB together), which nothing reads once the job's
end callbacks have run (the sweepers read ``return_value``, ``status`` and ``overrides``). Both
are enabled in ``configs/config.yaml`` through ``configs/hydra/callbacks/failed_jobs_summary.yaml``.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

ERROR_FILE = "error.txt"
EXIT_CODE = 1


def record_failure(run_dir: Path, message: str, summary: str | None = None) -> float:
    """A failed multirun job: ``message`` (its error, or traceback) in ``<run_dir>/error.txt`` and
    one log line, ``summary`` (default: the message's last line); returns NaN, the job's value for
    the sweeper (a failed trial for Optuna)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ERROR_FILE).write_text(message)
    summary = summary or message.strip().splitlines()[-1]
    logging.getLogger("stoixlite").error(
        "job failed (details in %s): %s", run_dir / ERROR_FILE, summary
    )
    return math.nan


def failure_summary(sweep_dir: Path, failed: list[Path], num_jobs: int | None) -> str:
    """One line: how many jobs failed and each one's error file (relative to the sweep dir)."""
    of = f" of {num_jobs}" if num_jobs else ""
    names = ", ".join(_relative(path, sweep_dir) for path in failed)
    return (
        f"multirun: {len(failed)}{of} jobs failed, the others finished; "
        f"errors in {sweep_dir}/{{{names}}}"
    )


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


class FailedJobsSummary(Callback):
    """Summarise failed multirun jobs in one line and exit non-zero (module docstring)."""

    def __init__(self) -> None:
        self._started = 0.0
        self._num_jobs = 0
        self._failed: dict[Path, None] = {}  # error files (or job dirs), in order, no repeats

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._started = time.time()
        self._num_jobs = 0
        self._failed.clear()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self._num_jobs += 1
        job_dir = _job_dir(config, job_return)
        if job_dir is None:
            return
        error = job_dir / ERROR_FILE
        if error.exists():
            self._failed[error.resolve()] = None
        elif job_return.status == JobStatus.FAILED:
            self._failed[job_dir.resolve()] = None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        if sweep_dir.is_dir():
            for error in sorted(sweep_dir.rglob(ERROR_FILE)):
                if error.stat().st_mtime >= self._started - 1.0:
                    self._failed[error.resolve()] = None
        if not self._failed:
            return
        print(failure_summary(sweep_dir, list(self._failed), self._num_jobs), file=sys.stderr)
        sys.stderr.flush()
        sys.exit(EXIT_CODE)


class LightJobReturns(Callback):
    """Drop each job's configs from its :class:`JobReturn` (``cfg`` and ``hydra_cfg`` set to None)
    once the job's end callbacks have read them (module docstring).

    Hydra calls ``on_job_end`` in the reverse order of ``hydra.callbacks``: this callback is
    listed first there so that it runs last, after every other callback (ours, and those a user
    adds) has seen the whole return."""

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        job_return.cfg = None
        job_return.hydra_cfg = None


def _job_dir(config: DictConfig, job_return: JobReturn) -> Path | None:
    for source in (job_return.hydra_cfg, config):
        output_dir = OmegaConf.select(source, "hydra.runtime.output_dir") if source else None
        if output_dir:
            return Path(str(output_dir))
    return None
