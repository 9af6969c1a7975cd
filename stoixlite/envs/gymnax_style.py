"""Any env with gymnax's functional API as a stoixlite :class:`Environment`: the one adapter
behind ``gymnax/*`` (:mod:`stoixlite.envs.gymnax_adapter`) and ``craftax/*``
(:mod:`stoixlite.envs.craftax_adapter`), and the base class for adding such an env in one file
(docs/extending.md, "Adding a JAX env in one file").

The wrapped object (``functional``) provides, as gymnax environments do::

    reset_env(key, params)                -> (obs, env_state)
    step_env(key, env_state, action, params) -> (obs, env_state, reward, done, info)
    observation_space(params), action_space(params)

``reset_env``/``step_env`` must not auto-reset (gymnax's and Craftax's ``step`` do; the adapter
never calls it, so the true final observation survives and the one reset happens in
:class:`stoixlite.envs.wrappers.AutoResetWrapper`). Spaces are read by duck typing: a space with
an ``n`` is ``Discrete(n)``; one with ``low``, ``high`` and ``shape`` is a ``Box``. Observations
are flattened to float32 vectors, except with ``keep_images=True``, where a rank-3 observation
``[H, W, C]`` stays an image (``uint8`` if the space says so, float32 otherwise) for
``network.encoder=cnn``; a discrete observation (a cell index, e.g. gymnax's FrozenLake) is one-hot
``[n]``; a Box action keeps its shape.

What a subclass may override:

* :meth:`GymnaxStyleEnv.terminated_truncated` ``(env_state, done, info) -> (terminated,
  truncated)``: by default ``done`` is a termination (discount 0) and nothing truncates. An env
  whose ``done``
  also fires on a time limit must split it: the time limit is a truncation (discount 1, the
  value of the final observation is bootstrapped); when both happen on one step termination wins.
* :meth:`GymnaxStyleEnv.episode_metrics` ``(env_state) -> {name: float32 scalar}``: statistics
  of the episode so far (e.g. achievements unlocked). When non-empty, every timestep carries them
  as ``extras["episode_metrics"]``; on a LAST step they describe the episode that ended, and the
  learner logs their mean over the episodes finished in each update as ``train/env/<name>``
  (docs/configuration.md, metrics).

The adapter state holds the wrapped env's state and its own PRNG key, split on every step (the
subkey goes to ``step_env``). Invalid actions (out-of-range integers, NaN) are the worst valid
action at that state (:func:`stoixlite.envs.actions.worst_valid_step`; Box actions are clipped).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.actions import worst_valid_step
from stoixlite.envs.types import (
    EPISODE_METRICS,
    Box,
    Discrete,
    Environment,
    Space,
    TimeStep,
    restart,
    transition,
)


@struct.dataclass
class GymnaxState:
    """State of a gymnax-style env: the wrapped env's state (``env_state``; a gymnax ``EnvState``
    has ``.time``) and the adapter's PRNG key."""

    env_state: Any
    key: jax.Array


def _bounds(value: Any) -> float | tuple[float, ...]:
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(arr[0]) if arr.size == 1 else tuple(float(x) for x in arr)


def convert_space(space: Any, *, flatten: bool, keep_images: bool = False) -> Space:
    """A gymnax-style space as a stoixlite :class:`Discrete` (it has ``n``) or :class:`Box` (it
    has ``low``, ``high``, ``shape``; ``flatten`` makes the shape ``(prod(shape),)``, float32).
    With ``keep_images`` a rank-3 Box ``[H, W, C]`` keeps its shape, and its dtype if ``uint8``
    (float32 otherwise)."""
    if hasattr(space, "n"):
        return Discrete(n=int(space.n), dtype=jnp.int32)
    if all(hasattr(space, field) for field in ("low", "high", "shape")):
        shape = tuple(int(d) for d in space.shape)
        dtype = jnp.float32
        if keep_images and len(shape) == 3:
            if np.dtype(getattr(space, "dtype", np.float32)) == np.uint8:
                dtype = jnp.uint8
        elif flatten:
            shape = (int(np.prod(shape, dtype=np.int64)),)
        return Box(low=_bounds(space.low), high=_bounds(space.high), shape=shape, dtype=dtype)
    raise TypeError(f"unsupported space {space!r}: need Discrete (n) or Box (low, high, shape)")


_INT32_MAX = int(np.iinfo(np.int32).max)  # integers inside a compiled program are int32


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _is_finite_number(value: Any) -> bool:
    return _is_number(value) and bool(np.isfinite(float(value)))


def param_value(key: str, default: Any, value: Any, time_limit: bool = False) -> Any:
    """``value`` as the parameter ``key`` whose default is ``default`` takes it; ``ValueError``
    (one line naming ``key=value``) if it does not fit. gymnax-style params declare types (their
    defaults') but no ranges; the rules:

    * a bool default takes ``true``/``false``;
    * an integer default (or ``time_limit``: the env's time limit, whatever its default's type)
      takes an integer within int32; one with a positive default (a time limit, a length, a
      count) must be >= 1, one with a default of 0 must be >= 0;
    * a float default (or a scalar array) takes a finite number;
    * a tuple or array default takes a list of as many finite numbers (``null`` where the
      default has ``None``).
    """
    given = f"{key}={value!r}"
    if isinstance(default, (bool, np.bool_)):
        if not isinstance(value, bool):
            raise ValueError(f"{given}: must be true or false")
        return value
    if time_limit or isinstance(default, (int, np.integer)):
        if not _is_finite_number(value) or float(value) != int(value):
            raise ValueError(f"{given}: must be an integer; default {default}")
        low = 1 if time_limit or default > 0 else 0 if default == 0 else -_INT32_MAX
        if not low <= int(value) <= _INT32_MAX:
            raise ValueError(
                f"{given}: must be an integer in [{low}, {_INT32_MAX}]; default {default}"
            )
        return int(value)
    if isinstance(default, (float, np.floating)) or np.shape(default) == ():
        if not _is_finite_number(value):
            raise ValueError(f"{given}: must be a finite number; default {default}")
        return float(value)
    entries = list(np.asarray(default, dtype=object).reshape(-1))
    values = list(value) if isinstance(value, (tuple, list)) else []
    if len(values) != len(entries) or not all(
        (v is None and d is None) or _is_finite_number(v)
        for v, d in zip(values, entries, strict=True)
    ):
        raise ValueError(
            f"{given}: must be a list of {len(entries)} finite numbers; default {default}"
        )
    if isinstance(default, (tuple, list)):
        return type(default)(values)
    return jnp.asarray(values, dtype=default.dtype).reshape(np.shape(default))


def replace_params(
    params: Any, overrides: dict[str, Any], env_name: str, time_limit: str | None = None
) -> Any:
    """``params`` (a dataclass, e.g. gymnax's ``EnvParams``) with ``overrides`` replaced, each
    checked against its default (:func:`param_value`; ``time_limit``: the name of the env's time
    limit parameter, if any); ``ValueError`` naming the unknown keys and the allowed ones, or
    the first value that does not fit."""
    allowed = sorted(params.__dataclass_fields__)
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ValueError(f"unknown params {unknown} for {env_name}; allowed: {allowed}")
    return params.replace(
        **{
            key: param_value(key, getattr(params, key), value, time_limit=key == time_limit)
            for key, value in overrides.items()
        }
    )


# Whether an env's float params trace (GymnaxStyleEnv.traceable_params), per kind of env.
_TRACES: dict[tuple[Any, ...], bool] = {}


class GymnaxStyleEnv(Environment):
    """A gymnax-style env as a stoixlite :class:`Environment` (unbatched, no auto-reset).

    Args:
        functional: the env object (``reset_env``, ``step_env``, spaces; see module docstring).
        params: its parameters, passed to every call.
        name: the registered name (``suite/env``), used in messages.
        max_episode_steps: the time limit, if any (informative: the contract test checks that
            no episode runs past it; the evaluator caps its episodes there).
        keep_images: keep rank-3 observations as images (see the module docstring) instead of
            flattening them.
    """

    def __init__(
        self,
        functional: Any,
        params: Any,
        name: str,
        max_episode_steps: int | None = None,
        keep_images: bool = False,
    ):
        self._env = functional
        self._params = params
        self._bound: dict[str, Any] = {}  # values given by with_params (traced or not)
        self._traceable: dict[str, float] | None = None  # computed on first use
        self._name = name
        observation = convert_space(
            functional.observation_space(params), flatten=True, keep_images=keep_images
        )
        # A discrete observation is read one-hot: the networks take vectors of features.
        self._one_hot = observation.n if isinstance(observation, Discrete) else None
        if self._one_hot is not None:
            observation = Box(low=0.0, high=1.0, shape=(self._one_hot,), dtype=jnp.float32)
        self.observation_space = observation
        self.action_space = convert_space(functional.action_space(params), flatten=False)
        self.max_episode_steps = max_episode_steps

    @property
    def params(self) -> Any:
        """The params the env computes with: its own, with the values of :meth:`with_params`."""
        return self._params.replace(**self._bound) if self._bound else self._params

    def traceable_params(self) -> dict[str, float]:
        """The params that are plain floats (not bools, integers or arrays: those may shape or
        select what the env computes) and that the env computes with as traced values (checked
        once by tracing a reset and a step with them as inputs; none if that fails)."""
        if self._traceable is None:
            fields = {k: getattr(self._params, k) for k in self._params.__dataclass_fields__}
            floats = {
                k: float(v)
                for k, v in fields.items()
                if isinstance(v, (float, np.floating)) and not isinstance(v, bool)
            }
            check = (type(self), type(self._env), self._name, tuple(sorted(floats)))
            if check not in _TRACES:  # one trace per kind of env and process
                _TRACES[check] = bool(floats) and self._traces(floats)
            self._traceable = floats if _TRACES[check] else {}
        return dict(self._traceable)

    def _traces(self, values: dict[str, float]) -> bool:
        """Whether a reset and a step run with ``values`` as traced inputs."""
        action = jnp.zeros(self.action_space.shape, self.action_space.dtype)

        def reset_step(params: dict[str, jax.Array], key: jax.Array) -> Any:
            env = self.with_params(params)
            return env.step(env.reset(key)[0], action)

        traced = {k: jax.ShapeDtypeStruct((), jnp.float32) for k in values}
        try:
            jax.eval_shape(reset_step, traced, jax.ShapeDtypeStruct((2,), jnp.uint32))
        except Exception:  # a value used in Python control flow or as a shape: kept constant
            return False
        return True

    def bound_params(self) -> dict[str, Any]:
        return dict(self._bound)

    def with_params(self, values: Mapping[str, Any]) -> GymnaxStyleEnv:
        """A copy computing with ``values`` for those fields of its params (see
        :meth:`traceable_params`; any field of the params dataclass is accepted)."""
        if not values:
            return self
        unknown = sorted(set(values) - set(self._params.__dataclass_fields__))
        if unknown:
            raise ValueError(f"{self._name} has no params {unknown}")
        bound = copy.copy(self)
        bound._bound = dict(values)
        return bound

    @property
    def name(self) -> str:
        return self._name

    def terminated_truncated(
        self, env_state: Any, done: jax.Array, info: dict[str, Any]
    ) -> tuple[jax.Array, jax.Array]:
        """``(terminated, truncated)`` (bool scalars) of a step that ended in ``env_state`` with
        the wrapped env's ``done`` and ``info``. Default: ``done`` terminates, nothing
        truncates."""
        del env_state, info
        return jnp.asarray(done, jnp.bool_), jnp.asarray(False)

    def episode_metrics(self, env_state: Any) -> dict[str, jax.Array]:
        """Statistics of the episode so far, ``{name: float32 scalar}``, read from ``env_state``
        (valid for the episode that ended on a LAST step). Default: none."""
        del env_state
        return {}

    def _extras(self, env_state: Any) -> dict[str, Any]:
        metrics = self.episode_metrics(env_state)
        if not metrics:
            return {}
        return {EPISODE_METRICS: {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}}

    def _obs(self, obs: jax.Array) -> jax.Array:
        space = self.observation_space
        if self._one_hot is not None:
            return jax.nn.one_hot(jnp.asarray(obs).reshape(()), self._one_hot, dtype=space.dtype)
        return jnp.asarray(obs, space.dtype).reshape(space.shape)

    def reset(self, key: jax.Array) -> tuple[GymnaxState, TimeStep]:
        key, reset_key = jax.random.split(key)
        obs, env_state = self._env.reset_env(reset_key, self.params)
        return GymnaxState(env_state, key), restart(self._obs(obs), self._extras(env_state))

    def step(self, state: GymnaxState, action: jax.Array) -> tuple[GymnaxState, TimeStep]:
        """One step; an invalid action is the worst valid one (see module docstring). The bound
        params travel with the state through the sweep (a custom_vmap, which takes no traced
        values from its closure)."""

        def step(both: tuple[dict[str, Any], GymnaxState], action: jax.Array) -> Any:
            params, inner = both
            inner, ts = self.with_params(params)._step(inner, action)
            return (params, inner), ts

        (_, state), ts = worst_valid_step(step, self.action_space, (self._bound, state), action)
        return state, ts

    def _step(self, state: GymnaxState, action: jax.Array) -> tuple[GymnaxState, TimeStep]:
        key, step_key = jax.random.split(state.key)
        obs, env_state, reward, done, info = self._env.step_env(
            step_key, state.env_state, action, self.params
        )
        terminated, truncated = self.terminated_truncated(env_state, done, info)
        terminated = jnp.asarray(terminated, jnp.bool_)
        ts = transition(
            self._obs(obs),
            jnp.asarray(reward, jnp.float32).reshape(()),
            terminated,
            jnp.asarray(truncated, jnp.bool_) & ~terminated,
            self._extras(env_state),
        )
        return GymnaxState(env_state, key), ts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"
