"""Impossible memory-model settings fail validation with one line naming the key, before
anything compiles (each model's ``config_errors``, reported by ``stoixlite.run.config.parse``)."""

from __future__ import annotations

import pytest
from conftest import compose_config

from stoixlite.networks.memory import available_memories, memory_config_errors
from stoixlite.run.config import ConfigError, parse


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
