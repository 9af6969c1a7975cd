"""How the checkpointer calls orbax: quietly, and leaving nothing running behind a failed read.

Orbax runs each read or write as a coroutine in an event loop of its own
(``orbax.checkpoint._src.asyncio_utils.run_sync``: ``run_until_complete`` then ``close``), and
reads the arrays of a checkpoint concurrently (``asyncio.gather`` over every array and shard).
When one read fails (a zeroed or truncated data file), ``gather`` raises at once and the loop
is closed with the other reads still pending. Those coroutines are closed later, whenever the
garbage collector reaches them (often during the next chunk of training), and each then raises
from its ``except BaseException`` clause: Python prints it as ``Exception ignored in: <coroutine
object _read_array_index_and_device_put>`` with a TensorStore spec (tens of lines each), and
TensorStore's threads add ``RuntimeError: Event loop is closed`` tracebacks as the pending reads
complete. A broken checkpoint of a few hundred arrays printed thousands of such lines after its
one-line warning.

:func:`quiet_orbax` scopes every call into orbax: the event loops orbax creates meanwhile cancel
and wait for their pending tasks before they close, and drop what TensorStore's threads schedule
on them once closed (a cancelled read's result: :class:`SettlingLoop`, through an event loop
policy set for the call's duration only), so a failed read ends with nothing left running, and
orbax's own absl log lines (what it cannot read, raw ERROR lines) are silenced, and orbax's I/O
telemetry is off (:func:`without_io_telemetry`); all are restored after. No process-wide hook is
installed.

The telemetry: before and after writing or reading the arrays of a checkpoint, orbax sums
TensorStore's byte counters (``tensorstore_utils.get_tensorstore_raw_bytes``, through
``tensorstore.experimental_collect_matching_metrics``) to log a throughput at absl's INFO level.
TensorStore (0.1.86) keeps an extra reference to every value of the dicts that call returns, so
each save leaked a few dozen lists and strings (about 30 KiB of a run's memory per checkpoint, for
good). The checkpointer logs no throughput, so within its calls that sum is not taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from contextvars import Context
from types import ModuleType

# How long a closing loop waits for its cancelled tasks (they end at their next await: a
# cancelled TensorStore read returns at once); a task still running after it is left as before.
SETTLE_TIMEOUT_S = 30.0


class SettlingLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``close`` first cancels the tasks still pending on it and waits for
    them (at most :data:`SETTLE_TIMEOUT_S`), retrieving their results, as ``asyncio.run`` does
    for its own loop."""

    def close(self) -> None:
        if not self.is_running() and not self.is_closed():
            pending = [task for task in asyncio.all_tasks(self) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                done, _ = self.run_until_complete(asyncio.wait(pending, timeout=SETTLE_TIMEOUT_S))
                for task in done:  # retrieved: never reported as "never retrieved"
                    if not task.cancelled():
                        task.exception()
        super().close()

    def call_soon_threadsafe(
        self, callback: Callable[..., object], *args: object, context: Context | None = None
    ) -> asyncio.Handle | None:
        """As the base loop's, except that once the loop is closed the callback is dropped: a
        TensorStore read cancelled by :meth:`close` still completes in TensorStore's threads,
        which then schedule its result on this loop (nothing awaits it any more); the base loop
        raises ``RuntimeError: Event loop is closed`` there, which Python reports as an
        "Exception ignored" traceback."""
        try:
            return super().call_soon_threadsafe(callback, *args, context=context)
        except RuntimeError:
            if self.is_closed():
                return None
            raise


class _SettlingPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return SettlingLoop()


_scope_lock = threading.RLock()


@contextlib.contextmanager
def settled_event_loops() -> Iterator[None]:
    """Event loops created meanwhile are :class:`SettlingLoop` s; the policy before is restored
    after (calls may nest and come from several threads: one scope at a time)."""
    with _scope_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # policies: deprecated in 3.14
        previous = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(_SettlingPolicy())
        try:
            yield
        finally:
            asyncio.set_event_loop_policy(previous)


TELEMETRY_NAME = "get_tensorstore_raw_bytes"  # orbax's function that sums the byte counters


def _telemetry_module() -> ModuleType | None:
    """orbax's module that sums TensorStore's byte counters, if this orbax has it."""
    try:
        from orbax.checkpoint._src.serialization import tensorstore_utils
    except ImportError:
        return None
    return tensorstore_utils if hasattr(tensorstore_utils, TELEMETRY_NAME) else None


def _no_raw_bytes(*args: object, **kwargs: object) -> None:
    """orbax's throughput log skips itself when the starting byte count is None."""
    return None


@contextlib.contextmanager
def without_io_telemetry() -> Iterator[None]:
    """orbax's I/O telemetry off for the duration (module docstring): its byte count is None, so
    orbax neither collects TensorStore's metrics nor logs a throughput; restored after. Under the
    same lock as :func:`settled_event_loops` (one scope at a time)."""
    module = _telemetry_module()
    if module is None:
        yield
        return
    with _scope_lock:
        previous = getattr(module, TELEMETRY_NAME)
        setattr(module, TELEMETRY_NAME, _no_raw_bytes)
        try:
            yield
        finally:
            setattr(module, TELEMETRY_NAME, previous)


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
    """One call into orbax (a read of a possibly broken checkpoint, a save), whose errors the
    checkpointer reports in one line each: orbax's absl log silenced, its event loops settled
    (:func:`settled_event_loops`) and its I/O telemetry off (:func:`without_io_telemetry`) for
    the duration; the absl level is restored after."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with settled_event_loops(), without_io_telemetry():
            yield
    finally:
        logger.setLevel(level)
