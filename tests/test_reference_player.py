"""``evaluate --reference`` works for every env that declares a reference (all 16 popgym ports):
a policy is played on the original popgym env through the declared class, observation encoding
and action mapping, with the training config's observation augmentation. The declarations are
checked here; the play itself, with the checkpoint of a short training run, in
``test_popgym_training.py``."""

from __future__ import annotations

import numpy as np
import pytest

from stoixlite.envs.registry import available_envs, env_spec

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
