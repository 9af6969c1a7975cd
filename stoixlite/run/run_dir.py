"""Whether a directory already holds a run: checked by the command line before Hydra starts and
by the host loop before it writes anything (imports no JAX code)."""

from __future__ import annotations

from pathlib import Path

from stoixlite.tracking.files import RUN_OUTPUTS


class RunDirInUseError(FileExistsError):
    """A new run was given a directory that already holds a run's outputs."""


def held_outputs(run_dir: Path) -> list[str]:
    """The run outputs (:data:`~stoixlite.tracking.files.RUN_OUTPUTS`) ``run_dir`` holds."""
    return [name for name in RUN_OUTPUTS if (Path(run_dir) / name).exists()]


def run_dir_in_use(run_dir: Path, held: list[str]) -> str:
    """One line refusing to start a new run in ``run_dir``, which holds ``held``."""
    return (
        f"{run_dir} already holds a run ({', '.join(held)}): continue it with "
        f"resume={run_dir}, or give the new run another directory (hydra.run.dir=...)"
    )
