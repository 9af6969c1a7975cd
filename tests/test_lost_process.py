"""A process of a two-process run lost mid-run (docs/reliability.md, docs/scaling.md): the other
one ends within ``distributed.heartbeat_timeout_s`` with one line naming the lost process and the
resume command, exit code 1, never JAX's abort with a C++ stack trace; the newest checkpoint
stays complete (every process's shards) and nothing partial is taken for one; a resume with both
processes ends exactly as an uninterrupted run. SIGTERM to one process stops both after the
chunk with its checkpoint. The processes run from the command line (each supervised,
``stoixlite.run.supervisor``) on one CPU device each, their collectives through gloo.

By default: the supervisor's reading of JAX's abort (no process started). With ``-m slow``
(two processes compiled each, about half a minute a test on two loaded cores): a worker killed
with SIGKILL, the coordinator killed, a worker that stops answering (SIGSTOP: only the heartbeat
notices), SIGTERM to a worker, and the resume after a kill compared with an uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_multi_device import ROOT, free_port, worker_env

from stoixlite.run import peers
from stoixlite.run.supervisor import Supervisor
from stoixlite.tracking.jsonl import read_jsonl

HEARTBEAT_S = 10
# 40 chunks of one update of 8 envs x 16 steps: the run is still going when checkpoint 2 exists.
RUN = [
    "arch.num_envs=8",
    "arch.num_eval_envs=2",
    "arch.eval_max_steps=20",
    "arch.total_timesteps=5120",
    "arch.num_evaluations=40",
    "system.rollout_length=16",
    "system.epochs=1",
    "system.num_minibatches=2",
    "network.hidden_size=8",
    "network.embed_size=8",
    "network.head_size=8",
    "logger.progress=false",
    "logger.plot=false",
    "distributed.enabled=true",
    "distributed.num_processes=2",
    f"distributed.heartbeat_timeout_s={HEARTBEAT_S}",
]
# Generous: the survivor ends at once when its collective fails, or at the heartbeat timeout.
BOUND_S = HEARTBEAT_S + 60
WAIT_S = 600  # for the processes to start, compile and save checkpoint 2


class Processes:
    """Processes 0 and 1 of one run in ``run_dir`` (their output in files beside it)."""

    def __init__(self, run_dir: Path, extra: tuple[str, ...] = (), port: int | None = None):
        self.run_dir = run_dir
        port = port or free_port()
        self.logs = [run_dir.parent / f"{run_dir.name}.{i}" for i in (0, 1)]
        self.procs = []
        for i in (0, 1):
            argv = [*RUN, f"distributed.coordinator_address=localhost:{port}"]
            argv += [f"distributed.process_id={i}", f"hydra.run.dir={run_dir}", *extra]
            with open(f"{self.logs[i]}.out", "w") as out, open(f"{self.logs[i]}.err", "w") as err:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "stoixlite.rec_ppo", *argv],
                        cwd=ROOT,
                        env=worker_env(1),
                        stdout=out,
                        stderr=err,
                    )
                )

    def wait_for_checkpoint(self, step: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while not (self.run_dir / "checkpoints" / str(step)).is_dir():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.kill()
                raise AssertionError(f"no checkpoint {step}: {self.outputs()}")
            time.sleep(0.05)

    def trainer(self, i: int) -> int:
        """The pid of process ``i``'s training child (the command line's process supervises)."""
        children = Path(f"/proc/{self.procs[i].pid}/task/{self.procs[i].pid}/children")
        return int(children.read_text().split()[0])

    def wait(self) -> list[int]:
        try:
            return [p.wait(timeout=WAIT_S) for p in self.procs]
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"a process ran past {WAIT_S} s: {self.outputs()}") from None

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()

    def stderr(self, i: int) -> list[str]:
        return [line for line in Path(f"{self.logs[i]}.err").read_text().splitlines() if line]

    def outputs(self) -> str:
        tails = [
            (Path(f"{log}.out").read_text()[-2000:], Path(f"{log}.err").read_text()[-3000:])
            for log in self.logs
        ]
        return "\n".join(f"process {i}: {out}{err}" for i, (out, err) in enumerate(tails))


def assert_lost_line(lines: list[str], lost: int, me: int, run_dir: Path) -> int:
    """The survivor's whole stderr is one line naming the lost process, this one and the
    newest checkpoint with the resume command; returns that checkpoint."""
    assert len(lines) == 1, "\n".join(lines)
    (line,) = lines
    assert line.startswith(f"error: distributed: process {lost}"), line
    assert "of the run's 2 was lost (" in line and f"process {me} stops; checkpoint " in line
    assert line.endswith(
        f"is the newest complete one: start every process again with "
        f"`python -m stoixlite.rec_ppo resume={run_dir}` and its distributed.* settings"
    ), line
    return int(line.split("; checkpoint ", 1)[1].split()[0])


def assert_checkpoints_complete(run_dir: Path, newest: int) -> None:
    """Every checkpoint directory is finalised and the newest one is the one named; both
    processes' shards are there."""
    directory = run_dir / "checkpoints"
    steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    assert steps and steps[-1] == newest, (steps, newest)
    shards = {p.name for p in (directory / str(newest) / "state").glob("ocdbt.process_*")}
    assert shards == {"ocdbt.process_0", "ocdbt.process_1"}, shards
    assert (directory / str(newest) / "commit_success.txt").is_file()


def kill_and_check(tmp_path: Path, victim: int, how: signal.Signals) -> tuple[Path, int]:
    run_dir = tmp_path / "run"
    procs = Processes(run_dir)
    procs.wait_for_checkpoint(2)
    target = procs.procs[victim].pid if how != signal.SIGSTOP else procs.trainer(victim)
    os.kill(target, how)
    start = time.monotonic()
    survivor = 1 - victim
    try:
        code = procs.procs[survivor].wait(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        procs.kill()
        raise AssertionError(f"the survivor ran past {BOUND_S} s: {procs.outputs()}") from None
    took = time.monotonic() - start
    if how == signal.SIGSTOP:
        os.kill(target, signal.SIGCONT)  # it finds the others gone and ends too
    procs.wait()
    assert code == peers.EXIT_CODE, procs.outputs()
    assert took < BOUND_S
    newest = assert_lost_line(procs.stderr(survivor), victim, survivor, run_dir)
    assert_checkpoints_complete(run_dir, newest)
    return run_dir, newest


@pytest.mark.slow(reason="two processes started, compiled and killed")
def test_a_killed_worker_ends_the_other_with_one_line(tmp_path):
    kill_and_check(tmp_path, victim=1, how=signal.SIGKILL)


def test_the_supervisor_names_the_process_jax_lost():
    """What JAX writes as it aborts a process whose peer stopped sending heartbeats (this
    version's format, and the documented one), read into the one line."""
    said = [
        "E1128 20:59:52.058648   10335 coordination_service.cc:1549] [107] Use error polling "
        "to propagate the following error to all tasks: UNAVAILABLE: The following tasks are "
        "unhealthy (stopped sending heartbeats):",
        "1",
        "The tasks have crashed. Check the task logs for an earlier error.",
        "",
        "F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX "
        "distributed service detected fatal errors.",
        "*** Check failure stack trace: ***",
        "    @     0x7fd2c9f0cd5b  std::_Function_handler<>::_M_invoke()",
    ]
    read_fd, write_fd = os.pipe()
    try:
        supervisor = Supervisor(child=-1, native=read_fd, reports=write_fd)
        supervisor._take(write_fd, b'{"process": 0, "count": 2, "heartbeat_timeout_s": 7}\n')
        supervisor._take(read_fd, ("\n".join(said) + "\n").encode())
        assert len(supervisor.held) == len(said)  # nothing forwarded: all of it JAX's
        line = supervisor.line(signal.SIGABRT)
        assert line == (
            "error: distributed: process 1 of the run's 2 was lost (no heartbeat within "
            "distributed.heartbeat_timeout_s=7s); process 0 stops; nothing was started: the "
            "same commands start the run again"
        )
        documented = "absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped "
        documented += "sending heartbeats):\n/job:jax_worker/replica:0/task:3\nThe tasks have"
        assert peers.lost_processes(documented, 0) == [3]
        assert peers.lost_processes("UNAVAILABLE: Task 2 heartbeat timeout.", 0) == [2]
        # the coordinator unreachable, as a worker's client says it
        other = Supervisor(child=-1, native=read_fd, reports=write_fd)
        other.info = {"process": 1, "count": 2}
        other.seen = [
            "E0929 17:42:48.594192 1044529 coordination_service_agent.cc:332] Polled an error",
            "F0929 17:42:48.594200 1044529 client.h:77] Terminating process because the JAX "
            "distributed service detected fatal errors. absl::Status: UNAVAILABLE: Failed to "
            "send RPC to coordination service.",
        ]
        assert other.line(signal.SIGABRT).startswith(
            "error: distributed: process 0 (the coordinator) of the run's 2 was lost (it cannot "
            "be reached); process 1 stops"
        )
    finally:
        os.close(read_fd)
        os.close(write_fd)


@pytest.mark.slow(reason="two processes started, compiled and killed")
def test_a_killed_coordinator_ends_the_worker_with_one_line(tmp_path):
    kill_and_check(tmp_path, victim=0, how=signal.SIGKILL)


@pytest.mark.slow(reason="two processes, and the heartbeat timeout")
def test_a_worker_that_stops_answering_ends_the_other_with_one_line(tmp_path):
    """SIGSTOP: no connection closes, only JAX's heartbeat notices (and aborts the other
    process: its supervisor writes the line)."""
    kill_and_check(tmp_path, victim=1, how=signal.SIGSTOP)


@pytest.mark.slow(reason="two processes started, compiled and stopped")
def test_sigterm_to_a_worker_stops_both_after_the_chunk(tmp_path):
    run_dir = tmp_path / "run"
    procs = Processes(run_dir)
    procs.wait_for_checkpoint(2)
    os.kill(procs.procs[1].pid, signal.SIGTERM)
    assert procs.wait() == [128 + signal.SIGTERM] * 2, procs.outputs()
    for i in (0, 1):
        (line,) = procs.stderr(i)
        assert line.startswith("stopped by SIGTERM after chunk ")
        assert line.endswith(f"resume with `python -m stoixlite.rec_ppo resume={run_dir}`")
    chunk = int(line.split("after chunk ", 1)[1].split(";")[0])
    assert_checkpoints_complete(run_dir, chunk)


@pytest.mark.slow(reason="three runs of two processes")
def test_the_resume_after_a_kill_ends_as_an_uninterrupted_run(tmp_path):
    from test_multi_device import final_state

    full = tmp_path / "full"
    whole = Processes(full)
    assert whole.wait() == [0, 0], whole.outputs()
    run_dir, newest = kill_and_check(tmp_path, victim=1, how=signal.SIGKILL)
    resumed = Processes(run_dir, extra=(f"resume={run_dir}",))
    assert resumed.wait() == [0, 0], resumed.outputs()
    assert (
        f"resuming {run_dir} from checkpoint {newest}" in Path(f"{resumed.logs[0]}.out").read_text()
    )
    volatile = ("time/", "train/sps")
    rows = [
        [
            {k: v for k, v in r.items() if not k.startswith(volatile)}
            for r in read_jsonl(d / "metrics.jsonl")
        ]
        for d in (full, run_dir)
    ]
    assert rows[0] == rows[1]
    want = final_state(full)
    for name, value in final_state(run_dir).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)
