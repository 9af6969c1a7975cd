"""The process-wide settings of a command-line entry point, applied once before a run starts.

Library code below the entry points changes no process-wide state; what a command-line process
wants quieter is set here, by :func:`setup_process`, called first by ``python -m
stoixlite.rec_ppo`` and ``python -m stoixlite.evaluate``:

* the ``jax`` logger at WARNING, ``absl`` at WARNING (the trainer; orbax is chatty at INFO) or
  ERROR (the evaluator: orbax's read-only notices);
* ``sys.unraisablehook`` drops the ``RuntimeError('Event loop is closed')`` that orbax's aborted
  reads of a broken checkpoint raise later from their worker threads (printed as bare tracebacks
  otherwise), and the ``KeyboardInterrupt`` that a Ctrl-C raised where Python cannot raise it
  (a garbage collector callback such as JAX's ``_xla_gc_callback``, a ``__del__``): the entry
  point recorded that Ctrl-C and acts on it (:func:`stoixlite.run.signals.hold_ctrl_c`), and,
  after such a Ctrl-C, the closed-socket ``ValueError`` of an asyncio event loop it left unclosed
  (orbax reads through one), whose self-pipe socket the interpreter's teardown closed before the
  loop's ``__del__`` ran; every other unraisable exception is reported as before.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


def setup_process(absl_level: int = logging.WARNING) -> None:
    """Apply the entry point's process-wide settings (idempotent)."""
    logging.getLogger("jax").setLevel(logging.WARNING)
    logging.getLogger("absl").setLevel(absl_level)
    _drop_aborted_reads()


def _drop_aborted_reads() -> None:
    previous = sys.unraisablehook
    if getattr(previous, "_drops_aborted_reads", False):
        return

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
            return
        if isinstance(exc, KeyboardInterrupt):  # recorded by the entry point's handler
            return
        if _event_loop_left_by_ctrl_c(unraisable):
            return
        previous(unraisable)

    hook._drops_aborted_reads = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _event_loop_left_by_ctrl_c(unraisable: Any) -> bool:
    """Whether ``unraisable`` is an unclosed event loop's ``__del__`` failing on its closed
    self-pipe (``ValueError: Invalid file descriptor: -1``) after a Ctrl-C stopped the process."""
    from stoixlite.run.signals import ctrl_c_pending

    exc = unraisable.exc_value
    return (
        ctrl_c_pending()
        and isinstance(exc, ValueError)
        and str(exc).startswith("Invalid file descriptor")
        and getattr(unraisable.object, "__qualname__", "") == "BaseEventLoop.__del__"
    )
