"""Console progress bar (rich): steps, SPS, ETA and the latest train/eval returns."""

from __future__ import annotations

import math

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _fmt(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3f}"


class TrainingProgress:
    """A rich progress bar over environment steps; disabled (no output) when ``enabled=False``."""

    def __init__(self, total_steps: int, description: str, enabled: bool = True):
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=Console(stderr=True),
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total_steps, stats="compiling...")

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, step: int, record: dict[str, float]) -> None:
        stats = (
            f"sps {record.get('train/sps', 0):,.0f}"
            f" | train {_fmt(record.get('train/episode_return'))}"
            f" | eval {_fmt(record.get('eval/episode_return'))}"
        )
        self._progress.update(self._task, completed=step, stats=stats)
