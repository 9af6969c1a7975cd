"""Several processes (hosts) training one run on JAX's distributed runtime.

With ``distributed.enabled=true`` every process calls :func:`initialize` before JAX starts
(``jax.distributed.initialize``; coordinator, process count and id from the config or, where
``null``, from the cluster environment: SLURM, Open MPI, ``JAX_COORDINATOR_ADDRESS``). The
processes then form one global device mesh (:mod:`stoixlite.run.sharding`): each process steps
its block of the envs, gradients and statistics are reduced across all devices, every process
computes the same metrics, only process 0 (:func:`is_primary`) writes metrics, W&B, plots and
the progress bar, and all processes write each checkpoint together (orbax, each its own shards).

Failures are one line on stderr and exit code 2, never a hang: a coordinator that does not
answer, or processes that do not all join, within ``distributed.timeout_s``
(:class:`JoinWatchdog`); processes configured with different process counts, run configs or
run directories (:func:`check_agreement`).

A process lost during the run (killed, preempted, crashed; the coordinator too) ends every
other process within ``distributed.heartbeat_timeout_s`` (:mod:`stoixlite.run.peers`, and
:mod:`stoixlite.run.supervisor` where JAX aborts): one line naming the lost process and the
resume command, exit code 1, instead of JAX's abort with a C++ stack trace. A stop signal to
one process stops all of them after the chunk, with its checkpoint (:func:`agreed_stop`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading

import jax
import numpy as np

from stoixlite.config.schema import DistributedConfig
from stoixlite.run import peers

EXIT_CODE = 2


class DistributedError(RuntimeError):
    """The processes of a run cannot work together (one line)."""


class JoinWatchdog:
    """Ends the process with one line and exit code 2 if :func:`jax.distributed.initialize` has
    not returned after ``timeout_s`` (JAX itself would abort with a fatal-error stack trace, or
    wait for its own, longer deadline)."""

    def __init__(self, timeout_s: float, message: str):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(timeout_s, message), daemon=True)

    def _watch(self, timeout_s: float, message: str) -> None:
        if not self._done.wait(timeout_s):
            print(f"error: {message}", file=sys.stderr, flush=True)
            os._exit(EXIT_CODE)

    def __enter__(self) -> JoinWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


def initialize(cfg: DistributedConfig) -> None:
    """Join the run's processes when ``cfg.enabled`` (once per process; a no-op otherwise).

    Must run before JAX computes anything in this process. Raises :class:`DistributedError`
    when this process cannot join (bad arguments, JAX already started); exits with one line when
    the others do not join within ``cfg.timeout_s``. Processes configured with different
    process counts are refused by :func:`check_agreement`.
    """
    if not cfg.enabled or jax.distributed.is_initialized():
        return
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise DistributedError(
            "distributed.enabled=true: JAX already started in this process; "
            "jax.distributed.initialize must come first"
        )
    where = cfg.coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS") or "auto-detected"
    message = (
        f"distributed: process {cfg.process_id if cfg.process_id is not None else '?'} could not "
        f"form the run with coordinator {where} within distributed.timeout_s={cfg.timeout_s}s "
        "(coordinator unreachable or not every process started)"
    )
    try:
        with JoinWatchdog(cfg.timeout_s, message):
            jax.distributed.initialize(
                coordinator_address=cfg.coordinator_address,
                num_processes=cfg.num_processes,
                process_id=cfg.process_id,
                initialization_timeout=cfg.timeout_s + 60,  # the watchdog answers first
                heartbeat_timeout_seconds=cfg.heartbeat_timeout_s,
                shutdown_timeout_seconds=cfg.timeout_s,  # all processes at the end
            )
    except (ValueError, TypeError, RuntimeError, IndexError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DistributedError(f"distributed: jax.distributed.initialize failed: {first}") from err
    peers.watch(jax.process_index(), jax.process_count(), cfg.heartbeat_timeout_s)


def is_primary() -> bool:
    """Whether this process writes the run's outputs (process 0; always with one process)."""
    return jax.process_index() == 0


def check_agreement(num_processes: int | None, **values: str) -> None:
    """Raise :class:`DistributedError` on every process unless all processes pass the same
    ``values`` (e.g. the run config and the run directory) and were configured with the same
    ``num_processes`` (``distributed.num_processes``; ``None``: the number that joined); a no-op
    with one process. Every process takes part, so all of them stop together."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    values = {**values, "distributed.num_processes": str(num_processes or jax.process_count())}
    names = sorted(values)
    mine = np.stack(
        [np.frombuffer(hashlib.sha256(values[n].encode()).digest(), np.uint8) for n in names]
    )
    first = np.asarray(multihost_utils.broadcast_one_to_all(mine))
    same = np.asarray(first == mine).all(axis=1)
    # every process learns which values differ anywhere, so all of them stop together
    differs = np.asarray(multihost_utils.process_allgather(~same)).reshape(-1, len(names))
    bad = [n for i, n in enumerate(names) if differs[:, i].any()]
    if bad:
        raise DistributedError(
            f"distributed: the processes disagree on {', '.join(bad)} (this is process "
            f"{jax.process_index()}); every process must run the same config in the same run "
            "directory"
        )


def agreed_stop(signum: int | None) -> int | None:
    """The stop request of the run at a chunk's end: the signal any process received (the first
    process's, by index), so that all of them save the chunk's checkpoint and stop together
    (one process stopping alone would leave the others waiting in the next collective); a
    no-op with one process."""
    if jax.process_count() == 1:
        return signum
    from jax.experimental import multihost_utils

    given = np.asarray(multihost_utils.process_allgather(np.int32(signum or 0))).reshape(-1)
    received = [int(s) for s in given if s]
    return received[0] if received else None
