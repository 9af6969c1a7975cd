"""The base of every wrapper: :class:`Wrapper` forwards an inner env's specs, ``unwrapped``,
``name``, ``label``, ``reset``, ``step`` and traced parameters (``with_params`` rebinds the inner
env); :func:`select_tree` picks between two states or
timesteps per env (the auto-reset's select).

A wrapper's state is a ``flax.struct`` dataclass holding the inner state (``env_state``) plus its
own fields (:mod:`stoixlite.envs.wrappers` lists the standard stack).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from stoixlite.envs.types import Environment, TimeStep


def select_tree(cond: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Leafwise ``where(cond, on_true, on_false)`` for two pytrees of identical structure.

    ``cond`` is a scalar (per unbatched env), so this works under ``vmap``.
    """
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b), on_true, on_false)


class Wrapper(Environment):
    """Base wrapper: forwards specs, ``max_episode_steps`` and ``unwrapped`` to the inner env."""

    def __init__(self, env: Environment):
        self._env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.max_episode_steps = env.max_episode_steps

    @property
    def env(self) -> Environment:
        return self._env

    @property
    def unwrapped(self) -> Environment:
        return self._env.unwrapped

    def traceable_params(self) -> dict[str, float]:
        return self._env.traceable_params()

    def bound_params(self) -> dict[str, Any]:
        return self._env.bound_params()

    def with_params(self, values: Mapping[str, Any]) -> Environment:
        """A copy of this wrapper around the inner env :meth:`with_params` ``values``."""
        if not values:
            return self
        bound = copy.copy(self)
        bound._env = self._env.with_params(values)
        return bound

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def label(self) -> str:
        return self._env.label

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        return self._env.reset(key)

    def step(self, state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        return self._env.step(state, action)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._env!r})"
