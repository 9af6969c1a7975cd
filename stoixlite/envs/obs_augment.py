"""The POPGym baselines' observation augmentation (:class:`ObsAugmentWrapper`): the previous
action, optionally the previous reward, and an is-first flag appended to each vector observation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.actions import clip_action, is_valid_action
from stoixlite.envs.types import Box, Discrete, Environment, Space, TimeStep
from stoixlite.envs.wrapper_base import Wrapper
from stoixlite.specs import image_shape


@struct.dataclass
class ObsAugmentState:
    env_state: Any


def _flat_bounds(value: Any, size: int, shape: tuple[int, ...]) -> np.ndarray:
    """Bounds (a scalar or ``size`` values) as a flat float64 vector of length ``size``."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == size:
        return arr.reshape(-1)
    return np.broadcast_to(arr, shape).reshape(-1)


def _action_width(space: Space) -> int:
    if isinstance(space, Discrete):
        return int(space.n)
    return int(np.prod(space.shape, dtype=np.int64))


class ObsAugmentWrapper(Wrapper):
    """Appends the previous action and an is-first flag to the observation (POPGym baselines),
    and optionally the previous reward.

    Observation ``[D]`` becomes ``[D + A + 1]`` (float32), or ``[D + A + 2]`` with
    ``prev_reward=True``; with ``prev_action=False`` the action encoding is left out (A = 0)::

        concat(obs.reshape(-1), (prev_action_encoding [A],) (prev_reward [1],) is_first [1])

    where the previous-action encoding is ``one_hot(action, n)`` for ``Discrete(n)`` (A = n) and the
    flattened action vector, clipped to the action bounds as the env applies it, for ``Box``
    (A = prod(shape)); an invalid action (out of range, or NaN in a Box) is encoded as zeros.
    After ``reset`` the previous action (and reward) are zeros and is_first = 1.0; after
    ``step(state, a)`` they encode ``a`` (and the step's reward) and is_first = 0.0. The previous
    reward is off by default (POPGym does not use it; RL^2-style agents do). Place this wrapper
    *below* :class:`~stoixlite.envs.wrappers.AutoResetWrapper` (see
    :func:`~stoixlite.envs.wrappers.wrap_env`). Image observations
    (:func:`~stoixlite.specs.image_shape`) are refused with a ``ValueError``: appended flags have
    no place in an image (``env.obs_augment=true`` on an image env is a config error).
    """

    keeps_actions = True  # hands every action on unchanged

    def __init__(self, env: Environment, prev_reward: bool = False, prev_action: bool = True):
        super().__init__(env)
        image = image_shape(env.observation_space)
        if image is not None:
            raise ValueError(
                f"{env.label} has image observations {list(image)}: the observation augmentation "
                "appends to a flat vector and does not apply to images (obs_augment=False)"
            )
        self._prev_reward = bool(prev_reward)
        self._prev_action = bool(prev_action)
        obs_space = env.observation_space
        obs_dim = int(np.prod(obs_space.shape, dtype=np.int64))
        self._obs_dim = obs_dim
        self._act_dim = _action_width(env.action_space) if self._prev_action else 0
        obs_low = _flat_bounds(obs_space.low, obs_dim, tuple(obs_space.shape))
        obs_high = _flat_bounds(obs_space.high, obs_dim, tuple(obs_space.shape))
        space = env.action_space
        if isinstance(space, Discrete) or not self._prev_action:
            act_low = np.zeros(self._act_dim)
            act_high = np.ones(self._act_dim)
        else:
            # Zero (the reset value) must be inside the bounds.
            act_low = np.minimum(_flat_bounds(space.low, self._act_dim, tuple(space.shape)), 0.0)
            act_high = np.maximum(_flat_bounds(space.high, self._act_dim, tuple(space.shape)), 0.0)
        rew_low, rew_high = ([-np.inf], [np.inf]) if self._prev_reward else ([], [])
        low = np.concatenate([obs_low, act_low, rew_low, [0.0]])
        high = np.concatenate([obs_high, act_high, rew_high, [1.0]])
        self.observation_space = Box(
            low=tuple(float(x) for x in low),
            high=tuple(float(x) for x in high),
            shape=(len(low),),
            dtype=jnp.float32,
        )

    def _encode_action(self, action: jax.Array) -> jax.Array:
        if not self._prev_action:
            return jnp.zeros((0,), jnp.float32)
        space = self.action_space
        if isinstance(space, Discrete):  # out-of-range integers give an all-zero one-hot
            return jax.nn.one_hot(action, space.n, dtype=jnp.float32)
        valid = is_valid_action(space, action)
        return jnp.where(valid, clip_action(space, action), 0.0).reshape(-1)

    def _augment(
        self, obs: jax.Array, prev_action: jax.Array, prev_reward: jax.Array, is_first: float
    ) -> jax.Array:
        reward = [jnp.asarray(prev_reward, jnp.float32).reshape(1)] if self._prev_reward else []
        return jnp.concatenate(
            [
                jnp.asarray(obs, jnp.float32).reshape(-1),
                prev_action,
                *reward,
                jnp.full((1,), is_first, jnp.float32),
            ]
        )

    def augment(
        self, obs: jax.Array, action: jax.Array, reward: jax.Array, is_first: jax.Array
    ) -> jax.Array:
        """The augmented observation of one env: ``obs`` with ``action`` and ``reward`` (the step
        that led to it) and ``is_first``; where ``is_first`` the action and reward are zeros,
        as after :meth:`reset`. The host envs (:mod:`stoixlite.envs.host.vector`) augment
        through it."""
        first = jnp.asarray(is_first, jnp.bool_)
        encoded = jnp.where(first, 0.0, self._encode_action(action))
        reward = jnp.where(first, 0.0, jnp.asarray(reward, jnp.float32))
        return self._augment(obs, encoded, reward, first.astype(jnp.float32))

    def reset(self, key: jax.Array) -> tuple[ObsAugmentState, TimeStep]:
        env_state, ts = self._env.reset(key)
        zero_action = jnp.zeros((self._act_dim,), jnp.float32)
        obs = self._augment(ts.observation, zero_action, jnp.zeros(()), 1.0)
        return ObsAugmentState(env_state), ts.replace(observation=obs)

    def step(self, state: ObsAugmentState, action: jax.Array) -> tuple[ObsAugmentState, TimeStep]:
        env_state, ts = self._env.step(state.env_state, action)
        obs = self._augment(ts.observation, self._encode_action(action), ts.reward, 0.0)
        return ObsAugmentState(env_state), ts.replace(observation=obs)
