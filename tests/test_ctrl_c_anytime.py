"""Ctrl-C at any moment from a training process's start to its first checkpoint: exit 130, one
line on stderr, never a traceback, never a run that goes on to its end.

Each case starts ``python -m stoixlite.rec_ppo`` on a tiny config in a fresh process and sends
SIGINT once, at a moment given by a delay after the start (the imports of Hydra, JAX and the
envs) or by what the run has written so far (Hydra's ``.hydra/``: the config is being parsed;
``config.yaml``: the run is planned and compiles; ``metrics.jsonl``: the first chunk is logged and
its checkpoint is being written). The exhaustive version (``slow``) sends it every quarter of a
second from the start to the first checkpoint. A ``KeyboardInterrupt`` that Python drops (raised
in a garbage collector callback, as JAX's ``_xla_gc_callback`` is) is forced in its own case.
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

# The one line a Ctrl-C ends with, by where it arrived: before the run started, before (or while)
# the first checkpoint is written, or in the first chunk (the loop saves it, then stops).
LINES = (
    "interrupted before the run started: nothing was written",
    "interrupted before the first checkpoint: nothing was saved in ",
    "interrupted before the next checkpoint; resume with `python -m stoixlite.rec_ppo resume=",
    "stopped by SIGINT after chunk 1; resume with `python -m stoixlite.rec_ppo resume=",
)


def _start(run_dir: Path, cwd: Path, code: str | None = None) -> subprocess.Popen:
    entry = ["-c", code] if code is not None else ["-m", "stoixlite.rec_ppo"]
    return subprocess.Popen(
        [sys.executable, *entry, *RUN, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(proc: subprocess.Popen, path: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while proc.poll() is None and not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _check_stopped(proc: subprocess.Popen, run_dir: Path, moment: str) -> None:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130, (moment, proc.returncode, out, err)
    assert len(lines) == 1 and lines[0].startswith(LINES), (moment, err)
    assert "Traceback" not in out + err and "Exception ignored" not in err, (moment, err)
    assert "final eval return" not in out, (moment, out)
    assert not (run_dir / "checkpoints" / LAST_CHECKPOINT).exists(), moment


def _interrupt_at(tmp_path: Path, moment: str | float) -> None:
    """Start a run, send SIGINT at ``moment`` (seconds after the start, or the name of the first
    file of the run directory to wait for), and check how it ended."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, tmp_path)
    if isinstance(moment, str):
        _wait_for(proc, run_dir / moment)
    else:
        time.sleep(moment)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    _check_stopped(proc, run_dir, str(moment))


@pytest.mark.parametrize("moment", [0.5, ".hydra", "config.yaml", "metrics.jsonl"])
def test_ctrl_c_stops_the_run(tmp_path, moment):
    _interrupt_at(tmp_path, moment)


def _first_checkpoint_s(tmp_path: Path) -> float:
    """Seconds from the start of a run to its first checkpoint, on this machine now."""
    run_dir = tmp_path / "timing"
    start = time.monotonic()
    proc = _start(run_dir, tmp_path)
    _wait_for(proc, run_dir / "checkpoints" / "1")
    seconds = time.monotonic() - start
    proc.kill()
    proc.communicate()
    return seconds


@pytest.mark.slow
def test_ctrl_c_stops_the_run_at_every_moment(tmp_path):
    until = _first_checkpoint_s(tmp_path)
    for i in range(int(until / 0.25) + 1):
        case = tmp_path / f"at_{i}"
        case.mkdir()
        _interrupt_at(case, 0.1 + 0.25 * i)


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
