"""Impossible memory-model settings fail validation with one line naming the key, before
anything compiles (each model's ``config_errors`` and the generic ranges of memory keys,
reported by ``stoixlite.config.parse``); so do sizes and seeds beyond int32."""

from __future__ import annotations

import pytest
from conftest import compose_config

from stoixlite.config.parse import parse
from stoixlite.config.strict import ConfigError
from stoixlite.networks.memory import available_memories, memory_config_errors


@pytest.mark.parametrize(
    ("overrides", "key", "hint"),
    [
        (["network=transformer", "network.num_heads=3"], "network.num_heads", "divide"),
        (["network=gtrxl", "network.hidden_size=30"], "network.num_heads", "hidden_size=30"),
        (["network=gtrxl", "network.memory_length=0"], "network.memory_length", "[1, 4096]"),
        (["network=transformer", "network.memory_length=5000"], "network.memory_length", "4096"),
        (["network=transformer", "network.ff_size=-1"], "network.ff_size", "positive"),
        (["network=linear_attention", "network.num_heads=5"], "network.num_heads", "divide"),
        (["network=mlstm", "network.num_heads=0"], "network.num_heads", "positive"),
        (["network=mlstm", "network.chunk_size=0"], "network.chunk_size", "positive"),
        (["network=deltanet", "network.num_heads=7"], "network.num_heads", "divide"),
        (["network=deltanet", "network.chunk_size=0"], "network.chunk_size", "positive"),
        (["network=mamba", "network.conv_size=0"], "network.conv_size", "[1, 64]"),
        (["network=mamba", "network.conv_size=65"], "network.conv_size", "unrolled"),
        (["network=mamba", "network.dt_rank=0"], "network.dt_rank", "positive"),
        (["network=framestack", "network.frames=0"], "network.frames", "[1, 64]"),
        (["network=framestack", "network.frames=100"], "network.frames", "transformer"),
        (["network=tcn", "network.frames=0"], "network.frames", "[1, 64]"),
        (["network=tcn", "network.frames=65"], "network.frames", "unrolled"),
        # generic ranges (stoixlite/networks/memory/rules.py)
        (["network=ffm", "network.trace_size=0"], "network.trace_size", "positive"),
        (["network=ffm", "network.context_size=-1"], "network.context_size", "positive"),
        (["network=ffm", "network.min_period=2000"], "network.min_period", "max_period=1024"),
        (["network=ffm", "network.max_period=nan"], "network.max_period", "finite"),
        (["network=ffm", "network.max_period=inf"], "network.max_period", "finite"),
        (["network=ffm", "network.min_period=-1"], "network.min_period", "(0.0, inf]"),
        (["network=memoroid", "network.num_layers=0"], "network.num_layers", "positive"),
        (["network=mingru", "network.num_layers=-1"], "network.num_layers", "positive"),
        (["network=deltanet", "network.num_layers=0"], "network.num_layers", "positive"),
        (["network=lru", "network.r_min=0.99", "network.r_max=0.5"], "network.r_min", "r_max"),
        (["network=lru", "network.r_max=1.5"], "network.r_max", "(0, 1)"),
        (["network=lru", "network.r_min=-0.5"], "network.r_min", "[0, 1)"),
        (["network=lru", "network.r_min=nan"], "network.r_min", "[0, 1)"),
        (["network=lru", "network.state_size=0"], "network.state_size", "positive"),
        (["network=s5", "network.state_size=-4"], "network.state_size", "positive"),
        (["network=s5", "network.dt_min=0.5", "network.dt_max=0.1"], "network.dt_min", "dt_max"),
        (["network=s5", "network.dt_min=-0.1"], "network.dt_min", "(0.0, inf]"),
        (["network=mamba", "network.dt_min=0"], "network.dt_min", "(0.0, inf]"),
        (["network=mamba", "network.dt_max=inf"], "network.dt_max", "finite"),
        (["network=positional_mlp", "network.max_period=0"], "network.max_period", "finite"),
        (["network=tcn", "network.max_period=-1"], "network.max_period", "(0.0, inf]"),
        (["network=lmu", "network.memory_size=0"], "network.memory_size", "positive"),
        (["network=lmu", "network.theta=0"], "network.theta", "(0.0, inf]"),
        (["network=lmu", "network.theta=inf"], "network.theta", "finite"),
        (["network=indrnn", "network.max_len=0"], "network.max_len", "positive"),
        (["network=indrnn", "network.num_layers=0"], "network.num_layers", "positive"),
        (["network=indrnn", "network.bias_max=-0.5"], "network.bias_max", "[0.0, inf]"),
        (["network=indrnn", "network.bias_max=inf"], "network.bias_max", "finite"),
        (
            ["network=indrnn", "network.recurrent_init_min=1.0"],
            "network.recurrent_init_min",
            "[0, 1)",
        ),
        (["network=s4d", "network.state_size=5"], "network.state_size", "even"),
        (["network=s4d", "network.state_size=0"], "network.state_size", "positive"),
        (["network=s4d", "network.dt_min=0.2", "network.dt_max=0.1"], "network.dt_min", "dt_max"),
        (["network=s4d", "network.scan=parallel"], "network.scan", "associative"),
        (["network=fwp", "network.key_size=0"], "network.key_size", "positive"),
        (["network=fwp", "network.max_period=-1"], "network.max_period", "(0.0, inf]"),
        (["network=fwp", "network.scan=fast"], "network.scan", "sequential"),
        (["network=dnc", "network.memory_cells=0"], "network.memory_cells", "positive"),
        (["network=dnc", "network.memory_cells=2000"], "network.memory_cells", "[1, 1024]"),
        (["network=dnc", "network.cell_size=-3"], "network.cell_size", "positive"),
        (["network=dnc", "network.read_heads=0"], "network.read_heads", "positive"),
        (["network=dnc", "network.read_heads=2.5"], "network.read_heads", "integer"),
        (["network=gru", "network.chrono_period=0.5"], "network.chrono_period", "> 1"),
        (["network=lstm", "network.chrono_period=-3"], "network.chrono_period", "0 (off)"),
        (["network=linear_attention", "+network.eps=0"], "network.eps", "(0.0, inf]"),
        (["network=gru", "network.hidden_size=1e100"], "network.hidden_size", "2147483647"),
        (["network=mlstm", "network.chunk_size=1e12"], "network.chunk_size", "2147483647"),
        (["arch.seed=1e100"], "arch.seed", "[0, 2147483647]"),
        (["arch.num_seeds=1e100"], "arch.num_seeds", "2147483647"),
        (["arch.num_eval_envs=1e100"], "arch.num_eval_envs", "2147483647"),
        (["arch.total_timesteps=1e100"], "arch.total_timesteps", "2147483647"),
    ],
)
def test_impossible_settings_raise_one_line(overrides, key, hint):
    with pytest.raises(ConfigError) as err:
        parse(compose_config(overrides))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(key + "="), message
    assert hint in message


@pytest.mark.parametrize("name", available_memories())
def test_shipped_configs_have_no_errors(name):
    cfg = compose_config([f"network={name}"])
    parse(cfg)
    fields = {k: v for k, v in cfg.network.items() if k != "name"}
    assert memory_config_errors(name, fields) == []
