"""``evaluate --reference`` works for every env that declares a reference (all 16 popgym ports):
a policy is played on the original popgym env through the declared class, observation encoding
and action mapping, with the training config's observation augmentation."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import TINY, compose_config

from stoixlite.envs.registry import available_envs, env_spec
from stoixlite.evaluate import evaluate_reference
from stoixlite.run.build import build_run

PORTS = [name for name in available_envs() if env_spec(name).reference is not None]


def test_every_popgym_port_declares_its_reference():
    popgym = [name for name in available_envs() if env_spec(name).suite == "popgym"]
    assert len(popgym) == 16 and PORTS == popgym


@pytest.mark.parametrize("name", PORTS)
def test_reference_classes_and_encodings(name):
    spec = env_spec(name)
    assert spec.difficulties == ("easy", "medium", "hard")
    for level in spec.difficulties:
        original = spec.reference.make(level)
        port = spec.factory(difficulty=level)
        obs, _ = original.reset(seed=0)
        encoded = spec.reference.encoder(port, original)(obs)
        assert encoded.dtype == np.float32
        assert encoded.shape == tuple(port.observation_space.shape), level


@pytest.mark.parametrize("name", PORTS)
def test_policy_plays_the_reference(name):
    run = build_run(compose_config(TINY + [f"env={name}", "arch.eval_max_steps=60"]))
    state, _ = run.init()
    returns = evaluate_reference(run, state.params, episodes=2, greedy=False, seed=0)
    assert returns.shape == (2,) and np.isfinite(returns).all()
    jax.clear_caches()
