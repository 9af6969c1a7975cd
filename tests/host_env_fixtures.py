"""Tiny Gymnasium envs for the host-env tests, registered on import (so that the worker
processes of an asynchronous vector register them too: ``gymnasium/host_env_fixtures:<id>``).

* ``Clock-v0``: observation ``[t, seed tag]`` (t: steps since reset), reward ``t``, terminated
  when ``t == end`` (``end=0``: never), under a ``TimeLimit`` of ``limit`` steps (default 3).
* ``Crash-v0``: a ``Clock-v0`` that raises (``mode="raise"``) or kills its process
  (``mode="exit"``) on its ``after``-th step.
* ``DieOnStart-v0``: a ``Clock-v0`` whose process exits when it is made anywhere but in the
  process ``parent`` (a worker killed while an asynchronous vector starts).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np


class Clock(gym.Env):
    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, end: int = 0):
        self.end, self.t, self.tag = end, 0, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.tag = 0, float(self.np_random.integers(1, 1000))
        return self._obs(), {}

    def _obs(self):
        return np.array([self.t, self.tag], np.float32)

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t == self.end, False, {}


def _first_to_claim(name: str) -> bool:
    """Whether this process is the first to claim ``name`` (a file in the temp directory)."""
    try:
        os.close(os.open(Path(tempfile.gettempdir()) / name, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


class Crash(Clock):
    """Fails at step ``after``: raises (``raise``), or its process exits (``exit``); with
    ``sigterm`` (a process id) it first sends SIGTERM there, as a scheduler's signal to the whole
    process group reaches the training process and its workers at once."""

    def __init__(self, after: int = 5, mode: str = "raise", sigterm: int = 0):
        super().__init__(end=4)
        self.after, self.mode, self.steps, self.sigterm = after, mode, 0, sigterm

    def step(self, action):
        self.steps += 1
        if self.steps >= self.after:
            if self.sigterm and _first_to_claim(f"crash-sigterm-{self.sigterm}"):
                os.kill(self.sigterm, signal.SIGTERM)  # once: a second one aborts at once
            time.sleep(0.5 if self.sigterm else 0.0)  # the training process's handler has run
            if self.mode == "exit":
                os._exit(3)
            raise RuntimeError("the simulator lost its licence server")
        return super().step(action)


class DieOnStart(Clock):
    """Made in the process ``parent`` (which reads the spaces), a ``Clock-v0``; made in any
    other process (a worker), that process exits at once."""

    def __init__(self, parent: int):
        if os.getpid() != parent:
            os._exit(3)
        super().__init__()


if "Clock-v0" not in gym.registry:
    gym.register("Clock-v0", entry_point=Clock, max_episode_steps=3)
    gym.register("Crash-v0", entry_point=Crash)
    gym.register("DieOnStart-v0", entry_point=DieOnStart)
