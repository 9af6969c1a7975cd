"""NoisyPositionOnlyPendulum: position-only Pendulum with Gaussian observation noise.

Port of ``popgym.envs.noisy_position_only_pendulum`` (popgym 1.0.7). Physics, actions (clipped to
``[-2, 2]`` in the env), rewards (return in ``[-1, 1]``) and truncation are those of
:mod:`stoixlite.envs.popgym.position_only_pendulum` with ``L = 200`` at every difficulty (popgym's
Medium/Hard only change the noise).

Observation: float32 ``[2]`` = ``clip(float32(cos theta, sin theta) + noise, -1, 1)`` with
``noise = float32(sigma * N(0, 1)^2)`` drawn fresh after the reset and after every step. The pure
transition given explicit noise is :meth:`NoisyPositionOnlyPendulum.step_with_noise` (and
:meth:`reset_with_noise`), which the tests feed with the reference's own draws.

Difficulties (popgym ``NoisyPositionOnlyPendulum{Easy,Medium,Hard}``): ``sigma`` = 0.1, 0.2, 0.3.
"""

from __future__ import annotations

import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.control import NoisyObservation
from stoixlite.envs.popgym.position_only_pendulum import PositionOnlyPendulum
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env

DIFFICULTY_PARAMS = {
    "easy": {"noise_sigma": 0.1},
    "medium": {"noise_sigma": 0.2},
    "hard": {"noise_sigma": 0.3},
}


class NoisyPositionOnlyPendulum(NoisyObservation, PositionOnlyPendulum):
    """JAX port of ``popgym.envs.noisy_position_only_pendulum.NoisyPositionOnlyPendulum``."""


@register_env(
    "popgym/noisy_position_only_pendulum",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("noisy_position_only_pendulum", "NoisyPositionOnlyPendulum"),
)
def make_noisy_position_only_pendulum(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> NoisyPositionOnlyPendulum:
    """NoisyPositionOnlyPendulum at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return NoisyPositionOnlyPendulum(**params, physics_dtype=physics_dtype)
