"""Whether a directory already holds a run: checked by the command line before Hydra starts and
by the host loop before it writes anything (imports no JAX code)."""

from __future__ import annotations

from pathlib import Path

from stoixlite.tracking.files import CHECKPOINT_DIRNAME, METRICS_FILE, RUN_OUTPUTS


class RunDirInUseError(FileExistsError):
    """A new run was given a directory that already holds a run's outputs."""


def held_outputs(run_dir: Path) -> list[str]:
    """The run outputs (:data:`~stoixlite.tracking.files.RUN_OUTPUTS`) ``run_dir`` holds."""
    return [name for name in RUN_OUTPUTS if (Path(run_dir) / name).exists()]


def logged_records(run_dir: Path) -> int:
    """The number of records in ``run_dir``'s ``metrics.jsonl`` (0 when there is none)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return 0
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def stopped_before_first_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run that stopped before saving its first checkpoint (Ctrl-C
    while compiling, non-finite values or a full disk in the first chunks, ``kill -9``): its
    ``checkpoints/`` holds no step, and it is there (the run created it) or no chunk was logged.
    Nothing of such a run can be resumed or lost: a new run, or ``resume=``, starts it afresh.
    A run whose ``checkpoints/`` is gone although chunks were logged is not such a run (its
    checkpoints were deleted, or it ran with ``checkpoint.enabled=false``)."""
    run_dir = Path(run_dir)
    ckpts = run_dir / CHECKPOINT_DIRNAME
    if ckpts.is_dir():
        return not any(p.name.isdigit() for p in ckpts.iterdir())
    return not ckpts.exists() and logged_records(run_dir) == 0


def afresh_line(run_dir: Path) -> str:
    """The one line said when a run directory that stopped before its first checkpoint is
    started afresh."""
    return (
        f"{run_dir} holds a run that stopped before its first checkpoint (nothing was saved): "
        "starting it afresh"
    )


def run_dir_in_use(run_dir: Path, held: list[str]) -> str:
    """One line refusing to start a new run in ``run_dir``, which holds ``held``."""
    return (
        f"{run_dir} already holds a run ({', '.join(held)}): continue it with "
        f"resume={run_dir}, or give the new run another directory (hydra.run.dir=...)"
    )
