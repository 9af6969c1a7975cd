"""Config validation: each mistake gets one clear line naming the key, before compiling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compose_config

from stoixlite.config import ConfigError, validate


def test_default_config_is_valid():
    validate(compose_config([]))


@pytest.mark.parametrize(
    ("override", "key", "hint"),
    [
        ("env.name=popgym/nope", "env.name", "popgym/repeat_previous"),
        ("network.name=transformerxl", "network.name", "gru"),
        ("arch.num_envs=6", "system.num_minibatches", "divide"),
        ("system.lr=-0.1", "system.lr", "number"),
        ("system.lr=0", "system.lr", "number"),
        ("system.rollout_length=0", "system.rollout_length", "positive"),
        ("arch.total_timesteps=-5", "arch.total_timesteps", "positive"),
        ("arch.total_timesteps=100", "arch.total_timesteps", "at least"),
        ("system.bptt_length=7", "system.bptt_length", "divisor"),
        ("system.gamma=1.5", "system.gamma", "(0.0, 1.0]"),
        ("env.difficulty=impossible", "env.difficulty", "easy"),
        ("network.activation=swish", "network.activation", "relu"),
        ("network.hidden_size=0", "network.hidden_size", "positive"),
        ("+network.bogus=3", "network.bogus", "not a parameter"),
        ("system.epochs=2.5", "system.epochs", "positive integer"),
        ("system.lr=inf", "system.lr", "finite number"),
        ("system.vf_coef=inf", "system.vf_coef", "finite number"),
        ("system.lr=2.0", "system.lr", "(0.0, 1.0]"),
        ("arch.on_nonfinite=ignore", "arch.on_nonfinite", "rollback"),
    ],
)
def test_bad_values_raise_one_line(override, key, hint):
    with pytest.raises(ConfigError) as err:
        validate(compose_config([override]))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(key + "="), message
    assert hint in message


def test_gymnax_env_rejects_difficulty():
    with pytest.raises(ConfigError, match="env.difficulty"):
        validate(compose_config(["env=gymnax/CartPole-v1", "env.difficulty=hard"]))


def test_cli_prints_single_line_and_exits_nonzero(tmp_path):
    """The CLI reports a bad value as one line on stderr, without traceback or output files."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoixlite.rec_ppo",
            "system.lr=-1",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},  # this checkout
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "config error: system.lr=-1 is invalid: must be a finite number in (0.0, 1.0]"
    ], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
