"""configs/network/*.yaml: one per registered memory model, holding only that model's own keys;
composed with configs/actor_critic/default.yaml they make a complete, valid network group."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from stoixlite.config.parse import parse
from stoixlite.config.schema import ACTOR_CRITIC_KEYS
from stoixlite.networks.memory import available_memories, build_memory, memory_fields

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIG_DIR = CONFIGS / "network"


def test_every_memory_has_a_config():
    files = {p.stem for p in CONFIG_DIR.glob("*.yaml")}
    missing = set(available_memories()) - files
    assert not missing, f"memory models without configs/network/<name>.yaml: {sorted(missing)}"


def test_actor_critic_config_holds_exactly_the_actor_critic_keys():
    path = CONFIGS / "actor_critic" / "default.yaml"
    assert path.read_text().startswith("# @package network\n")
    assert set(OmegaConf.to_container(OmegaConf.load(path))) == set(ACTOR_CRITIC_KEYS) - {"name"}


@pytest.mark.parametrize("name", available_memories())
def test_config_keys_are_known_and_build(name):
    path = CONFIG_DIR / f"{name}.yaml"
    assert path.read_text().startswith("# @package network\n")
    cfg = OmegaConf.to_container(OmegaConf.load(path))
    assert cfg["name"] == name
    assert "hidden_size" in cfg, f"{path.name} lacks the memory width hidden_size"
    unknown = set(cfg) - {"name"} - memory_fields(name)
    assert not unknown, f"{path.name}: keys the memory model does not accept: {sorted(unknown)}"
    model = build_memory(name, **{k: v for k, v in cfg.items() if k != "name"})
    assert model.hidden_size == cfg["hidden_size"]


@pytest.mark.parametrize("name", available_memories())
def test_composed_network_group_is_complete(name):
    composed = compose_config([f"network={name}"])
    assert set(ACTOR_CRITIC_KEYS) <= set(composed.network)
    net = parse(composed).network
    assert net.name == name
    own = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{name}.yaml"))
    assert dict(net.memory) == {k: v for k, v in own.items() if k != "name"}


ENV_NETWORK_DIR = CONFIGS / "env_network"


def _env_choices() -> set[str]:
    env_dir = CONFIGS / "env"
    return {str(p.relative_to(env_dir).with_suffix("")) for p in env_dir.rglob("*.yaml")}


def test_every_env_network_file_names_an_existing_env_and_network():
    """A misspelt ``configs/env_network/<env>_<network>.yaml`` would never apply (the group is
    optional): each file must split into a real env choice and a real network choice."""
    networks = {p.stem for p in CONFIG_DIR.glob("*.yaml")}
    files = sorted(ENV_NETWORK_DIR.rglob("*.yaml"))
    assert files, "configs/env_network/ holds no specialisation"
    pairs = {f"{env}_{net}" for env in _env_choices() for net in networks}
    for path in files:
        stem = str(path.relative_to(ENV_NETWORK_DIR).with_suffix(""))
        assert stem in pairs, f"{path}: not <env choice>_<network choice>"
        assert path.read_text().count("# @package _global_") == 1


@pytest.mark.parametrize("network", ["gru", "lstm"])
def test_env_network_defaults_apply_to_their_pair_only_and_the_command_line_wins(network):
    pair = compose_config([f"network={network}", "env=popgym/repeat_first"])
    assert pair.network.chrono_period == 512
    assert parse(pair).network.memory["chrono_period"] == 512
    # the same network on another env, and another network on the same env: untouched
    other_env = compose_config([f"network={network}", "env=popgym/repeat_previous"])
    assert other_env.network.chrono_period == 0
    assert (
        "chrono_period"
        not in compose_config(["network=memoroid", "env=popgym/repeat_first"]).network
    )
    # the command line overrides the pair's default
    cli = compose_config(
        [f"network={network}", "env=popgym/repeat_first", "network.chrono_period=0"]
    )
    assert cli.network.chrono_period == 0


@pytest.mark.parametrize("env", ["higher_lower", "noisy_position_only_cartpole", "repeat_first"])
@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_indrnn_starts_with_zero_biases_where_its_pair_says_so(env, difficulty):
    """configs/env_network/popgym/<env>_indrnn.yaml: zero biases at every difficulty of its env;
    POPGym's U(0, 1) elsewhere; the command line still wins."""
    pair = ["network=indrnn", f"env=popgym/{env}", f"env.difficulty={difficulty}"]
    assert parse(compose_config(pair)).network.memory["bias_max"] == 0.0
    other = compose_config(["network=indrnn", "env=popgym/autoencode"])
    assert parse(other).network.memory["bias_max"] == 1.0
    assert parse(compose_config([*pair, "network.bias_max=1.0"])).network.memory["bias_max"] == 1.0


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_indrnn_starts_as_a_long_memory_on_repeat_first(difficulty):
    """configs/env_network/popgym/repeat_first_indrnn.yaml: recurrent weights U(0.9, 1) at every
    difficulty; POPGym's U(0, 1) with other envs and other models; the command line still wins."""
    pair = ["network=indrnn", "env=popgym/repeat_first", f"env.difficulty={difficulty}"]
    assert parse(compose_config(pair)).network.memory["recurrent_init_min"] == 0.9
    for env in ("autoencode", "higher_lower", "noisy_position_only_cartpole"):
        other = compose_config(["network=indrnn", f"env=popgym/{env}"])
        assert parse(other).network.memory["recurrent_init_min"] == 0.0, env
    assert (
        "recurrent_init_min"
        not in compose_config(["network=gru", "env=popgym/repeat_first"]).network
    )
    cli = parse(compose_config([*pair, "network.recurrent_init_min=0.5"]))
    assert cli.network.memory["recurrent_init_min"] == 0.5
