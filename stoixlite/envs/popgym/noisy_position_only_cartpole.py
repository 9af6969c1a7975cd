"""NoisyPositionOnlyCartPole: position-only CartPole with Gaussian observation noise.

Port of ``popgym.envs.noisy_position_only_cartpole`` (popgym 1.0.7). Physics, rewards (``1/L`` per
step, return in ``[0, 1]``), termination and truncation are those of
:mod:`stoixlite.envs.popgym.position_only_cartpole` with ``L = 200`` at every difficulty (popgym's
Medium/Hard only change the noise).

Observation: float32 ``[2]`` = ``clip(float32(x, theta) + noise, -high, high)`` with
``noise = float32(sigma * N(0, 1)^2)`` drawn fresh after the reset and after every step,
``high = float32(4.8, 0.4189)`` (popgym's observation bounds).

Randomness: the noise comes from the key in the state (split once per draw). The pure transition
given explicit noise is :meth:`NoisyPositionOnlyCartPole.step_with_noise` (and
:meth:`reset_with_noise`), which the tests feed with the reference's own noise draws.

Difficulties (popgym ``NoisyPositionOnlyCartPole{Easy,Medium,Hard}``): ``sigma`` = 0.1, 0.2, 0.3.
"""

from __future__ import annotations

import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.control import NoisyObservation
from stoixlite.envs.popgym.position_only_cartpole import PositionOnlyCartPole
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env

DIFFICULTY_PARAMS = {
    "easy": {"noise_sigma": 0.1},
    "medium": {"noise_sigma": 0.2},
    "hard": {"noise_sigma": 0.3},
}


class NoisyPositionOnlyCartPole(NoisyObservation, PositionOnlyCartPole):
    """JAX port of ``popgym.envs.noisy_position_only_cartpole.NoisyPositionOnlyCartPole``."""


@register_env(
    "popgym/noisy_position_only_cartpole",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("noisy_position_only_cartpole", "NoisyPositionOnlyCartPole"),
)
def make_noisy_position_only_cartpole(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> NoisyPositionOnlyCartPole:
    """NoisyPositionOnlyCartPole at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return NoisyPositionOnlyCartPole(**params, physics_dtype=physics_dtype)
