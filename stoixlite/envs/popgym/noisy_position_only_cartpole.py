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

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.position_only_cartpole import (
    RESET_BOUND,
    CartPoleState,
    PositionOnlyCartPole,
)
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import TimeStep, restart, transition

DIFFICULTY_PARAMS = {
    "easy": {"noise_sigma": 0.1},
    "medium": {"noise_sigma": 0.2},
    "hard": {"noise_sigma": 0.3},
}


class NoisyPositionOnlyCartPole(PositionOnlyCartPole):
    """JAX port of ``popgym.envs.noisy_position_only_cartpole.NoisyPositionOnlyCartPole``."""

    def __init__(
        self, noise_sigma: float = 0.1, max_episode_length: int = 200, physics_dtype=jnp.float32
    ):
        super().__init__(max_episode_length, physics_dtype)
        self.noise_sigma = float(noise_sigma)
        self._low = np.asarray(self.observation_space.low, np.float32)
        self._high = np.asarray(self.observation_space.high, np.float32)

    def draw_noise(self, key: jax.Array) -> jax.Array:
        """float32 ``[2]`` noise ``sigma * N(0, 1)`` (drawn in ``physics_dtype``, as popgym)."""
        normal = jax.random.normal(key, (2,), self.physics_dtype)
        return (self.noise_sigma * normal).astype(jnp.float32)

    def _noisy(self, obs: jax.Array, noise: jax.Array) -> jax.Array:
        return jnp.clip(obs + noise, self._low, self._high)

    def reset_with_noise(
        self, physics: jax.Array, noise: jax.Array, key: jax.Array | None = None
    ) -> tuple[CartPoleState, TimeStep]:
        """Start from physics ``[4]`` with the given first-observation noise (float32 ``[2]``)."""
        state, ts = self.reset_from_physics(physics, key)
        return state, restart(self._noisy(ts.observation, jnp.asarray(noise, jnp.float32)))

    def reset(self, key: jax.Array) -> tuple[CartPoleState, TimeStep]:
        key, physics_key, noise_key = jax.random.split(key, 3)
        physics = jax.random.uniform(
            physics_key, (4,), self.physics_dtype, minval=-RESET_BOUND, maxval=RESET_BOUND
        )
        return self.reset_with_noise(physics, self.draw_noise(noise_key), key)

    def step_with_noise(
        self, state: CartPoleState, action: jax.Array, noise: jax.Array
    ) -> tuple[CartPoleState, TimeStep]:
        """The transition with explicit observation noise (float32 ``[2]``); ``key`` is kept."""
        state, terminated, truncated = self._advance(state, action)
        obs = self._noisy(self._obs_after_step(state.physics), jnp.asarray(noise, jnp.float32))
        return state, transition(obs, self.reward_scale, terminated, truncated)

    def step(self, state: CartPoleState, action: jax.Array) -> tuple[CartPoleState, TimeStep]:
        key, noise_key = jax.random.split(state.key)
        return self.step_with_noise(state.replace(key=key), action, self.draw_noise(noise_key))


@register_env("popgym/noisy_position_only_cartpole")
def make_noisy_position_only_cartpole(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> NoisyPositionOnlyCartPole:
    """NoisyPositionOnlyCartPole at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return NoisyPositionOnlyCartPole(**params, physics_dtype=physics_dtype)
