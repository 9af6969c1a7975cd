"""Adapter from gymnax (>= 1.0) environments to the stoixlite :class:`Environment` API.

gymnax's ``env.step`` auto-resets internally (and would throw away the true final observation),
so the adapter never calls it: it uses ``reset_env`` and ``step_env`` (no auto-reset), and the
one reset happens in :class:`stoixlite.envs.wrappers.AutoResetWrapper`.

Terminated vs truncated. gymnax 1.0 separates the two: ``step_env`` returns the *natural*
termination flag only (``is_terminated``: pole fell, goal reached, memory query answered, ...),
and the time limit is ``is_truncated(state) = state.time >= params.max_steps_in_episode``, which
gymnax's own ``step`` evaluates on the post-step state. The adapter does the same:

* ``terminated = step_env(...)[3]`` -> discount 0 (no bootstrap);
* ``truncated = is_truncated(new_state, params)`` -> LAST with discount 1 (bootstrap),
  unless the step also terminated: when both happen on the same step, termination wins
  (LAST, discount 0, ``extras["truncated"]`` False after the wrappers), because the true MDP
  ended there and there is nothing to bootstrap from.

The adapter state holds the gymnax state and its own PRNG key, split on every step (the subkey
goes to ``step_env``, which matters for stochastic envs). Observations are float32 and flattened;
the action space is :class:`Discrete` or :class:`Box` from gymnax's space.

Invalid actions (``docs/envs.md``). gymnax clamps or extrapolates out-of-range actions silently
(CartPole's force is ``10 a - 10 (1 - a)``, MountainCar's ``(a - 1) F``, Acrobot indexes its torque
table with clamping) and propagates NaN. The adapter clips Box actions to their bounds and
replaces an invalid action (out-of-range integer, NaN) by the *worst valid action* at that state:
every valid action (every corner ``low``/``high`` of a Box) is stepped with the same key and the
lowest-reward outcome (the first on ties) is taken
(:func:`stoixlite.envs.actions.worst_valid_step`). Valid actions take the normal path, but under
``vmap`` both paths are computed: a step costs ``n + 1`` gymnax steps (3 for a Box).

Registered names (factory kwargs are gymnax ``EnvParams`` overrides, e.g.
``make("gymnax/CartPole-v1", max_steps_in_episode=100)``; ``env_kwargs`` go to the gymnax
constructor, e.g. ``env_kwargs={"num_bits": 2}`` for MemoryChain):

* ``gymnax/CartPole-v1`` (time limit 500), ``gymnax/Acrobot-v1`` (500),
  ``gymnax/Pendulum-v1`` (200, Box action of shape (1,)), ``gymnax/MountainCar-v0`` (200).
* ``gymnax/MemoryChain-bsuite``: bsuite's memory chain (defaults ``memory_length=5``,
  ``num_bits=1``). Observation ``[1 - t/memory_length, query, 2*context-1]`` computed from the
  *pre-step* time (as in bsuite), so the context is visible in the reset observation and again
  in the first step's observation (both at t=0), the query at the observation returned by step
  ``memory_length``; the episode terminates (discount 0) after ``memory_length + 1`` steps with
  reward +1 if the last action equals ``context[query]`` and -1 otherwise (0 on earlier steps).
  With one bit the query is always 0. The time limit (1000) is never reached.
"""

from __future__ import annotations

import functools
import types
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.actions import worst_valid_step
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, Space, TimeStep, restart, transition


@functools.cache
def _gymnax() -> types.ModuleType:
    """gymnax, imported on first use: its import (seaborn, pandas, ...) takes seconds, and the
    registry imports this module to list the env names of every run."""
    import gymnax
    import gymnax.environments.spaces

    if not hasattr(gymnax.environments.environment.Environment, "is_truncated"):
        raise ImportError(
            "stoixlite needs gymnax >= 1.0 (separate is_terminated/is_truncated); "
            f"found gymnax {getattr(gymnax, '__version__', 'unknown')}"
        )
    return gymnax


@struct.dataclass
class GymnaxState:
    env_state: Any  # the gymnax EnvState (has .time)
    key: jax.Array


def _bounds(value: Any) -> float | tuple[float, ...]:
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(arr[0]) if arr.size == 1 else tuple(float(x) for x in arr)


def _convert_space(space: Any, *, flatten: bool) -> Space:
    gymnax_spaces = _gymnax().environments.spaces
    if isinstance(space, gymnax_spaces.Discrete):
        return Discrete(n=int(space.n), dtype=jnp.int32)
    if isinstance(space, gymnax_spaces.Box):
        shape = tuple(int(d) for d in space.shape)
        if flatten:
            shape = (int(np.prod(shape, dtype=np.int64)),)
        return Box(low=_bounds(space.low), high=_bounds(space.high), shape=shape, dtype=jnp.float32)
    raise TypeError(f"unsupported gymnax space {space!r}")


class GymnaxEnv(Environment):
    """A gymnax env as a stoixlite :class:`Environment` (unbatched, no auto-reset).

    Args:
        env_id: gymnax id, e.g. ``"CartPole-v1"``.
        difficulty: accepted for a uniform config interface; must be ``None``.
        env_kwargs: keyword arguments for the gymnax env constructor.
        **param_overrides: fields of the gymnax ``EnvParams`` to replace.
    """

    def __init__(
        self,
        env_id: str,
        difficulty: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        **param_overrides: Any,
    ):
        if difficulty is not None:
            raise ValueError(f"gymnax/{env_id} has no difficulty levels; got {difficulty!r}")
        env, params = _gymnax().make(env_id, **(env_kwargs or {}))
        unknown = set(param_overrides) - set(params.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown params {sorted(unknown)} for gymnax/{env_id}; "
                f"allowed: {sorted(params.__dataclass_fields__)}"
            )
        self._env = env
        self._params = params.replace(**param_overrides)
        self._env_id = env_id
        self.observation_space = _convert_space(env.observation_space(self._params), flatten=True)
        self.action_space = _convert_space(env.action_space(self._params), flatten=False)
        self.max_episode_steps = int(self._params.max_steps_in_episode)

    @property
    def gymnax_env(self) -> Any:
        return self._env

    @property
    def params(self) -> Any:
        return self._params

    @property
    def name(self) -> str:
        return f"gymnax/{self._env_id}"

    def _obs(self, obs: jax.Array) -> jax.Array:
        return jnp.asarray(obs, jnp.float32).reshape(-1)

    def reset(self, key: jax.Array) -> tuple[GymnaxState, TimeStep]:
        key, reset_key = jax.random.split(key)
        obs, env_state = self._env.reset_env(reset_key, self._params)
        return GymnaxState(env_state, key), restart(self._obs(obs))

    def step(self, state: GymnaxState, action: jax.Array) -> tuple[GymnaxState, TimeStep]:
        """One gymnax step; an invalid action is the worst valid one (see module docstring)."""
        return worst_valid_step(self._step, self.action_space, state, action)

    def _step(self, state: GymnaxState, action: jax.Array) -> tuple[GymnaxState, TimeStep]:
        key, step_key = jax.random.split(state.key)
        obs, env_state, reward, terminated, _ = self._env.step_env(
            step_key, state.env_state, action, self._params
        )
        terminated = jnp.asarray(terminated, jnp.bool_)
        truncated = jnp.asarray(self._env.is_truncated(env_state, self._params), jnp.bool_)
        ts = transition(
            self._obs(obs),
            jnp.asarray(reward, jnp.float32).reshape(()),
            terminated,
            truncated & ~terminated,
        )
        return GymnaxState(env_state, key), ts

    def __repr__(self) -> str:
        return f"GymnaxEnv({self._env_id!r})"


GYMNAX_ENVS = ("CartPole-v1", "Acrobot-v1", "MemoryChain-bsuite", "Pendulum-v1", "MountainCar-v0")

for _env_id in GYMNAX_ENVS:
    register_env(f"gymnax/{_env_id}")(partial(GymnaxEnv, _env_id))
