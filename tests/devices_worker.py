"""Runs of tests/test_multi_device.py on forced CPU host devices, in a subprocess.

``python tests/devices_worker.py <scenario> <out dir> [<process id> <port>]`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=<n>`` set before JAX is imported:

* ``loop``: full training runs (gru) on 1, 2 and 4 devices, a 4-device run stopped after its
  first chunk and resumed on 4 devices, and the same stopped run resumed on 2 devices;
* ``learn``: two learn chunks of a memoroid (ffm) with 2 seeds, BPTT chunks and burn-in on 1
  and 4 devices (2 devices: ``loop``); the final learner states and chunk metrics go to
  ``learn_d<D>.npz``;
* ``pixels``: one learn chunk of gru with the cnn encoder on ``pixel/colour_cue`` (uint8 frames
  in the env states, timesteps and rollout buffers) on 1 and 2 devices, to ``pixels_d<D>.npz``;
* ``process <id> <port>``: process ``id`` of a 2-process run of ``loop``'s config (2 devices each,
  gloo CPU collectives) with its coordinator on ``localhost:<port>``, in ``<out dir>/hosts``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import jax  # noqa: E402
import numpy as np  # noqa: E402
from conftest import TINY, compose_config, run_config, run_plan  # noqa: E402

from stoixlite.cli.resume import resume_config  # noqa: E402
from stoixlite.config.parse import parse  # noqa: E402
from stoixlite.config.plan import plan_run  # noqa: E402
from stoixlite.rec_ppo import train as train_composed  # noqa: E402
from stoixlite.run.build import build_run  # noqa: E402
from stoixlite.run.loop import train  # noqa: E402
from stoixlite.run.sharding import to_host  # noqa: E402
from stoixlite.run.signals import TrainingInterrupted  # noqa: E402
from stoixlite.tracking.state_arrays import pack_state  # noqa: E402

# 2 chunks of 1 update of 8 envs x 8 steps; each minibatch's 4 sequences split over 4 devices.
LOOP = TINY + [
    "arch.num_envs=8",
    "arch.total_timesteps=128",
    "system.rollout_length=8",
    "logger.plot=false",
]
LEARN = TINY + [
    "network=ffm",
    "network.trace_size=4",
    "network.context_size=2",
    "arch.num_envs=8",
    "arch.num_seeds=2",
    "arch.total_timesteps=128",
    "system.rollout_length=8",
    "system.bptt_length=4",
    "system.burn_in=2",
    "system.epochs=2",
]


def devices(n: int) -> list[str]:
    return [f"arch.num_devices={n}"]


def loop(out: Path) -> None:
    for n in (1, 4, 2):
        train(run_plan(LOOP + devices(n)), out / f"d{n}")

    def stop_after_first_chunk(chunk: int, record: dict) -> None:
        if chunk == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        cfg = run_config(LOOP + devices(4))
        train(plan_run(cfg), out / "stopped", on_chunk_end=stop_after_first_chunk)
    except TrainingInterrupted:
        pass
    shutil.copytree(out / "stopped", out / "resumed_on_2")
    shutil.move(out / "stopped", out / "resumed_on_4")
    for n in (4, 2):
        run_dir = out / f"resumed_on_{n}"
        overrides = devices(n)
        resumed = resume_config(compose_config(LOOP + overrides), run_dir, overrides)
        train(plan_run(parse(resumed)), run_dir, True)


def learn(out: Path) -> None:
    for n in (1, 4):
        run = build_run(run_plan(LEARN + devices(n)))
        state, _ = run.init()
        metrics = []
        for _ in range(2):
            state, chunk = run.learn(state)
            metrics.append(to_host(chunk))
        env_leaf = jax.tree.leaves(state.env_state)[0]
        assert len(env_leaf.sharding.device_set) == n, env_leaf.sharding
        arrays = {f"state/{k}": np.asarray(v) for k, v in to_host(pack_state(state)[0]).items()}
        for i, chunk in enumerate(metrics):
            arrays.update({f"metrics{i}/{k}": v for k, v in chunk.items()})
        np.savez(out / f"learn_d{n}.npz", **arrays)


PIXELS = TINY + ["env=pixel/colour_cue", "network.cnn_channels=[4,8]", "system.epochs=2"]


def pixels(out: Path) -> None:
    for n in (1, 2):
        run = build_run(run_plan(PIXELS + devices(n)))
        state, _ = run.init()
        frames = state.timestep.observation
        assert frames.dtype == np.uint8 and len(frames.sharding.device_set) == n, frames.sharding
        state, metrics = run.learn(state)
        arrays = {f"state/{k}": np.asarray(v) for k, v in to_host(pack_state(state)[0]).items()}
        arrays.update({f"metrics/{k}": v for k, v in to_host(metrics).items()})
        np.savez(out / f"pixels_d{n}.npz", **arrays)


def process(out: Path, process_id: int, port: int) -> None:
    joined = [
        "distributed.enabled=true",
        f"distributed.coordinator_address=localhost:{port}",
        "distributed.num_processes=2",
        f"distributed.process_id={process_id}",
        "distributed.timeout_s=300",
    ]
    # The entry's train: the processes join before the config is parsed (JAX starts there).
    train_composed(compose_config(LOOP + joined), out / "hosts")
    assert jax.process_count() == 2 and jax.local_device_count() == 2


if __name__ == "__main__":
    scenario, out = sys.argv[1], Path(sys.argv[2])
    if scenario == "process":
        process(out, int(sys.argv[3]), int(sys.argv[4]))
    else:
        assert jax.device_count() == 4, jax.devices()
        {"loop": loop, "learn": learn, "pixels": pixels}[scenario](out)
