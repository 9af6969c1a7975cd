"""Core environment types: dm_env-style ``TimeStep`` and the ``Environment`` base class.

The spaces (``Discrete``, ``Box``) live in the neutral :mod:`stoixlite.specs` (networks read them
too) and are re-exported here for env code.

Every environment in stoixlite is a pair of pure functions over an explicit state::

    reset(key)           -> (state, timestep)
    step(state, action)  -> (state, timestep)

``state`` carries everything the environment needs, including its own PRNG key, so ``step`` is
deterministic given its inputs. Specs are static attributes (``observation_space``,
``action_space``). A single environment is unbatched; use
:class:`stoixlite.envs.wrappers.VmapWrapper` to batch it.

``TimeStep`` follows dm_env semantics:

* ``step_type``: FIRST (0) after a reset, MID (1), LAST (2) on the step that ends an episode.
* ``reward``: reward of the transition that produced this timestep (0 on FIRST).
* ``discount``: 0.0 when the episode terminated; 1.0 otherwise, including truncation.
* ``observation``: what the agent sees next.
* ``extras``: a dict. Raw environments may leave it empty; after the wrappers it holds at least
  ``next_obs`` (the true final observation on LAST steps, equal to ``observation`` otherwise),
  ``episode_return``, ``episode_length`` (of the episode that ended, valid where LAST) and
  ``truncated`` (LAST with discount 1).
* ``extras[EPISODE_METRICS]`` (``"episode_metrics"``, optional): a dict ``{name: float32
  scalar}`` of statistics of the episode so far that the env itself provides (e.g. Craftax's
  achievements unlocked), in every timestep of the env (reset and step alike) or in none. On a
  LAST step they describe the episode that ended; the learner logs their mean over the episodes
  finished in each update as ``train/env/<name>``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.specs import Box, Discrete, Space

FIRST = 0
MID = 1
LAST = 2

# The extras key of the env-provided episode statistics (see the module docstring).
EPISODE_METRICS = "episode_metrics"

__all__ = [
    "EPISODE_METRICS",
    "FIRST",
    "LAST",
    "MID",
    "Box",
    "Discrete",
    "Environment",
    "Space",
    "TimeStep",
    "restart",
    "transition",
]

State = TypeVar("State")


@struct.dataclass
class TimeStep:
    """A dm_env timestep. Arrays carry any leading batch axes the env has been vmapped over."""

    step_type: jax.Array  # int32
    reward: jax.Array  # float32
    discount: jax.Array  # float32
    observation: jax.Array
    extras: dict[str, Any] = struct.field(default_factory=dict)

    def first(self) -> jax.Array:
        return self.step_type == FIRST

    def mid(self) -> jax.Array:
        return self.step_type == MID

    def last(self) -> jax.Array:
        return self.step_type == LAST


def restart(observation: jax.Array, extras: dict[str, Any] | None = None) -> TimeStep:
    """The FIRST timestep of an episode: reward 0, discount 1."""
    return TimeStep(
        step_type=jnp.asarray(FIRST, jnp.int32),
        reward=jnp.asarray(0.0, jnp.float32),
        discount=jnp.asarray(1.0, jnp.float32),
        observation=observation,
        extras=extras or {},
    )


def transition(
    observation: jax.Array,
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    extras: dict[str, Any] | None = None,
) -> TimeStep:
    """A MID or LAST timestep from gym-style ``terminated``/``truncated`` flags.

    LAST when either flag is set; discount is 0 only when terminated (a truncation bootstraps).
    """
    terminated = jnp.asarray(terminated, jnp.bool_)
    truncated = jnp.asarray(truncated, jnp.bool_)
    done = terminated | truncated
    return TimeStep(
        step_type=jnp.where(done, LAST, MID).astype(jnp.int32),
        reward=jnp.asarray(reward, jnp.float32),
        discount=jnp.where(terminated, 0.0, 1.0).astype(jnp.float32),
        observation=observation,
        extras=extras or {},
    )


class Environment(Generic[State]):
    """Base class of a single (unbatched) environment with static specs.

    Subclasses implement :meth:`reset` and :meth:`step` as pure JAX functions and set
    ``observation_space`` and ``action_space``. ``max_episode_steps`` is informative (``None`` when
    the env has no time limit). ``registered_label`` is set by
    :func:`stoixlite.envs.registry.make` (the registered name with its factory arguments, e.g.
    ``popgym/minesweeper(difficulty='easy')``); :attr:`label` names the env in messages.

    ``step`` must accept any action of the right dtype and shape, valid or not: an invalid action
    is an invalid move as defined in :mod:`stoixlite.envs.actions` (never an error, never a
    success).

    ``keeps_actions`` (a class attribute of wrappers): ``step`` hands the action it receives to
    the inner env unchanged (batched or not), so a caller's :func:`actions_in_range` holds
    below it (:func:`actions_reach_unchanged`). False for a wrapper that does not declare it.

    Traced parameters: an env may name parameters that a compiled program can take as inputs
    instead of constants (:meth:`traceable_params`, e.g. a gymnax-style env's float
    ``EnvParams``); :meth:`with_params` gives the env computing with other values of them (traced
    arrays allowed), and :meth:`bound_params` the values it was given. The learner binds a run's
    values (``Hyper.env``, :mod:`stoixlite.ppo.types`) inside its program, so runs that differ
    only in them share one program.
    """

    observation_space: Box
    action_space: Space
    max_episode_steps: int | None = None
    registered_label: str | None = None
    keeps_actions: bool = False

    def reset(self, key: jax.Array) -> tuple[State, TimeStep]:
        raise NotImplementedError

    def step(self, state: State, action: jax.Array) -> tuple[State, TimeStep]:
        raise NotImplementedError

    def traceable_params(self) -> dict[str, float]:
        """``{name: value}`` of the parameters a program may take as inputs (none by default)."""
        return {}

    def bound_params(self) -> dict[str, Any]:
        """The values given by :meth:`with_params` (empty when none were)."""
        return {}

    def with_params(self, values: Mapping[str, Any]) -> Environment:
        """This env computing with ``values`` (a subset of :meth:`traceable_params`' names;
        arrays, traced or not) for those parameters; itself when ``values`` is empty."""
        if values:
            raise ValueError(f"{self.label} takes no traced parameters; got {sorted(values)}")
        return self

    @property
    def unwrapped(self) -> Environment:
        return self

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def label(self) -> str:
        """The env in messages: its registered name and factory arguments, else :attr:`name`."""
        return self.registered_label or self.name


_IN_RANGE = contextvars.ContextVar("stoixlite_actions_in_range", default=False)


@contextlib.contextmanager
def actions_in_range(in_range: bool = True) -> Iterator[None]:
    """While active (at trace time), the caller of ``step`` declares its ``Discrete`` actions
    valid: drawn from (or the mode of) a categorical over exactly the space's ``n`` actions, as
    the rollout and the evaluator know from the policy's distribution
    (:func:`stoixlite.ppo.rollout.act`). An env may then skip what only an invalid action needs
    (:func:`stoixlite.envs.actions.worst_valid_step` steps the action alone, with no sweep over
    the candidates and no branch). Box actions are not covered: a NaN is an invalid move that no
    distribution rules out."""
    token = _IN_RANGE.set(in_range)
    try:
        yield
    finally:
        _IN_RANGE.reset(token)


def actions_reach_unchanged(env: Environment) -> bool:
    """Whether every wrapper from ``env`` down to the raw env (:attr:`Environment.unwrapped`)
    hands actions on unchanged (``keeps_actions``): then actions valid for ``env`` are valid for
    the raw env, and :func:`actions_in_range` may be declared for them."""
    while env is not env.unwrapped:
        if not type(env).keeps_actions:
            return False
        env = env.env  # a wrapper's inner env
    return True


def actions_in_range_known() -> bool:
    """Whether the ``step`` being traced runs under :func:`actions_in_range`."""
    return _IN_RANGE.get()
