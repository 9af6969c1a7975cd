"""Stopping a run cleanly: SIGINT/SIGTERM become a stop request checked between chunks."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class TrainingInterrupted(SystemExit):
    """Raised after SIGINT/SIGTERM once the checkpoint of the current chunk is saved."""

    def __init__(self, signum: int, run_dir: Path, chunk: int):
        super().__init__(128 + signum)
        self.signum, self.run_dir, self.chunk = signum, run_dir, chunk

    def __str__(self) -> str:
        return (
            f"stopped by {signal.Signals(self.signum).name} after chunk {self.chunk}; resume with "
            f"`python -m stoixlite.rec_ppo resume={self.run_dir}`"
        )


class StopRequest:
    """Context manager turning SIGINT/SIGTERM into a stop request checked at chunk boundaries.

    The first signal sets :attr:`signum`; a second one restores the default handlers and raises
    ``KeyboardInterrupt`` at once. Outside the main thread (where handlers cannot be installed)
    this does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            self._restore()
            raise KeyboardInterrupt
        self.signum = signum
        log.warning(
            "%s received: finishing this chunk, saving a checkpoint, then stopping "
            "(send it again to abort at once)",
            signal.Signals(signum).name,
        )

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def __exit__(self, *exc: object) -> None:
        self._restore()
