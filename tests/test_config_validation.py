"""Config validation: each mistake gets one clear line naming the key, before compiling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compose_config

from stoixlite.config.parse import parse
from stoixlite.config.plan import KEPT_BUDGET_SHARE, chunk_split, plan_run
from stoixlite.config.strict import ConfigError


def test_default_config_is_valid():
    parse(compose_config([]))


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
        ("arch.branching=sometimes", "arch.branching", "'auto', 'skip', 'mask'"),
        ("network.encoder=cnn", "network.encoder", "no image observation"),
        ("network.cnn_kernels=[0]", "network.cnn_kernels", "non-empty list of positive integers"),
    ],
)
def test_bad_values_raise_one_line(override, key, hint):
    with pytest.raises(ConfigError) as err:
        parse(compose_config([override]))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(key + "="), message
    assert hint in message


def test_gymnax_env_rejects_difficulty():
    with pytest.raises(ConfigError, match="env.difficulty"):
        parse(compose_config(["env=gymnax/CartPole-v1", "env.difficulty=hard"]))


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


@pytest.mark.parametrize(
    ("override", "key", "hint"),
    [
        ("env.obs_augment=no", "env.obs_augment", "true or false"),
        ("env.obs_augment='False'", "env.obs_augment", "true or false"),
        ("arch.seed=1.5", "arch.seed", "integer"),
        ("+arch.num_seed=2", "arch.num_seed", "did you mean arch.num_seeds?"),
        ("+system.burnin=2", "system.burnin", "unknown key"),
        ("+lerning_rate=1", "lerning_rate", "unknown key"),
        ("+network.hiden_size=8", "network.hiden_size", "did you mean network.hidden_size?"),
        ("network=lru network.num_layers=1.5", "network.num_layers", "integer"),
        ("network=lru network.scan=parallel", "network.scan", "associative"),
        ("logger=wandb logger.wandb.mode=loud", "logger.wandb.mode", "offline"),
        ("logger.plot=1", "logger.plot", "true or false"),
        ("system.burn_in=2", "system.burn_in", "0 < bptt_length"),
        ("system.bptt_length=4 system.burn_in=5", "system.burn_in", "at most"),
        ("system.bptt_length=128 system.burn_in=4", "system.burn_in", "0 < bptt_length"),
        ("system.burn_in=-1", "system.burn_in", "integer in [0, 2147483647]"),
        ("network.chrono_period=-2", "network.chrono_period", "0 (off) or a finite number > 1"),
        ("env.obs_prev_reward=no", "env.obs_prev_reward", "true or false"),
        ("env=sets/card_table env.kwargs.capacity=2.5", "env.kwargs.capacity", "integer"),
        ("env=sets/card_table +env.kwargs.capcity=3", "env.kwargs.capcity", "env.kwargs.capacity"),
    ],
)
def test_strict_parsing(override, key, hint):
    with pytest.raises(ConfigError) as err:
        parse(compose_config(override.split()))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(key + "="), message
    assert hint in message, message


def test_integral_floats_are_integers():
    run = parse(compose_config(["arch.total_timesteps=5e6", "arch.num_envs=64.0"]))
    assert run.arch.total_timesteps == 5_000_000 and isinstance(run.arch.total_timesteps, int)
    assert run.arch.num_envs == 64 and isinstance(run.arch.num_envs, int)


def test_every_error_is_reported_on_its_own_line():
    with pytest.raises(ConfigError) as err:
        parse(compose_config(["system.lr=-1", "env.obs_augment=no", "+arch.sead=3"]))
    assert sorted(line.split("=")[0] for line in err.value.errors) == [
        "arch.sead",
        "env.obs_augment",
        "system.lr",
    ]
    assert str(err.value).splitlines() == err.value.errors


def test_budget_that_does_not_divide_says_what_runs():
    # 300,000 steps of 64 envs x 128 steps = 36 whole updates: 20 chunks of 1 update would train
    # 20; 18 chunks of 2 train all 36.
    run = plan_run(parse(compose_config(["arch.total_timesteps=300000"])))
    assert (run.num_chunks, run.ppo.updates_per_chunk) == (18, 2)
    assert run.total_steps == 36 * 64 * 128 == run.ppo.num_updates * run.steps_per_update
    note = run.budget_note
    assert note is not None and "300000" in note and str(run.total_steps) in note
    assert "18 chunks x 2 updates" in note and "arch.num_evaluations=20" in note
    assert plan_run(parse(compose_config(["arch.total_timesteps=163840"]))).budget_note is None
    # 2M: 244 whole updates, 20 chunks of 12 keep 98 %: the evaluations stay as configured
    run = plan_run(parse(compose_config(["arch.total_timesteps=2e6"])))
    assert (run.num_chunks, run.ppo.updates_per_chunk, run.total_steps) == (20, 12, 1966080)
    assert "arch.num_evaluations=20 " not in run.budget_note
    # fewer whole updates than evaluations: one chunk per update, the budget kept
    run = plan_run(parse(compose_config(["arch.total_timesteps=50000"])))
    assert (run.num_chunks, run.ppo.updates_per_chunk) == (6, 1)
    assert "fewer than arch.num_evaluations" in run.budget_note


@pytest.mark.parametrize("max_chunks", [1, 2, 5, 20, 40])
def test_chunk_split_keeps_the_budget_and_the_most_chunks(max_chunks):
    for updates in range(1, 400):
        chunks, per = chunk_split(updates, max_chunks)
        assert 1 <= chunks <= max_chunks and per >= 1
        assert chunks * per <= updates
        assert chunks * per >= KEPT_BUDGET_SHARE * updates  # at most 5 % of the budget lost
        # no larger number of equal chunks keeps that share
        for more in range(chunks + 1, min(max_chunks, updates) + 1):
            assert more * (updates // more) < KEPT_BUDGET_SHARE * updates
        if updates >= max_chunks and updates % max_chunks == 0:
            assert (chunks, per) == (max_chunks, updates // max_chunks)


def test_budget_below_one_update_is_refused():
    with pytest.raises(ConfigError, match="at least one update .* = 8192 steps"):
        parse(compose_config(["arch.total_timesteps=8000"]))


def test_network_config_keeps_memory_keys_typed_and_round_trips():
    run = parse(compose_config(["network=lru", "network.r_min=0"]))
    assert run.network.memory["r_min"] == 0.0 and isinstance(run.network.memory["r_min"], float)
    assert parse(run.to_dict()) == run


def test_burn_in_and_protocol_group_parse():
    """A valid burn-in parses into the PPO config, and ``+protocol=popgym`` (a config group added
    with ``+``, not a key) is accepted."""
    run = parse(compose_config(["system.bptt_length=16", "system.burn_in=8"]))
    assert plan_run(run).ppo.burn_in == 8
    run = parse(compose_config(["+protocol=popgym"]))
    assert run.system.rollout_length == 1024 and run.network.memory["hidden_size"] == 256
    assert (run.network.embed_size, run.network.head_size, run.network.head_layers) == (128, 128, 2)


def test_env_kwargs_are_typed_by_the_factory():
    run = parse(compose_config(["env=sets/card_table", "env.kwargs.capacity=4e0"]))
    assert run.env.kwargs["capacity"] == 4 and isinstance(run.env.kwargs["capacity"], int)


def test_gymnax_style_kwargs_are_params_fields():
    """A factory with ``**kwargs`` (the gymnax-style adapters) takes any key and refuses the ones
    its env's params lack, in one line naming the key and the allowed fields."""
    run = parse(compose_config(["env=gymnax/MemoryChain-bsuite", "+env.kwargs.memory_length=3"]))
    assert run.env.kwargs == {"memory_length": 3}
    with pytest.raises(ConfigError) as err:
        parse(compose_config(["env=gymnax/CartPole-v1", "+env.kwargs.gravty=3"]))
    message = str(err.value)
    assert "\n" not in message and message.startswith("env.kwargs.gravty=3 is invalid")
    assert "unknown params ['gravty']" in message and "'gravity'" in message


@pytest.mark.parametrize("name", ["craftax/classic_symbolic", "craftax/symbolic"])
def test_craftax_kwargs_and_missing_extra(name, monkeypatch):
    """Without the craftax package a craftax env is one line saying what to install; with it,
    an unknown kwarg names itself and the allowed fields."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda m, *a: None if m == "craftax" else real(m, *a)
    )
    with pytest.raises(ConfigError) as err:
        parse(compose_config([f"env={name}"]))
    assert str(err.value) == (
        f"env.name='{name}' is invalid: needs craftax, which is not installed "
        "(pip install 'stoixlite[craftax]')"
    )
    monkeypatch.undo()
    pytest.importorskip("craftax", reason="Craftax is an optional extra: pip install '.[craftax]'")
    run = parse(compose_config([f"env={name}", "+env.kwargs.max_timesteps=500"]))
    assert run.env.kwargs == {"max_timesteps": 500}
    with pytest.raises(ConfigError) as err:
        parse(compose_config([f"env={name}", "+env.kwargs.bogus=1"]))
    message = str(err.value)
    assert message.startswith(f"env.kwargs.bogus=1 is invalid: {name} refuses it (unknown params")
    assert "'max_timesteps'" in message and "\n" not in message


def test_resume_refuses_a_global_group_override(tmp_path):
    """``+protocol=popgym`` sets keys of several groups: on resume it is one clear error, while
    a key override still applies to the saved config."""
    from omegaconf import OmegaConf

    from stoixlite.cli.resume import resume_config

    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(parse(compose_config([])).to_dict()))
    with pytest.raises(ConfigError, match=r"^\+protocol=popgym is invalid with resume"):
        resume_config(compose_config(["+protocol=popgym"]), tmp_path, ["+protocol=popgym"])
    resumed = resume_config(compose_config(["system.lr=0.001"]), tmp_path, ["system.lr=0.001"])
    assert parse(resumed).system.lr == 0.001
