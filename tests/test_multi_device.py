"""Data-parallel training over devices and processes: N devices equal one device (same total
envs and seed) within float tolerance, for gru and a memoroid, with seeds x devices; resume on the
same device count is bit-identical; a checkpoint written on 4 devices resumes on 2; 2 processes x
2 devices (jax.distributed, gloo CPU collectives) equal 1 process x 4 devices; gru with the cnn
encoder on uint8 frames on 2 devices equals 1 device; bad device counts
and an unreachable coordinator are refused with one line.

The runs need several devices: they run in subprocesses (tests/devices_worker.py) with
``XLA_FLAGS=--xla_force_host_platform_device_count=<n>`` set before JAX is imported.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY, compose_config, run_config
from omegaconf import OmegaConf

from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.parse import parse
from stoixlite.config.plan import plan_run
from stoixlite.config.strict import ConfigError
from stoixlite.run.build import build_run
from stoixlite.run.resume import checkpoint_tree
from stoixlite.tracking.checkpointing import Checkpointer, checkpoint_dir
from stoixlite.tracking.jsonl import read_jsonl
from stoixlite.tracking.state_arrays import pack_state

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "devices_worker.py"
VOLATILE = ("time/", "train/sps")
# Per-device reductions sum in another order: float32 rounding differences only.
RTOL, ATOL = 1e-4, 1e-5


def worker_env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    forced = f"--xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {forced}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


# No subprocess of these tests may hang the suite: a stuck worker (e.g. a process waiting for a
# coordinator that never comes) is killed after this many seconds and fails its test.
TIMEOUT_S = 600


def communicate_all(procs: list[subprocess.Popen]) -> list[tuple[str, str]]:
    """Each process's ``(stdout, stderr)``; all are killed if any runs past :data:`TIMEOUT_S`."""
    try:
        return [proc.communicate(timeout=TIMEOUT_S) for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        outputs = [proc.communicate() for proc in procs]
        raise AssertionError(f"a worker ran past {TIMEOUT_S} s: {outputs}") from None


def run_worker(scenario: str, out: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(WORKER), scenario, str(out)],
        cwd=ROOT,
        env=worker_env(4),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def run_two_processes(out: Path) -> list[subprocess.CompletedProcess]:
    """Processes 0 and 1 of one run, 2 CPU devices each (tests/devices_worker.py process)."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "process", str(out), str(pid), port],
            cwd=ROOT,
            env=worker_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in (0, 1)
    ]
    outputs = communicate_all(procs)
    return [
        subprocess.CompletedProcess(proc.args, proc.returncode, *output)
        for proc, output in zip(procs, outputs, strict=True)
    ]


def records(run_dir: Path) -> list[dict]:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def assert_records_close(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if b[key] is None:
                assert a[key] is None, key
            else:
                np.testing.assert_allclose(a[key], b[key], rtol=RTOL, atol=ATOL, err_msg=key)


def final_state(run_dir: Path) -> dict[str, np.ndarray]:
    """The final checkpoint's arrays, restored onto this single-device process."""
    saved = OmegaConf.load(run_dir / "config.yaml")
    saved.arch.num_devices = 1
    cfg = parse(saved)
    state, key = build_run(plan_run(cfg)).init()
    with Checkpointer(checkpoint_dir(run_dir), config_fingerprint(cfg.to_dict())) as ckpt:
        tree, _, step = ckpt.restore(checkpoint_tree(state, key))
    assert step == cfg.arch.num_evaluations
    return {name: np.asarray(value) for name, value in pack_state(tree)[0].items()}


# Under `pytest -m slow`: five training runs on 1, 2 and 4 devices and a run of 2 processes, each
# in a fresh process (Python, JAX, compiles). The default run keeps N devices == 1 device
# (test_memoroid_with_seeds_on_4_devices_equals_1_device, with seeds) and 2 processes meeting
# and refusing different counts (test_processes_configured_with_different_counts_are_refused).
@pytest.mark.slow
def test_gru_on_1_2_4_devices_and_2_processes_resume_and_reshard(tmp_path):
    """One test (one subprocess) for every run of the gru config, so xdist runs them once."""
    run_worker("loop", tmp_path)
    want = records(tmp_path / "d1")
    assert len(want) == 2 and want[-1]["loss/entropy"] > 0
    one = final_state(tmp_path / "d1")

    # 2 and 4 devices == 1 device
    for n in (2, 4):
        assert_records_close(records(tmp_path / f"d{n}"), want)
        many = final_state(tmp_path / f"d{n}")
        assert many.keys() == one.keys()
        for name, value in one.items():
            np.testing.assert_allclose(many[name], value, rtol=RTOL, atol=ATOL, err_msg=name)

    # stopped after chunk 1 and resumed on the same 4 devices: bit-identical
    assert records(tmp_path / "resumed_on_4") == records(tmp_path / "d4")
    full, resumed = final_state(tmp_path / "d4"), final_state(tmp_path / "resumed_on_4")
    for name, value in full.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)

    # the 4-device checkpoint resumed on 2 devices (first chunk on 4, second on 2)
    resumed = tmp_path / "resumed_on_2"
    assert "num_devices: 2" in (resumed / "config.yaml").read_text()
    assert_records_close(records(resumed), want)
    for name, value in final_state(resumed).items():
        np.testing.assert_allclose(value, one[name], rtol=RTOL, atol=ATOL, err_msg=name)

    # 2 processes x 2 devices (jax.distributed, gloo) == 1 process x 4 devices
    done = run_two_processes(tmp_path)
    for proc in done:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "final eval return" in done[0].stdout and "final eval return" not in done[1].stdout
    hosts = tmp_path / "hosts"
    assert_records_close(records(hosts), records(tmp_path / "d4"))  # written once, by process 0
    for name, value in final_state(hosts).items():
        np.testing.assert_allclose(value, full[name], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.slow(reason="a second model on 4 devices; the gru equality above covers the sharding")
def test_memoroid_with_seeds_on_4_devices_equals_1_device(tmp_path):
    run_worker("learn", tmp_path)
    want = dict(np.load(tmp_path / "learn_d1.npz"))
    # seeds x devices: every state leaf keeps its leading seed axis of 2
    assert all(v.shape[:1] == (2,) for k, v in want.items() if k.startswith("state/"))
    assert float(np.abs(want["metrics1/loss/total"]).max()) > 0
    got = dict(np.load(tmp_path / "learn_d4.npz"))  # 2 devices: the slow gru runs above
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL, err_msg=name)


# Under `pytest -m slow` (CI runs it: .ci/run-slow): a worker process and
# three pixel learners, about 10 s of CPU. The default run shards seeds and envs over 2 and 4
# devices (above) and trains on uint8 frames on one (test_cnn_encoder.py).
@pytest.mark.slow
def test_cnn_on_pixels_on_2_devices_equals_1_device(tmp_path):
    """Image observations split over devices like vectors: the uint8 frames of the env states,
    timesteps and buffers are sharded on their env axis, and 2 devices equal 1."""
    run_worker("pixels", tmp_path)
    want = dict(np.load(tmp_path / "pixels_d1.npz"))
    assert any(v.dtype == np.uint8 and v.shape[-3:] == (16, 16, 3) for v in want.values())
    assert float(np.abs(want["metrics/loss/total"]).max()) > 0
    got = dict(np.load(tmp_path / "pixels_d2.npz"))
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL, err_msg=name)


def test_more_devices_than_exist_is_one_line_before_compiling():
    cfg = run_config(TINY + [f"arch.num_devices={jax.local_device_count() + 1}"])
    with pytest.raises(ConfigError) as err:
        build_run(plan_run(cfg))
    assert len(err.value.errors) == 1
    assert err.value.errors[0].startswith(f"arch.num_devices={jax.local_device_count() + 1}")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["arch.num_envs=6", "arch.num_devices=4"], "arch.num_envs=6 is invalid: must split"),
        # 4 envs / 2 minibatches: 2 sequences per minibatch cannot split over 4 devices
        (["arch.num_envs=4", "arch.num_devices=4"], "the 2 sequences of each"),
        (["arch.num_devices=0"], "arch.num_devices=0 is invalid: must be a positive integer"),
    ],
)
def test_envs_that_do_not_split_over_devices_are_refused(overrides, message):
    with pytest.raises(ConfigError) as err:
        parse(compose_config(TINY + ["arch.total_timesteps=1024"] + overrides))
    assert len(err.value.errors) == 1 and message in err.value.errors[0], err.value.errors


def test_unreachable_coordinator_is_one_line_after_the_timeout(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoixlite.rec_ppo",
            *TINY,
            "distributed.enabled=true",
            f"distributed.coordinator_address=localhost:{free_port()}",
            "distributed.num_processes=2",
            "distributed.process_id=1",
            "distributed.timeout_s=3",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        env=worker_env(1),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: distributed: process 1 could not"), lines
    assert "timeout_s=3s" in lines[0]
    assert not (run_dir / "config.yaml").exists() and not (run_dir / "checkpoints").exists()


def test_processes_configured_with_different_counts_are_refused(tmp_path):
    run_dir, port = tmp_path / "run", free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stoixlite.rec_ppo",
                *TINY,
                "arch.num_envs=8",
                "arch.total_timesteps=256",
                "distributed.enabled=true",
                f"distributed.coordinator_address=localhost:{port}",
                f"distributed.num_processes={count}",
                f"distributed.process_id={pid}",
                "distributed.timeout_s=120",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=ROOT,
            env=worker_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid, count in ((0, 2), (1, 3))
    ]
    for pid, (proc, (_, err)) in enumerate(zip(procs, communicate_all(procs), strict=True)):
        assert proc.returncode == 2, err[-3000:]
        lines = err.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("error: distributed: the processes disagree on distributed.")
        assert f"this is process {pid}" in lines[0]
    assert not (run_dir / "config.yaml").exists() and not (run_dir / "checkpoints").exists()
