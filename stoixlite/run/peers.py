"""A process of a multi-process run lost while the run goes on (killed, preempted, crashed; the
coordinator too): every other process ends with one line naming it and the resume command,
exit code :data:`EXIT_CODE`, within ``distributed.heartbeat_timeout_s``.

Two ways a process learns that another is gone:

* its next collective fails in the main thread (gloo: ``Connection reset by peer``):
  :func:`end_if_peer_lost` turns that into the line (with two processes the other one is the
  lost one; with more, the coordination service names it, below);
* JAX's coordination service notices a process whose heartbeats stop (within the heartbeat
  timeout), or a process notices that the coordinator is gone (at once), and JAX's client then
  aborts the process (SIGABRT and a C++ stack trace; its callback for this cannot be set from
  Python). The supervisor of the process (:mod:`stoixlite.run.supervisor`) writes the line
  instead, from what JAX logged.

The line is :func:`lost_line`'s, from what this process reports to its supervisor
(:func:`watch`, :func:`watch_run`). Nothing here changes a run with one process.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from stoixlite.run.signals import exit_now
from stoixlite.tracking.files import CHECKPOINT_DIRNAME

EXIT_CODE = 1
VERDICT_MARGIN_S = 15  # beyond the heartbeat timeout, for the service to name a lost process

# What a collective says when the process at its other end is gone (gloo on CPUs, NCCL).
_PEER_GONE = (
    "connection reset by peer",
    "connection closed by peer",
    "connection refused",
    "broken pipe",
    "socket closed",
    "remote process exited",
)


@dataclass
class _Watch:
    process: int
    count: int
    heartbeat_timeout_s: int
    run_dir: Path | None = None


_watch: _Watch | None = None
_supervisor_fd: int | None = None  # where this process reports to its supervisor
_ending = False


def report_to(fd: int) -> None:
    """This process is supervised: :func:`watch`, :func:`watch_run` and :func:`end_lost`
    report to ``fd`` (JSON lines)."""
    global _supervisor_fd
    _supervisor_fd = fd


def _report(**values: Any) -> None:
    if _supervisor_fd is None:
        return
    try:
        os.write(_supervisor_fd, (json.dumps(values) + "\n").encode())
    except OSError:  # the supervisor is gone: this process ends with it
        pass


def watch(process: int, count: int, heartbeat_timeout_s: int) -> None:
    """This process is ``process`` of ``count`` (after they joined)."""
    global _watch
    _watch = _Watch(process, count, heartbeat_timeout_s) if count > 1 else None
    _report(process=process, count=count, heartbeat_timeout_s=heartbeat_timeout_s)


def watch_run(run_dir: Path) -> None:
    """The run directory whose newest checkpoint and resume command the line names."""
    if _watch is not None:
        _watch.run_dir = Path(run_dir)
        _report(run_dir=str(run_dir))


def several_processes() -> bool:
    """Whether this process is one of several of a run."""
    return _watch is not None


def lost_processes(text: str, me: int | None) -> list[int]:
    """The processes other than ``me`` that an error of the coordination service names:
    ``Task 1 heartbeat timeout``, or the list after ``The following tasks are unhealthy
    (stopped sending heartbeats):`` (``1`` or ``/job:jax_worker/replica:0/task:1``, one a
    line)."""
    found = {int(n) for n in re.findall(r"\btask (\d+) heartbeat", text, flags=re.IGNORECASE)}
    for block in re.findall(
        r"stopped sending heartbeats\):(.*?)(?:The tasks|\n\s*\n|$)", text, re.S
    ):
        for token in block.split():
            number = token.rsplit("task:", 1)[-1].strip(",")
            if number.isdigit():
                found.add(int(number))
    return sorted(found - {me})


def newest_checkpoint(run_dir: Path) -> int | None:
    """The newest finalised checkpoint of ``run_dir`` (orbax renames a checkpoint's temporary
    directory only once every process wrote its shards)."""
    directory = run_dir / CHECKPOINT_DIRNAME
    if not directory.is_dir():
        return None
    return max((int(p.name) for p in directory.iterdir() if p.name.isdigit()), default=None)


def resume_words(run_dir: Path | None) -> str:
    """How to go on after the run stopped: the newest checkpoint and the resume command."""
    if run_dir is None:
        return "nothing was started: the same commands start the run again"
    step = newest_checkpoint(run_dir)
    if step is None:
        return f"nothing was saved in {run_dir}: the same commands start it afresh"
    return (
        f"checkpoint {step} is the newest complete one: start every process again with "
        f"`python -m stoixlite.rec_ppo resume={run_dir}` and its distributed.* settings"
    )


def lost_line(
    lost: list[int], how: str, me: int | None, count: int | None, run_dir: Path | None
) -> str:
    """The one line of process ``me`` (of ``count``) that ends because ``lost`` (empty:
    unknown) processes are gone: what was lost, how that was noticed, and how to go on."""
    names = [f"process {i}" + (" (the coordinator)" if i == 0 else "") for i in lost]
    who = " and ".join(names) if names else "another process"
    of = f" of the run's {count}" if count else ""
    this = f"process {me}" if me is not None else "this process"
    return f"error: distributed: {who}{of} was lost ({how}); {this} stops; {resume_words(run_dir)}"


def ending(code: int) -> None:
    """This process ends with its own line and exit code ``code``: its supervisor drops what
    JAX logs meanwhile (and exits with ``code`` should JAX abort the process first)."""
    _report(ending=code)


def end_lost(lost: list[int], how: str) -> NoReturn:
    """Write the line of a lost peer and end this process now (once, whichever thread comes
    first: another one waits to be ended with it)."""
    global _ending
    if _ending:
        while True:
            time.sleep(1)
    _ending = True
    ending(EXIT_CODE)
    w = _watch
    line = lost_line(lost, how, w and w.process, w and w.count, w and w.run_dir)
    print(line, file=sys.stderr, flush=True)
    exit_now(EXIT_CODE)


def _is_collective_failure(err: BaseException) -> BaseException | None:
    """``err`` or the error it was raised from, if it is JAX's runtime error or says that a
    collective failed (a failed gloo collective also surfaces as a ``ValueError`` where JAX
    dispatches a program)."""
    seen: BaseException | None = err
    while seen is not None:
        text = str(seen).lower()
        if type(seen).__name__ in ("JaxRuntimeError", "XlaRuntimeError") or any(
            s in text for s in ("gloo", "nccl", *_PEER_GONE)
        ):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def end_if_peer_lost(err: BaseException) -> None:
    """In a run of several processes, end this one with the line when ``err`` (raised in the
    main thread) is a collective failing because another process is gone; otherwise return
    (a failure of this process alone)."""
    failure = _is_collective_failure(err) if _watch is not None else None
    if _watch is None or failure is None:
        return
    first = " ".join(str(failure).split())[:160]
    if _watch.count == 2 and any(s in first.lower() for s in _PEER_GONE):
        end_lost([1 - _watch.process], f"its connection closed: {first}")
    # More processes: the coordination service names the lost one within the heartbeat timeout
    # (JAX then aborts this process and its supervisor writes the line); if it names none, the
    # failure is this process's own.
    deadline = time.monotonic() + _watch.heartbeat_timeout_s + VERDICT_MARGIN_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
