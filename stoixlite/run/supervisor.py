"""The supervisor of one process of a multi-process run: the command line's process, which
forks the training process and waits for it, so that the way JAX ends a process whose peer is
gone (an abort: SIGABRT, a C++ stack trace) becomes the run's one line and exit code 1.

JAX's distributed client aborts its process when the coordination service reports a lost
process (its heartbeats stopped) or cannot be reached (the coordinator, process 0, is gone:
JAX documents that every process then fails), and the callback that would replace the abort
cannot be set from Python. So :func:`supervise`, called by the entry point of a
``distributed.enabled`` run before JAX starts, forks:

* the child trains (it returns from :func:`supervise`); what native code writes to its stderr
  (file descriptor 2: absl log lines, abort traces) goes through a pipe to the supervisor,
  while Python's ``sys.stderr`` (progress, the one-line errors) still writes to the terminal;
  the child reports its process index, process count and run directory to the supervisor
  (:mod:`stoixlite.run.peers`), and ends if the supervisor does;
* the supervisor forwards the native lines, holding each for :data:`HOLD_S` seconds; forwards
  SIGINT and SIGTERM (a signal that reached both is one request: :class:`~stoixlite.run.
  signals.StopRequest`); and when the child ends, exits with its exit code. A child killed by a
  signal (JAX's abort) has the held lines dropped, and the supervisor writes the one line
  instead: the lost process named from what JAX logged (:func:`~stoixlite.run.peers.
  lost_processes`; the coordinator when it could not be reached), and the resume command.

Runs with one process are not supervised.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import re
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from stoixlite.run import peers
from stoixlite.run.signals import exit_now

HOLD_S = 3.0  # how long a native line waits before it is forwarded (an abort follows within it)
SUPERVISED = "STOIXLITE_SUPERVISED"  # set in the child: never supervised twice
_FORWARDED = (signal.SIGINT, signal.SIGTERM)

# The start of what native code writes: an absl log line, a stack trace, a C++ termination.
_NATIVE = re.compile(
    r"^([IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]|\*\*\* |\s+@\s+0x|PC: @|"
    r"terminate called|\s+what\(\):)"
)
_COORDINATOR_GONE = (
    "failed to send rpc to coordination service",
    "socket closed",
    "failed to connect",
    "coordination service is unavailable",
)


def supervise() -> None:
    """Fork: the child returns and trains; this process supervises it and ends with it (never
    returns). A no-op where the platform cannot fork, or in a supervised child."""
    if not hasattr(os, "fork") or os.environ.get(SUPERVISED):
        return
    native_r, native_w = os.pipe()
    report_r, report_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        os.environ[SUPERVISED] = "1"
        os.close(native_r)
        os.close(report_r)
        _end_with_parent()
        terminal = os.dup(2)
        os.dup2(native_w, 2)
        os.close(native_w)
        sys.stderr = _text(terminal, sys.stderr)
        peers.report_to(report_w)
        return
    os.close(native_w)
    os.close(report_w)
    exit_now(Supervisor(pid, native_r, report_r).run())


def _text(fd: int, like: Any) -> io.TextIOWrapper:
    """A line-buffered text stream on ``fd`` with the encoding of the stream ``like``."""
    return io.TextIOWrapper(
        open(fd, "wb", buffering=0, closefd=True),  # noqa: SIM115 (the process's stderr)
        encoding=getattr(like, "encoding", None) or "utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


def _end_with_parent() -> None:
    """This (child) process ends when its supervisor does: at once on Linux
    (``PR_SET_PDEATHSIG``), else within a second (a watching thread)."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it ended before prctl
        os._exit(128 + signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(128 + signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="supervisor-watch").start()


class Supervisor:
    """The supervising side (see the module docstring)."""

    def __init__(self, child: int, native: int, reports: int):
        self.child, self.native, self.reports = child, native, reports
        self.held: list[tuple[float, str]] = []  # native lines waiting for HOLD_S
        self.seen: list[str] = []  # every native line, for the reason of an abort
        self.partial = {native: b"", reports: b""}
        self.info: dict[str, Any] = {}
        self.ending: int | None = None  # the child's exit code as it ends with its own line

    def run(self) -> int:
        for sig in _FORWARDED:
            signal.signal(sig, self._forward)
        open_fds = [self.native, self.reports]
        status: int | None = None
        while status is None:
            ready, _, _ = select.select(open_fds, [], [], 0.25)
            for fd in ready:
                data = os.read(fd, 65536)
                if not data:
                    open_fds.remove(fd)
                    continue
                self._take(fd, data)
            self._release(time.monotonic() - HOLD_S)
            done, status_now = os.waitpid(self.child, os.WNOHANG)
            if done:
                status = status_now
        self._drain(open_fds)
        return self._finish(status)

    def _forward(self, signum: int, frame: Any) -> None:
        try:
            os.kill(self.child, signum)
        except ProcessLookupError:
            pass

    def _drain(self, fds: list[int]) -> None:
        """What the child wrote before it ended (its own children may keep the pipes open)."""
        for fd in fds:
            os.set_blocking(fd, False)
            try:
                while data := os.read(fd, 65536):
                    self._take(fd, data)
            except BlockingIOError:
                pass
        for fd, rest in self.partial.items():
            if rest:
                self._take(fd, b"\n")

    def _take(self, fd: int, data: bytes) -> None:
        lines = (self.partial[fd] + data).split(b"\n")
        self.partial[fd] = lines.pop()
        if fd == self.reports:
            for line in lines:
                try:
                    self.info.update(json.loads(line))
                except ValueError:
                    continue
            if self.info.get("ending") is not None:
                self.ending = int(self.info["ending"])
            return
        native = False  # a native message's later lines come in the same write
        now = time.monotonic()
        for raw in lines:
            line = raw.decode(errors="backslashreplace")
            native = native or bool(_NATIVE.match(line))
            if native:
                self.held.append((now, line))
                self.seen = [*self.seen[-200:], line]
            else:
                _write(line)

    def _release(self, before: float) -> None:
        while self.held and self.held[0][0] <= before:
            _, line = self.held.pop(0)
            if self.ending is None:  # a child ending with its own line: what JAX says goes
                _write(line)

    def _finish(self, status: int) -> int:
        if os.WIFEXITED(status):
            self._release(float("inf"))
            return os.WEXITSTATUS(status)
        signum = os.WTERMSIG(status)
        self.held = []  # the abort's own lines: the one line below says what happened
        if self.ending is not None:  # JAX aborted it after it wrote its own line
            return self.ending
        print(self.line(signum), file=sys.stderr, flush=True)
        return peers.EXIT_CODE if signum == signal.SIGABRT else 128 + signum

    def line(self, signum: int) -> str:
        """The one line of a child that ended by ``signum``: a lost process named from JAX's
        lines, or the signal."""
        me, count = self.info.get("process"), self.info.get("count")
        run_dir = Path(self.info["run_dir"]) if self.info.get("run_dir") else None
        said = "\n".join(self.seen)
        lost = peers.lost_processes(said, me)
        heartbeat = self.info.get("heartbeat_timeout_s")
        if lost:
            how = f"no heartbeat within distributed.heartbeat_timeout_s={heartbeat}s"
            return peers.lost_line(lost, how, me, count, run_dir)
        if me != 0 and any(s in said.lower() for s in _COORDINATOR_GONE):
            return peers.lost_line([0], "it cannot be reached", me, count, run_dir)
        name = signal.Signals(signum).name
        this = f"process {me}" if me is not None else "a process"
        last = next((s for s in reversed(self.seen) if s.startswith("F")), "")
        why = f": {last.split('] ', 1)[-1][:200]}" if last else ""
        return (
            f"error: distributed: {this} of the run ended by {name}{why}; "
            f"{peers.resume_words(run_dir)}"
        )


def _write(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode(errors="backslashreplace"))
    except OSError:  # a closed terminal: nothing more to write
        pass
