"""The actor thread of a host run with ``arch.host_overlap`` (:mod:`stoixlite.run.host`): one
rollout collected in a thread of its own while the main thread runs the learner.

:class:`ActorThread` runs one call ``fn(stop)`` and hands its result, or its exception, to the
thread that waits for it (:meth:`ActorThread.result`). ``stop`` is a :class:`threading.Event`
that the call checks between env steps: :meth:`ActorThread.discard` sets it and waits for the
call to end (within one env step), dropping its result and its exception. :class:`InFlight`
holds the one rollout a run has in flight and the learner state it continues.

The thread is a daemon: an interpreter that exits without discarding it (an exception that
nothing caught) does not wait for it; the run's finaliser discards it before the envs close.
While the main thread waits it wakes every :data:`POLL_S` seconds, so that a signal (SIGINT,
SIGTERM; Python runs its handlers in the main thread only) is handled at once even when the
operating system delivered it to the actor thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

POLL_S = 0.05  # how often a waiting main thread wakes to run pending signal handlers


class Discarded(Exception):
    """Raised inside an actor's call when its stop flag is set: its result is not wanted."""


def check_stop(stop: threading.Event | None) -> None:
    """Raise :class:`Discarded` when ``stop`` is set (a call's check between env steps)."""
    if stop is not None and stop.is_set():
        raise Discarded


class ActorThread(Generic[T]):
    """``fn(stop)`` running in a daemon thread of its own from construction on (see the module
    docstring)."""

    def __init__(self, fn: Callable[[threading.Event], T], name: str = "stoixlite-actor"):
        self._stop = threading.Event()
        self._done = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[threading.Event], T]) -> None:
        try:
            self._result = fn(self._stop)
        except BaseException as err:  # handed to the waiting thread, which raises it
            self._error = err
        finally:
            self._done.set()

    def _wait(self) -> None:
        while not self._done.wait(POLL_S):
            pass
        self._thread.join()

    def result(self) -> T:
        """Wait for the call to end and return its result; the call's exception is raised here
        (the same exception object, with the actor thread's traceback)."""
        self._wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._result  # type: ignore[return-value]

    def discard(self) -> None:
        """Set the stop flag and wait for the call to end; its result and exception are
        dropped."""
        self._stop.set()
        self._wait()
        self._result = self._error = None


@dataclass
class InFlight:
    """The rollout a run has in flight (``actor``, or ``None``) and the learner state it
    continues (``continues``: the object the last update returned; an update given another
    state discards the rollout, :meth:`take`)."""

    actor: ActorThread[Any] | None = None
    continues: Any = None

    def take(self, state: Any) -> ActorThread[Any] | None:
        """The actor in flight if it continues ``state`` (the slot is emptied either way); one
        that does not is discarded first."""
        actor, continues = self.actor, self.continues
        self.actor = self.continues = None
        if actor is not None and continues is not state:
            actor.discard()
            return None
        return actor

    def put(self, actor: ActorThread[Any], continues: Any) -> None:
        """Hold ``actor`` as the rollout that continues ``continues``."""
        self.actor, self.continues = actor, continues

    def discard(self) -> None:
        """Discard the rollout in flight, if any (:meth:`ActorThread.discard`)."""
        actor, self.actor, self.continues = self.actor, None, None
        if actor is not None:
            actor.discard()
