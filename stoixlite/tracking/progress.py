"""Console progress (stderr): steps, SPS, ETA and the latest train/eval returns.

In a terminal a rich progress bar; elsewhere (CI logs, ``| tee``, a file) one plain line per
chunk, written whole: a line is never cut to a terminal width.
"""

from __future__ import annotations

import math
import sys
import time

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


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class TrainingProgress:
    """Progress over environment steps; disabled (no output) when ``enabled=False``.

    A rich bar when stderr is a terminal, otherwise plain whole lines (module docstring).
    """

    def __init__(self, total_steps: int, description: str, enabled: bool = True):
        console = Console(stderr=True)
        self._plain = enabled and not console.is_terminal
        self._total, self._description = total_steps, description
        self._started = time.perf_counter()
        self._first_step: int | None = None
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
            disable=not enabled or self._plain,
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
        if self._plain:
            self._plain_line(step, stats, bool(record))

    def _plain_line(self, step: int, stats: str, has_record: bool) -> None:
        """``<description> <step>/<total> steps <elapsed> ETA <eta> <stats>``, one whole line."""
        if self._first_step is None or not has_record:  # start (or restart after a rollback)
            self._first_step, self._started = step, time.perf_counter()
            return
        elapsed = time.perf_counter() - self._started
        done = step - self._first_step
        eta = elapsed / done * (self._total - step) if done > 0 else 0.0
        print(
            f"{self._description} {step:,}/{self._total:,} steps {_clock(elapsed)} "
            f"ETA {_clock(eta)} {stats}",
            file=sys.stderr,
            flush=True,
        )
