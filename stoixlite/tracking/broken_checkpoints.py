"""Checkpoints broken on disk: which ones orbax's manager cannot even start over (their metrics
or metadata file is not JSON: :func:`unreadable_metadata`) and moving broken ones out of the way,
to ``<run dir>/checkpoints.broken/`` (:func:`move_aside`, :func:`set_aside_unreadable`), kept for
inspection and never deleted."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from stoixlite.tracking.checkpoint_errors import one_line
from stoixlite.tracking.files import BROKEN_DIRNAME

log = logging.getLogger("stoixlite.tracking.checkpointing")


def unreadable_metadata(directory: Path) -> dict[int, str]:
    """``{step: reason}`` of the step directories whose orbax metrics or checkpoint metadata
    file (read by orbax's manager when it starts) is not a JSON object."""
    broken: dict[int, str] = {}
    if not directory.is_dir():
        return broken
    for step_dir in directory.iterdir():
        if not step_dir.name.isdigit():
            continue
        for name, path in (
            ("metrics", step_dir / "metrics" / "metrics"),
            ("metadata", step_dir / "_CHECKPOINT_METADATA"),
        ):
            if not path.is_file():
                continue
            try:
                value = json.loads(path.read_bytes())
            except (ValueError, UnicodeDecodeError, OSError) as err:
                broken[int(step_dir.name)] = f"{name}: {one_line(err)}"
                break
            if not isinstance(value, dict) and not (name == "metadata" and value is None):
                broken[int(step_dir.name)] = f"{name}: not a JSON object"
                break
    return broken


def move_aside(directory: Path, steps: list[int]) -> dict[int, Path]:
    """Move the checkpoints ``steps`` of ``directory`` to ``<its parent>/checkpoints.broken/``
    (kept, never deleted; a step moved before gets a ``.1``, ``.2`` ... suffix); returns where
    each went. No directory is created when there is nothing to move."""
    directory = Path(directory)
    target = directory.parent / BROKEN_DIRNAME
    if not any((directory / str(step)).exists() for step in steps):
        return {}
    target.mkdir(exist_ok=True)
    moved: dict[int, Path] = {}
    for step in steps:
        source = directory / str(step)
        if not source.exists():
            continue
        dest, n = target / str(step), 1
        while dest.exists():
            dest, n = target / f"{step}.{n}", n + 1
        source.rename(dest)
        moved[step] = dest
    return moved


def set_aside_unreadable(directory: str | Path, warn: bool = True) -> dict[int, Path]:
    """Move the checkpoints of ``directory`` whose metrics or metadata file is unreadable out of
    the way (they would stop orbax's manager from starting), one warning line each (``warn``);
    returns where each went. A writable :class:`Checkpointer` opened with ``set_aside=True``
    does this itself, and names in the same line the checkpoint it uses instead."""
    directory = Path(directory).resolve()
    broken = unreadable_metadata(directory)
    moved = move_aside(directory, list(broken))
    for step, why in broken.items() if warn else ():
        log.warning(
            "checkpoint %s is unreadable (%s), moved to %s",
            directory / str(step),
            why,
            moved.get(step),
        )
    return moved
