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

import jax
import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.position_only_pendulum import PendulumState, PositionOnlyPendulum
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import TimeStep, restart, transition

DIFFICULTY_PARAMS = {
    "easy": {"noise_sigma": 0.1},
    "medium": {"noise_sigma": 0.2},
    "hard": {"noise_sigma": 0.3},
}


class NoisyPositionOnlyPendulum(PositionOnlyPendulum):
    """JAX port of ``popgym.envs.noisy_position_only_pendulum.NoisyPositionOnlyPendulum``."""

    def __init__(
        self, noise_sigma: float = 0.1, max_episode_length: int = 200, physics_dtype=jnp.float32
    ):
        super().__init__(max_episode_length, physics_dtype)
        self.noise_sigma = float(noise_sigma)

    def draw_noise(self, key: jax.Array) -> jax.Array:
        """float32 ``[2]`` noise ``sigma * N(0, 1)`` (drawn in ``physics_dtype``, as popgym)."""
        normal = jax.random.normal(key, (2,), self.physics_dtype)
        return (self.noise_sigma * normal).astype(jnp.float32)

    def _noisy(self, obs: jax.Array, noise: jax.Array) -> jax.Array:
        return jnp.clip(obs + jnp.asarray(noise, jnp.float32), -1.0, 1.0)

    def reset_with_noise(
        self, physics: jax.Array, noise: jax.Array, key: jax.Array | None = None
    ) -> tuple[PendulumState, TimeStep]:
        """Start from ``(theta, theta_dot)`` with the given first-observation noise."""
        state, ts = self.reset_from_physics(physics, key)
        return state, restart(self._noisy(ts.observation, noise))

    def reset(self, key: jax.Array) -> tuple[PendulumState, TimeStep]:
        key, physics_key, noise_key = jax.random.split(key, 3)
        physics = self._initial_physics(physics_key)
        return self.reset_with_noise(physics, self.draw_noise(noise_key), key)

    def step_with_noise(
        self, state: PendulumState, action: jax.Array, noise: jax.Array
    ) -> tuple[PendulumState, TimeStep]:
        """The transition with explicit observation noise (float32 ``[2]``); ``key`` is kept."""
        state, reward, truncated = self._advance(state, action)
        obs = self._noisy(self._obs(state.physics), noise)
        return state, transition(obs, reward, False, truncated)

    def step(self, state: PendulumState, action: jax.Array) -> tuple[PendulumState, TimeStep]:
        key, noise_key = jax.random.split(state.key)
        return self.step_with_noise(state.replace(key=key), action, self.draw_noise(noise_key))


@register_env("popgym/noisy_position_only_pendulum")
def make_noisy_position_only_pendulum(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> NoisyPositionOnlyPendulum:
    """NoisyPositionOnlyPendulum at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return NoisyPositionOnlyPendulum(**params, physics_dtype=physics_dtype)
