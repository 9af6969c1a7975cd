"""Shared test helpers: compose the real Hydra config with overrides (no CLI, no run dir)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# The suite is compile-bound (hundreds of tiny programs): XLA's cheapest optimisation level cuts
# compile time by about a third (numerics are checked to the same tolerances; set the variable to
# 0 to test the optimised programs). Inherited by the tests' subprocesses.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from stoixlite.rec_ppo import CONFIG_DIR  # noqa: E402

# A tiny but complete training configuration: fast to compile and run.
TINY = [
    "arch.num_envs=4",
    "arch.num_eval_envs=2",
    "arch.total_timesteps=128",
    "arch.num_evaluations=2",
    "arch.eval_max_steps=20",
    "system.rollout_length=16",
    "system.epochs=1",
    "system.num_minibatches=2",
    "network.hidden_size=8",
    "network.embed_size=8",
    "network.head_size=8",
    "logger.progress=false",
]


def compose_config(overrides: list[str]) -> DictConfig:
    """The composed `configs/config.yaml` with Hydra overrides applied."""
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)
