"""Shared skeleton of the POPGym classic-control ports (CartPole and Pendulum variants).

:class:`PhysicsEnv` holds a physics vector integrated in ``physics_dtype`` (float32 by default,
float64 under ``jax.enable_x64``), a step counter truncating the episode after
``max_episode_length`` steps (a time limit, discount 1) and a PRNG key. Subclasses supply the
initial-state distribution, the physics step and the observation.

:class:`NoisyObservation` adds popgym's observation noise: float32
``clip(obs + sigma * N(0, 1), low, high)`` with the bounds of ``observation_space``, drawn fresh
after the reset and after every step from the key in the state. The pure transitions given
explicit noise are :meth:`NoisyObservation.reset_with_noise` and
:meth:`NoisyObservation.step_with_noise`, which the tests feed with the reference's own draws.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.types import Environment, TimeStep, restart, transition


@struct.dataclass
class PhysicsState:
    """physics: ``[P]`` physics vector in ``physics_dtype``; num_steps: int32; key: PRNG key (used
    by the noisy variants only, carried by all for a uniform state)."""

    physics: jax.Array
    num_steps: jax.Array
    key: jax.Array


class PhysicsEnv(Environment[PhysicsState]):
    """A time-limited physics simulation (see module docstring).

    Subclasses implement :meth:`initial_physics`, :meth:`physics_step` and :meth:`_obs_after_step`
    (float32 observation from the physics vector), and set ``observation_space`` and
    ``action_space``; :meth:`_obs_after_reset` defaults to :meth:`_obs_after_step`.
    """

    def __init__(self, max_episode_length: int, physics_dtype=jnp.float32):
        self.max_episode_length = int(max_episode_length)
        self.max_episode_steps = self.max_episode_length
        self.physics_dtype = jnp.dtype(physics_dtype)

    def initial_physics(self, key: jax.Array) -> jax.Array:
        """A random initial physics vector ``[P]`` in ``physics_dtype``."""
        raise NotImplementedError

    def physics_step(
        self, physics: jax.Array, action: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(physics, action) -> (physics, reward, terminated)``."""
        raise NotImplementedError

    def _obs_after_step(self, physics: jax.Array) -> jax.Array:
        raise NotImplementedError

    def _obs_after_reset(self, physics: jax.Array) -> jax.Array:
        return self._obs_after_step(physics)

    def reset_from_physics(
        self, physics: jax.Array, key: jax.Array | None = None
    ) -> tuple[PhysicsState, TimeStep]:
        """Start an episode from a given initial physics state ``[P]`` (e.g. the reference's)."""
        physics = jnp.asarray(physics, self.physics_dtype)
        key = jax.random.PRNGKey(0) if key is None else key
        state = PhysicsState(physics=physics, num_steps=jnp.asarray(0, jnp.int32), key=key)
        return state, restart(self._obs_after_reset(physics))

    def reset(self, key: jax.Array) -> tuple[PhysicsState, TimeStep]:
        key, sub = jax.random.split(key)
        return self.reset_from_physics(self.initial_physics(sub), key)

    def _advance(self, state: PhysicsState, action: jax.Array):
        """Integrate one step: ``(state, reward, terminated, truncated)``."""
        physics, reward, terminated = self.physics_step(state.physics, action)
        num_steps = state.num_steps + 1
        truncated = num_steps >= self.max_episode_length
        state = state.replace(physics=physics, num_steps=num_steps)
        return state, reward, terminated, truncated

    def step(self, state: PhysicsState, action: jax.Array) -> tuple[PhysicsState, TimeStep]:
        state, reward, terminated, truncated = self._advance(state, action)
        obs = self._obs_after_step(state.physics)
        return state, transition(obs, reward, terminated, truncated)


class NoisyObservation(PhysicsEnv):
    """Mixin adding popgym's Gaussian observation noise to a :class:`PhysicsEnv` (list it first:
    ``class Noisy(NoisyObservation, Clean)``); noise is float32 ``[2]``."""

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
        return jnp.clip(obs + jnp.asarray(noise, jnp.float32), self._low, self._high)

    def reset_with_noise(
        self, physics: jax.Array, noise: jax.Array, key: jax.Array | None = None
    ) -> tuple[PhysicsState, TimeStep]:
        """Start from physics ``[P]`` with the given first-observation noise (float32 ``[2]``)."""
        state, ts = self.reset_from_physics(physics, key)
        return state, restart(self._noisy(ts.observation, noise))

    def reset(self, key: jax.Array) -> tuple[PhysicsState, TimeStep]:
        key, physics_key, noise_key = jax.random.split(key, 3)
        physics = self.initial_physics(physics_key)
        return self.reset_with_noise(physics, self.draw_noise(noise_key), key)

    def step_with_noise(
        self, state: PhysicsState, action: jax.Array, noise: jax.Array
    ) -> tuple[PhysicsState, TimeStep]:
        """The transition with explicit observation noise (float32 ``[2]``); ``key`` is kept."""
        state, reward, terminated, truncated = self._advance(state, action)
        obs = self._noisy(self._obs_after_step(state.physics), noise)
        return state, transition(obs, reward, terminated, truncated)

    def step(self, state: PhysicsState, action: jax.Array) -> tuple[PhysicsState, TimeStep]:
        key, noise_key = jax.random.split(state.key)
        return self.step_with_noise(state.replace(key=key), action, self.draw_noise(noise_key))
