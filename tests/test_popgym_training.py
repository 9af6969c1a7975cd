"""Every registered POPGym port trains end to end under rec_ppo (tiny budget, GRU), and its
checkpoint plays the original popgym env (``evaluate --reference``: the declared reference class,
observation encoding and action mapping)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import TINY, compose_config

from stoixlite.envs.registry import available_envs
from stoixlite.evaluate import evaluate_reference
from stoixlite.rec_ppo import train
from stoixlite.run.resume import load_run
from stoixlite.tracking.jsonl import read_jsonl

POPGYM_ENVS = [name for name in available_envs() if name.startswith("popgym/")]


def test_every_popgym_module_has_a_config():
    from stoixlite.cli.configs import CONFIG_DIR

    for name in POPGYM_ENVS:
        assert (CONFIG_DIR / "env" / f"{name}.yaml").exists(), name


# Two ports train and play their reference by default: discrete actions on a flat observation
# (repeat_previous) and a Box action (position_only_pendulum). The other 14 run under
# `pytest -m slow` (CI runs them: .ci/run-slow; each compiles its own learner: 12-30 s of CPU);
# in the default run each port is replayed step for step against popgym
# (tests/test_popgym_<env>.py), its reference class and encoding are checked
# (tests/test_reference_player.py), and its environment contract (tests/test_env_contract.py).
DEFAULT_RUN_ENVS = (
    "popgym/repeat_previous",
    "popgym/position_only_pendulum",
)


@pytest.mark.parametrize(
    "env",
    [e if e in DEFAULT_RUN_ENVS else pytest.param(e, marks=pytest.mark.slow) for e in POPGYM_ENVS],
)
def test_popgym_env_trains(tmp_path, env):
    cfg = compose_config([f"env={env}", "network=gru", *TINY, "logger.plot=false"])
    train(cfg, tmp_path)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert len(records) == 2
    last = records[-1]
    assert math.isfinite(last["loss/total"]) and math.isfinite(last["eval/episode_return"])
    assert last["loss/first_ratio_max_dev"] < 1e-4
    run, state, _ = load_run(tmp_path)
    returns = evaluate_reference(run, state.params, episodes=2, greedy=False, seed=0)
    assert returns.shape == (2,) and np.isfinite(returns).all()
