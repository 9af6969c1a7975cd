"""configs/network/*.yaml: one per registered memory model, holding only that model's own keys;
composed with configs/actor_critic/default.yaml they make a complete, valid network group."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from stoixlite.networks.memory import available_memories, build_memory, memory_fields
from stoixlite.run.config import ACTOR_CRITIC_KEYS, parse

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
