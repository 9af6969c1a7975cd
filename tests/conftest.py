"""Shared test helpers: compose the real Hydra config with overrides (no CLI, no run dir)."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# The suite is compile-bound (hundreds of tiny programs): XLA's cheapest optimisation level cuts
# compile time by about a third (numerics are checked to the same tolerances; set the variable to
# 0 to test the optimised programs). Inherited by the tests' subprocesses.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# At that level, XLA's CPU fusion emitters (MLIR code generation of each fusion) are most of what
# is left of a compile: the LLVM IR emitters of before compile the suite's programs in about half
# the time (same numerics to the suite's tolerances). Only with the cheap level: the optimised
# programs (JAX_DISABLE_MOST_OPTIMIZATIONS=0) are compiled as users' are.
_FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"
if os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "1" and "fusion_emitters" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE_FLAG}".strip()
# Programs that several test processes compile (the pytest-xdist workers, and the subprocesses of
# the CLI, launcher and multi-device tests) are compiled once per test run: JAX's persistent
# compilation cache in a directory of this run, removed when it ends. The first process (pytest
# itself) creates it; the workers and subprocesses inherit the variable. A
# JAX_COMPILATION_CACHE_DIR of your own is used instead (and kept).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = tempfile.mkdtemp(prefix="stoixlite-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from stoixlite.cli.configs import CONFIG_DIR  # noqa: E402
from stoixlite.cli.process import setup_process  # noqa: E402
from stoixlite.config.parse import parse  # noqa: E402
from stoixlite.config.plan import RunPlan, plan_run  # noqa: E402
from stoixlite.config.schema import RunConfig  # noqa: E402
from stoixlite.run import build  # noqa: E402

setup_process()  # the tests run what the entry points run, in a process set up like theirs

# The built runs this process keeps (stoixlite.run.build: a run whose config compiles the same as
# a kept one reuses its programs): the entry points keep the last 2, the tests, whose few tiny
# configs recur across files, keep more.
build._CACHE_SIZE = 16

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
    """The composed `configs/config.yaml` with Hydra overrides applied (``env=<family>/<id>``
    without a file added to Hydra's options first, as the entry point does)."""
    from stoixlite.cli.env_names import add_env_options

    if error := add_env_options(list(overrides), CONFIG_DIR):
        raise ValueError(error)
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


def run_config(overrides: list[str]) -> RunConfig:
    """The parsed run config of `configs/config.yaml` with Hydra overrides applied."""
    return parse(compose_config(overrides))


def run_plan(overrides: list[str]) -> RunPlan:
    """The plan of the run of `configs/config.yaml` with Hydra overrides applied (what the
    entry point hands down: :func:`stoixlite.config.plan.plan_run` of the parsed config)."""
    return plan_run(run_config(overrides))


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)


def replay_inputs(exp, key, warmup: int):
    """What training replays, inside a jitted function: one rollout of ``exp`` that starts after
    ``warmup`` steps (mid-episode, non-trivial carry), its GAE and the carry before each step.

    Returns ``(state, traj, adv, target, before)``: the learner state after the rollout,
    the ``[T, N]`` trajectory, advantages and value targets, and the carries ``[T, N, ...]``.
    """
    import jax
    import jax.numpy as jnp

    from stoixlite.ppo.gae import gae_advantages
    from stoixlite.ppo.rollout import bootstrap_values, rollout

    state = exp.init_state(key, exp.hyper)
    state, *_ = rollout(exp.network.apply, exp.env, state, warmup)
    initial_carry = state.carry
    state, traj, carries_after, _ = rollout(
        exp.network.apply, exp.env, state, exp.ppo.rollout_length, record_next_obs=True
    )
    next_value = bootstrap_values(exp.network.apply, state.params, traj, carries_after)
    adv, target = gae_advantages(
        traj.reward, traj.discount, traj.last, traj.value, next_value, 0.99, 0.95
    )
    before = jax.tree.map(
        lambda c0, c: jnp.concatenate([c0[None], c[:-1]], 0), initial_carry, carries_after
    )
    return state, traj, adv, target, before


QUIET_HYDRA = ["hydra/job_logging=none", "hydra/hydra_logging=none"]


def run_cli(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``python -m stoixlite.rec_ppo *argv``, in-process
    (Hydra's logging quiet; the root logger's handlers restored after)."""
    from stoixlite.rec_ppo import cli

    monkeypatch.setattr(sys, "argv", ["rec_ppo"])
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    code = 0
    try:  # Hydra leaves logging alone (its handlers would outlive pytest's captured streams)
        cli([*argv, *QUIET_HYDRA])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.hookimpl(tryfirst=True)  # before -m and -k select
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``heavy`` tests (tests/heavy_tests.py) marked as such."""
    from heavy_tests import mark_heavy

    mark_heavy(config, items)
