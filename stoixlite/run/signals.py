"""Stopping a run cleanly: SIGINT/SIGTERM become a stop request checked between chunks.

Before the training loop, a command-line process holds Ctrl-C and SIGTERM itself
(:func:`hold_ctrl_c`, installed by the entry point before anything slow is imported; "Ctrl-C"
below means either): the signal is recorded, and
raises ``KeyboardInterrupt`` only inside :func:`ctrl_c_raises` (where the entry point handles it,
e.g. to stop XLA's compiler midway). Elsewhere (imports, where an interrupted extension module
becomes an ``ImportError``; Hydra's own code) it is only recorded and acted on at the next check
(:func:`ctrl_c_pending`). A ``KeyboardInterrupt`` raised where Python drops it (a garbage
collector callback such as JAX's, a ``__del__``) is recorded all the same: the training loop does
not start while one is pending (:class:`StopRequest` raises it again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


# The stop signals an entry point holds: Ctrl-C, and SIGTERM (schedulers, ``kill``, ``timeout``).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The same signal again within this is the same request: a signal to a process group (a
# terminal's Ctrl-C, a scheduler) reaches a supervised process directly and by its supervisor.
SAME_REQUEST_S = 0.5


class _CtrlC:
    """The process's Ctrl-C (or SIGTERM) as held by :func:`hold_ctrl_c`: whether one arrived,
    which came first, and whether one raises at once."""

    pending: bool = False
    raises: bool = False
    signum: int = signal.SIGINT


def _record_ctrl_c(signum: int, frame: Any) -> None:
    if not _CtrlC.pending:
        _CtrlC.signum = signum
    _CtrlC.pending = True
    if _CtrlC.raises:
        raise KeyboardInterrupt


def hold_ctrl_c() -> dict[int, Any] | None:
    """Record Ctrl-C (SIGINT) and SIGTERM in this process from now on instead of raising or
    dying anywhere (both are called Ctrl-C below: each means stop); returns the handlers it
    replaced, by signal. For entry points only, from the main thread (elsewhere it does nothing
    and returns ``None``); it also applies where the process was started with SIGINT ignored (a
    background job of a script, some test harnesses): Ctrl-C means stop. Held already, it only
    stops raising: a Ctrl-C recorded so far stays pending."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _CtrlC.raises = False
    previous = {sig: signal.getsignal(sig) for sig in HELD_SIGNALS}
    if previous[signal.SIGINT] is _record_ctrl_c:
        return previous
    _CtrlC.pending, _CtrlC.signum = False, signal.SIGINT
    for sig in HELD_SIGNALS:
        signal.signal(sig, _record_ctrl_c)
    return previous


def release_ctrl_c(previous: dict[int, Any] | None) -> None:
    """Put back the handlers :func:`hold_ctrl_c` replaced (its return value)."""
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)


def interrupted_exit_code() -> int:
    """The exit code of a process stopped by a held Ctrl-C: 128 + the signal that came first
    (130 for SIGINT, 143 for SIGTERM; 130 where Python raised the ``KeyboardInterrupt``)."""
    return 128 + int(_CtrlC.signum if _CtrlC.pending else signal.SIGINT)


def ctrl_c_pending() -> bool:
    """Whether a Ctrl-C held by :func:`hold_ctrl_c` arrived (and was not acted on)."""
    return _CtrlC.pending


def raise_if_ctrl_c() -> None:
    """Raise ``KeyboardInterrupt`` when a held Ctrl-C arrived: a check between the steps of an
    entry point."""
    if _CtrlC.pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Within: a held Ctrl-C raises ``KeyboardInterrupt`` at once (one that arrived before
    raises on entry). Outside it is recorded only."""
    raise_if_ctrl_c()
    _CtrlC.raises = True
    try:
        yield
    finally:
        _CtrlC.raises = False


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Within: a held Ctrl-C is recorded only, and raises on the way out where it would have
    raised at once (inside :func:`ctrl_c_raises`). For steps that must not be cut midway:
    starting worker processes, where a child whose start was cut could not be ended."""
    raises = _CtrlC.raises
    _CtrlC.raises = False
    try:
        yield
    finally:
        _CtrlC.raises = raises
    if raises:
        raise_if_ctrl_c()


class TrainingInterrupted(SystemExit):
    """Raised after SIGINT/SIGTERM once the checkpoint of the current chunk is saved; or, with
    ``lost``, when the chunk after ``chunk`` could not be finished after the signal (the reason;
    e.g. the signal also ended a host env's workers), ``chunk`` then being the newest saved
    checkpoint (``None``: nothing saved)."""

    def __init__(self, signum: int, run_dir: Path, chunk: int | None, lost: str | None = None):
        super().__init__(128 + signum)
        self.signum, self.run_dir, self.chunk, self.lost = signum, run_dir, chunk, lost

    def __str__(self) -> str:
        name, resume = signal.Signals(self.signum).name, "python -m stoixlite.rec_ppo resume="
        if self.lost is None:
            return (
                f"stopped by {name} after chunk {self.chunk}; resume with `{resume}{self.run_dir}`"
            )
        if self.chunk is None:
            return (
                f"stopped by {name}; the chunk in progress was lost ({self.lost}); nothing was "
                f"saved in {self.run_dir}: the same command (or resume=) starts it afresh"
            )
        return (
            f"stopped by {name}; the chunk in progress was lost ({self.lost}); resume from "
            f"checkpoint {self.chunk} with `{resume}{self.run_dir}`"
        )


class StopRequest:
    """Context manager turning SIGINT/SIGTERM into a stop request checked at chunk boundaries.

    The first signal sets :attr:`signum`; a second one restores the default handlers and raises
    ``KeyboardInterrupt`` at once. A held Ctrl-C that arrived before (:func:`hold_ctrl_c`; one
    raised where Python dropped it) raises ``KeyboardInterrupt`` on entry: the loop does not
    start. Outside the main thread (where handlers cannot be installed) this does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._since = 0.0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum == signum and time.monotonic() - self._since < SAME_REQUEST_S:
            return  # one signal that reached the process twice (directly and by its supervisor)
        if self.signum is not None:
            self._restore()
            raise KeyboardInterrupt
        self.signum, self._since = signum, time.monotonic()
        log.warning(
            "%s received: finishing this chunk, saving a checkpoint, then stopping "
            "(send it again to abort at once)",
            signal.Signals(signum).name,
        )

    def __enter__(self) -> StopRequest:
        raise_if_ctrl_c()
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


def exit_now(code: int) -> None:
    """Flush what was written and end the process without interpreter teardown (after an
    interrupted compile, whose native state would crash it; in a multi-process run whose other
    processes are gone, where JAX's teardown would wait for them and then abort)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream: nothing more to write anyway
            pass
    os._exit(code)
