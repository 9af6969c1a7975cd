"""Ctrl-C at any moment from a training process's start to its first checkpoint: exit 130, one
line on stderr, never a traceback, never a run that goes on to its end.

Each case starts ``python -m stoixlite.rec_ppo`` on a tiny config in a fresh process (its own
process group) and sends SIGINT once to the group, as a terminal's Ctrl-C does, some seconds
after a sign of how far the process got: ``hydra`` (the process has
mapped the YAML extension Hydra imports first: the entry point runs and holds Ctrl-C; then JAX
and the envs are imported, the config composed), Hydra's ``.hydra/`` (the config is being
parsed), ``config.yaml`` (the run is planned and compiles), ``metrics.jsonl`` (the first chunk is
logged and its checkpoint is being written). Python's own start-up before it runs the entry
point (``site``, a few hundred milliseconds on a busy machine) is Python's, not stoixlite's. The
exhaustive version (``slow``) sends it every quarter of a second from the first sign to the
first checkpoint (at most 40 moments, spread evenly). A ``KeyboardInterrupt`` that Python drops
(raised in a garbage collector callback, as JAX's ``_xla_gc_callback`` is) is forced in its own
case.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
RUN = [*TINY, "logger.plot=false", "checkpoint.every=1"]
LAST_CHECKPOINT = "2"  # arch.num_evaluations=2 chunks: a run that went on to its end saved it
TIMEOUT_S = 300
EXHAUSTIVE_MOMENTS = 40  # at most: every quarter second, or 40 spread evenly

# The one line a Ctrl-C ends with, by where it arrived: before the run started, before (or while)
# the first checkpoint is written, or in the first chunk (the loop saves it, then stops).
LINES = (
    "interrupted before the run started: nothing was written",
    "interrupted before the first checkpoint: nothing was saved in ",
    "interrupted before the next checkpoint; resume with `python -m stoixlite.rec_ppo resume=",
    "stopped by SIGINT after chunk 1; resume with `python -m stoixlite.rec_ppo resume=",
)


def _start(
    run_dir: Path, cwd: Path, code: str | None = None, extra: tuple[str, ...] = ()
) -> subprocess.Popen:
    """The run in a fresh process, in its own process group (a terminal's foreground job)."""
    entry = ["-c", code] if code is not None else ["-m", "stoixlite.rec_ppo"]
    return subprocess.Popen(
        [sys.executable, *entry, *RUN, *extra, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _group(proc: subprocess.Popen) -> list[str]:
    """The command lines of the processes alive in ``proc``'s process group (its own included)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):  # gone meanwhile
            continue
        if fields[0] != "Z" and int(fields[2]) == proc.pid:  # state, ppid, pgrp
            found.append(cmdline)
    return found


def _reached(proc: subprocess.Popen, run_dir: Path, sign: str) -> bool:
    """Whether the process got as far as ``sign`` (see the module docstring; ``workers``: a
    host env's first worker process is starting)."""
    if sign == "workers":
        return sum("forkserver" in cmd for cmd in _group(proc)) >= 2  # the server and a worker
    if sign != "hydra":
        return (run_dir / sign).exists()
    try:
        return "/_yaml." in Path(f"/proc/{proc.pid}/maps").read_text()
    except OSError:  # the process ended
        return True


def _wait_for(proc: subprocess.Popen, run_dir: Path, sign: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while proc.poll() is None and not _reached(proc, run_dir, sign):
        if time.monotonic() > deadline:
            raise AssertionError(f"the run never got to {sign}")
        time.sleep(0.005)


def _check_stopped(
    proc: subprocess.Popen, run_dir: Path, moment: str, sig: int = signal.SIGINT
) -> None:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 128 + sig, (moment, proc.returncode, out, err)
    assert len(lines) == 1 and lines[0].startswith(LINES), (moment, err)
    assert "Traceback" not in out + err and "Exception ignored" not in err, (moment, err)
    assert "final eval return" not in out, (moment, out)
    assert not (run_dir / "checkpoints" / LAST_CHECKPOINT).exists(), moment


def _interrupt_at(
    tmp_path: Path,
    sign: str,
    after_s: float = 0.0,
    extra: tuple[str, ...] = (),
    sig: int = signal.SIGINT,
) -> subprocess.Popen:
    """Start a run, send ``sig`` ``after_s`` seconds after it got to ``sign`` (see the module
    docstring) to its whole process group, as a terminal's Ctrl-C (or a scheduler's SIGTERM)
    does, and check how it ended."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, tmp_path, extra=extra)
    _wait_for(proc, run_dir, sign)
    time.sleep(after_s)
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    _check_stopped(proc, run_dir, f"{after_s} s after {sign}", sig)
    return proc


# One moment for each line a Ctrl-C can end with runs by default (the compile's with SIGTERM);
# the others (a fresh process each, importing JAX) under `pytest -m slow`, which also runs every
# quarter second (test_ctrl_c_stops_the_run_at_every_moment).
MOMENTS = [
    pytest.param("hydra", 0.0, marks=pytest.mark.slow),  # the entry point's imports
    ("hydra", 1.0),  # JAX's and the envs' imports, the config composed
    pytest.param(".hydra", 0.0, marks=pytest.mark.slow),  # the config parsed and checked
    # right after the run is planned: it compiles (by default with SIGTERM, which the entry point
    # holds the same way: test_sigterm_before_training_is_a_stop)
    pytest.param("config.yaml", 0.0, marks=pytest.mark.slow),
    ("metrics.jsonl", 0.0),  # the first chunk logged, its checkpoint written
]


@pytest.mark.parametrize(("sign", "after_s"), MOMENTS)
def test_ctrl_c_stops_the_run(tmp_path, sign, after_s):
    _interrupt_at(tmp_path, sign, after_s)


ASYNC_HOST = ("env=gymnasium/CartPole-v1", "env.vector=async")


@pytest.mark.parametrize(
    "sign",
    [
        "workers",  # the training vector's workers are starting (each imports the entry point)
        pytest.param("config.yaml", marks=pytest.mark.slow),  # the workers run; it compiles
        pytest.param("metrics.jsonl", marks=pytest.mark.slow),  # the loop: it saves, stops
    ],
)
def test_ctrl_c_stops_an_async_host_run_and_its_workers(tmp_path, sign):
    """A terminal's Ctrl-C reaches every process of the job: the workers of an asynchronous host
    env ignore it (no traceback from any of them), the run stops with its one line and ends
    them."""
    pytest.importorskip("gymnasium")
    proc = _interrupt_at(tmp_path, sign, extra=ASYNC_HOST)
    deadline = time.monotonic() + 30
    while _group(proc) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group(proc), _group(proc)  # the workers and the fork server ended with the run


@pytest.mark.parametrize(
    "sign",
    [
        pytest.param("hydra", marks=pytest.mark.slow),  # imports: recorded, acted on next
        "config.yaml",  # compiling: interrupted midway
    ],
)
def test_sigterm_before_training_is_a_stop(tmp_path, sign):
    """SIGTERM (a scheduler, ``kill``, ``timeout``) before the training loop is held as Ctrl-C
    is: one line, exit 143, nothing trained, never a silent death."""
    _interrupt_at(tmp_path, sign, 0.5 if sign == "hydra" else 0.0, sig=signal.SIGTERM)


def _first_checkpoint_s(tmp_path: Path) -> float:
    """Seconds from a run's first sign (``hydra``) to its first checkpoint, on this machine
    now."""
    run_dir = tmp_path / "timing"
    proc = _start(run_dir, tmp_path)
    _wait_for(proc, run_dir, "hydra")
    start = time.monotonic()
    _wait_for(proc, run_dir, "checkpoints/1")
    seconds = time.monotonic() - start
    proc.kill()
    proc.communicate()
    return seconds


@pytest.mark.slow
def test_ctrl_c_stops_the_run_at_every_moment(tmp_path):
    until = _first_checkpoint_s(tmp_path)
    step = max(0.25, until / EXHAUSTIVE_MOMENTS)
    for i in range(int(until / step) + 1):
        case = tmp_path / f"at_{i}"
        case.mkdir()
        _interrupt_at(case, "hydra", step * i)


# The Ctrl-C arrives while a garbage collector callback runs (JAX registers one,
# ``_xla_gc_callback``), just before the learn chunk compiles: the KeyboardInterrupt it raises is
# dropped by Python ("Exception ignored in"), and the run used to train to its end, exit 0.
_CTRL_C_IN_A_GC_CALLBACK = """
import gc, os, runpy, signal, sys, time
from stoixlite.run import build

compile_programs = build.Run.compile_programs

def interrupt_in_callback(phase, info):
    gc.callbacks.remove(interrupt_in_callback)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs here, inside the callback

def compile_after_a_dropped_ctrl_c(self, state, key):
    gc.callbacks.append(interrupt_in_callback)
    gc.collect()
    if interrupt_in_callback in gc.callbacks:
        raise AssertionError("the callback did not run")
    return compile_programs(self, state, key)

build.Run.compile_programs = compile_after_a_dropped_ctrl_c
sys.argv = ["rec_ppo", *sys.argv[1:]]
runpy.run_module("stoixlite.rec_ppo", run_name="__main__", alter_sys=True)
"""


def test_a_ctrl_c_python_dropped_still_stops_the_run(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(run_dir, tmp_path, code=_CTRL_C_IN_A_GC_CALLBACK)
    _check_stopped(proc, run_dir, "gc callback")
    assert not (run_dir / "checkpoints" / "1").exists()  # stopped before the loop started


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A tiny trained run to evaluate."""
    from conftest import run_plan

    from stoixlite.run import loop

    run_dir = tmp_path_factory.mktemp("ctrl_c_evaluate") / "run"
    loop.train(run_plan(RUN), run_dir)
    return run_dir


@pytest.mark.parametrize(
    "after_s",  # imports, building (as the training entry point's); compiling or playing
    [pytest.param(0.3, marks=pytest.mark.slow), pytest.param(1.5, marks=pytest.mark.slow), 4.0],
)
def test_ctrl_c_stops_an_evaluation(finished_run, tmp_path, after_s):
    """``python -m stoixlite.evaluate`` interrupted: exit 130, one line, no traceback, nothing
    written (or, where it already ended, its normal result)."""
    before = sorted(str(p) for p in finished_run.rglob("*"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "stoixlite.evaluate", str(finished_run), "--episodes", "2"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(after_s)
    interrupted = proc.poll() is None
    if interrupted:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    if not interrupted:
        assert after_s > 1.0 and proc.returncode == 0, (after_s, out, err)  # imports take longer
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130, (after_s, proc.returncode, out, err)
    assert lines == ["interrupted: the evaluation stopped, nothing was written"], (after_s, err)
    assert "Traceback" not in out + err and "Exception ignored" not in err, (after_s, err)
    assert sorted(str(p) for p in finished_run.rglob("*")) == before


_EVALUATE_CTRL_C_IN_A_GC_CALLBACK = """
import gc, os, runpy, signal, sys, time
from stoixlite.run import resume

load_run = resume.load_run

def interrupt_in_callback(phase, info):
    gc.callbacks.remove(interrupt_in_callback)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs here, inside the callback

def load_after_a_dropped_ctrl_c(*args, **kwargs):
    gc.callbacks.append(interrupt_in_callback)
    gc.collect()
    if interrupt_in_callback in gc.callbacks:
        raise AssertionError("the callback did not run")
    return load_run(*args, **kwargs)

resume.load_run = load_after_a_dropped_ctrl_c
sys.argv = ["evaluate", *sys.argv[1:]]
runpy.run_module("stoixlite.evaluate", run_name="__main__", alter_sys=True)
"""


def test_a_ctrl_c_python_dropped_still_stops_an_evaluation(finished_run, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _EVALUATE_CTRL_C_IN_A_GC_CALLBACK, str(finished_run)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    assert lines == ["interrupted: the evaluation stopped, nothing was written"], proc.stderr
    assert "seed" not in proc.stdout  # no result printed


def test_an_event_loop_left_by_a_ctrl_c_fails_quietly_at_teardown(monkeypatch):
    """After a Ctrl-C, an asyncio event loop it left unclosed (orbax reads through one) may be
    finalised after its self-pipe socket: its ``__del__`` fails on the closed descriptor. The
    entry points' hook drops that (the one line of the interruption stays the only line); the
    same failure without a Ctrl-C is reported."""
    import asyncio
    import gc

    from stoixlite.cli.process import setup_process
    from stoixlite.run import signals

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    setup_process()  # the entry points' hook, in front of the recorder

    def left_loop() -> None:
        loop = asyncio.new_event_loop()
        loop._ssock.close()  # closed first, as the interpreter's teardown may do

    monkeypatch.setattr(signals._CtrlC, "pending", True)
    left_loop()
    gc.collect()
    assert reported == []
    monkeypatch.setattr(signals._CtrlC, "pending", False)
    left_loop()
    gc.collect()
    assert [str(e) for e in reported] == ["Invalid file descriptor: -1"]
