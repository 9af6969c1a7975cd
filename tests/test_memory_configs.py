"""configs/network/*.yaml: one per registered memory model, every key understood."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from stoixlite.networks.memory import available_memories, build_memory, memory_fields
from stoixlite.run.config import ACTOR_CRITIC_KEYS

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "network"
# Keys every network config has: those the actor-critic reads, plus the memory width.
GENERIC_KEYS = set(ACTOR_CRITIC_KEYS) | {"hidden_size"}


def test_every_memory_has_a_config():
    files = {p.stem for p in CONFIG_DIR.glob("*.yaml")}
    missing = set(available_memories()) - files
    assert not missing, f"memory models without configs/network/<name>.yaml: {sorted(missing)}"


@pytest.mark.parametrize("name", available_memories())
def test_config_keys_are_known_and_build(name):
    path = CONFIG_DIR / f"{name}.yaml"
    assert path.read_text().startswith("# @package network\n")
    cfg = OmegaConf.to_container(OmegaConf.load(path))
    assert cfg["name"] == name
    assert GENERIC_KEYS <= set(cfg), f"{path.name} lacks {sorted(GENERIC_KEYS - set(cfg))}"
    unknown = set(cfg) - GENERIC_KEYS - memory_fields(name)
    assert not unknown, f"{path.name}: keys no module accepts: {sorted(unknown)}"
    model = build_memory(name, **{k: v for k, v in cfg.items() if k != "name"})
    assert model.hidden_size == cfg["hidden_size"]
