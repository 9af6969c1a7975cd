"""The standard stack of pure, jittable environment wrappers, and the functions that build it.

Every wrapper is itself an :class:`~stoixlite.envs.types.Environment`: it forwards the specs
(``observation_space``, ``action_space``, ``max_episode_steps``) and ``unwrapped``, and its state
is a ``flax.struct`` dataclass holding the inner state (``env_state``) plus its own fields. The
base class lives in :mod:`stoixlite.envs.wrapper_base`, the observation augmentation in
:mod:`stoixlite.envs.obs_augment`; both are re-exported here.

The standard stack (:func:`wrap_env`) is, from the inside out::

    raw env -> InvalidActionFlagWrapper -> ObsAugmentWrapper (optional) -> AutoResetWrapper
            -> EpisodeStatsWrapper

and the caller applies :class:`VmapWrapper` on top (and, in checked mode, an
:class:`ActionCheckWrapper` over the batch, see :func:`make_batched_env`). ObsAugment must sit
*below* AutoReset so that the auto-reset observation is produced by ObsAugment's ``reset``
(is_first = 1, zero previous action) while the true final observation keeps the last action and
is_first = 0.

Because a learner carries timesteps through ``lax.scan``, ``reset`` and ``step`` of every wrapper
return timesteps with identical pytree structure and dtypes (same ``extras`` keys). A raw env must
do the same (e.g. empty ``extras`` in both).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.envs.actions import is_valid_action, raise_on_invalid
from stoixlite.envs.batching import batch_aware, masked_batches
from stoixlite.envs.obs_augment import ObsAugmentWrapper
from stoixlite.envs.types import LAST, Environment, TimeStep
from stoixlite.envs.wrapper_base import Wrapper, select_tree

__all__ = [
    "ENV_AXIS",
    "ActionCheckWrapper",
    "AutoResetWrapper",
    "EpisodeStatsWrapper",
    "InvalidActionFlagWrapper",
    "ObsAugmentWrapper",
    "VmapWrapper",
    "Wrapper",
    "make_batched_env",
    "reset_pool_size",
    "wrap_env",
]


# --------------------------------------------------------------------------------------------
# Invalid actions (policy in stoixlite.envs.actions and docs/envs.md)
# --------------------------------------------------------------------------------------------


class InvalidActionFlagWrapper(Wrapper):
    """Adds ``extras["invalid_action"]`` (bool): the action of this step was invalid.

    False on ``reset``. The raw env itself defines what an invalid move does (see
    :mod:`stoixlite.envs.actions`); this wrapper only reports it, so the training metric
    ``train/invalid_actions`` can count it. Stateless: its state is the inner env's.
    """

    keeps_actions = True  # hands every action on unchanged

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        env_state, ts = self._env.reset(key)
        return env_state, ts.replace(extras={**ts.extras, "invalid_action": jnp.asarray(False)})

    def step(self, state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        env_state, ts = self._env.step(state, action)
        invalid = ~is_valid_action(self.action_space, action)
        return env_state, ts.replace(extras={**ts.extras, "invalid_action": invalid})


class ActionCheckWrapper(Wrapper):
    """Checked mode: raise :class:`~stoixlite.envs.actions.InvalidActionError` on an invalid action.

    Works on a batched (e.g. :class:`VmapWrapper`) or unbatched env: one host callback
    (``jax.debug.callback``) per step receives the whole action and raises with one line naming
    the env (``label``, default ``env.label``), the first invalid action and the allowed range.
    From compiled code the error arrives wrapped in a ``JaxRuntimeError`` whose message holds that
    line (:func:`~stoixlite.envs.actions.find_invalid_action_error` extracts it). Meant for tests
    and evaluation: the callback costs a host round trip per step.
    """

    keeps_actions = True  # hands every action on unchanged

    def __init__(self, env: Environment, label: str | None = None):
        super().__init__(env)
        self._label = label or env.label
        self._check = raise_on_invalid(self._label, env.action_space)

    @property
    def label(self) -> str:
        return self._label

    def step(self, state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        jax.debug.callback(self._check, action, is_valid_action(self.action_space, action))
        return self._env.step(state, action)


# --------------------------------------------------------------------------------------------
# AutoReset
# --------------------------------------------------------------------------------------------


def reset_pool_size(num_envs: int) -> int:
    """How many done envs of a batch of ``num_envs`` the lazy auto-reset resets one by one (more
    done envs on one step: every env's reset is computed). Episodes that end at different times
    end a few at a time; envs of fixed episode length end all at once."""
    return min(num_envs, 4 + num_envs // 32)


@struct.dataclass
class AutoResetState:
    env_state: Any
    key: jax.Array


class AutoResetWrapper(Wrapper):
    """dm_env-style auto-reset (see docs/architecture.md, Environments).

    On a step whose inner timestep is LAST the returned timestep keeps ``step_type`` LAST and the
    final transition's ``reward`` and ``discount``, but its ``observation`` is the first
    observation of a freshly reset episode (and the returned state is that reset state). The true
    final observation is ``extras["next_obs"]``. On every other step (and on ``reset``)
    ``extras["next_obs"] == observation``. ``extras["truncated"]`` is ``LAST & discount == 1``
    (bool). The wrapper's own PRNG key is split on each auto-reset (kept otherwise).

    The reset is selected per env with ``jnp.where``, so this is vmappable. Under ``vmap`` a
    ``where`` computes the reset of every env on every step. With ``batch_axis`` (the
    ``axis_name`` of the enclosing ``vmap``, see :class:`VmapWrapper`) the step sees the whole
    batch (:func:`stoixlite.envs.batching.batch_aware`, nested ``vmap`` over seeds merged in):
    no reset is computed on steps where no env is done, only the resets of the done envs when
    at most :func:`reset_pool_size` of them are (gathered, reset, scattered back), and every
    env's otherwise. That matters for envs with costly resets (maze and world generation, deck
    shuffles). Both modes return identical results (each env's reset depends only on its key).
    """

    keeps_actions = True  # hands every action on unchanged

    def __init__(self, env: Environment, batch_axis: str | None = None):
        super().__init__(env)
        self.batch_axis = batch_axis

    def reset(self, key: jax.Array) -> tuple[AutoResetState, TimeStep]:
        key, reset_key = jax.random.split(key)
        env_state, ts = self._env.reset(reset_key)
        extras = {
            **ts.extras,
            "next_obs": ts.observation,
            "truncated": jnp.asarray(False),
        }
        return AutoResetState(env_state, key), ts.replace(extras=extras)

    def _reset_where_done(
        self,
        done: jax.Array,
        key: jax.Array,
        env_state: Any,
        observation: jax.Array,
        params: dict[str, Any],
    ) -> tuple[Any, jax.Array, jax.Array]:
        """``(env_state, key, observation)``, replaced by a fresh episode's where ``done``;
        ``params``: the inner env's bound parameters (see :meth:`step`)."""
        new_key, reset_key = jax.random.split(key)
        reset_state, reset_ts = self._env.with_params(params).reset(reset_key)
        return (
            select_tree(done, reset_state, env_state),
            jnp.where(done, new_key, key),
            select_tree(done, reset_ts.observation, observation),
        )

    def _reset_done_envs(
        self,
        done: jax.Array,
        key: jax.Array,
        env_state: Any,
        observation: jax.Array,
        params: dict[str, Any],
    ) -> tuple[Any, jax.Array, jax.Array]:
        """:meth:`_reset_where_done` of a whole batch (a leading ``[B]`` axis on every leaf):
        nothing when no env is done, the done envs' resets alone when at most
        :func:`reset_pool_size` are, every env's reset otherwise."""
        size = done.shape[0]
        pool = reset_pool_size(size)
        count = done.sum()

        def few() -> tuple[Any, jax.Array, jax.Array]:
            slot = jnp.arange(pool)
            index = jnp.nonzero(done, size=pool, fill_value=0)[0]
            read = jnp.where(slot < count, index, 0)
            write = jnp.where(slot < count, index, size)  # out of bounds: dropped
            new_key, reset_key = jnp.moveaxis(jax.vmap(jax.random.split)(key[read]), 1, 0)
            reset_state, reset_ts = jax.vmap(lambda k, p: self._env.with_params(p).reset(k))(
                reset_key, jax.tree.map(lambda x: x[read], params)
            )
            put = lambda x, y: x.at[write].set(y, mode="drop")  # noqa: E731
            return (
                jax.tree.map(put, env_state, reset_state),
                put(key, new_key),
                put(observation, reset_ts.observation),
            )

        branches = [
            lambda: (env_state, key, observation),
            few,
            lambda: jax.vmap(self._reset_where_done)(done, key, env_state, observation, params),
        ]
        which = jnp.where(count == 0, 0, jnp.where(count <= pool, 1, 2))
        return jax.lax.switch(which, branches)

    def step(self, state: AutoResetState, action: jax.Array) -> tuple[AutoResetState, TimeStep]:
        env_state, ts = self._env.step(state.env_state, action)
        done = ts.step_type == LAST
        # The inner env's traced parameters go in as operands: the batch-aware reset is a
        # custom_vmap, which takes no traced values from its closure.
        operands = (done, state.key, env_state, ts.observation, self._env.bound_params())
        if self.batch_axis is None:
            env_state, key, observation = self._reset_where_done(*operands)
        else:
            reset = batch_aware(self._reset_where_done, self._reset_done_envs)
            env_state, key, observation = reset(*operands)
        extras = {
            **ts.extras,
            "next_obs": ts.observation,
            "truncated": done & (ts.discount == 1.0),
        }
        ts = TimeStep(
            step_type=ts.step_type,
            reward=ts.reward,
            discount=ts.discount,
            observation=observation,
            extras=extras,
        )
        return AutoResetState(env_state, key), ts


# --------------------------------------------------------------------------------------------
# EpisodeStats
# --------------------------------------------------------------------------------------------


@struct.dataclass
class EpisodeStatsState:
    env_state: Any
    running_return: jax.Array  # float32
    running_length: jax.Array  # int32


class EpisodeStatsWrapper(Wrapper):
    """Tracks the undiscounted return and length of the current episode.

    ``extras["episode_return"]`` (float32) and ``extras["episode_length"]`` (int32) hold the
    return/length including the current step: on LAST steps these are the completed episode's
    values (log them where ``step_type == LAST``); the running values restart from zero after LAST.
    On reset both are 0.
    """

    keeps_actions = True  # hands every action on unchanged

    def reset(self, key: jax.Array) -> tuple[EpisodeStatsState, TimeStep]:
        env_state, ts = self._env.reset(key)
        zero_r = jnp.zeros((), jnp.float32)
        zero_l = jnp.zeros((), jnp.int32)
        extras = {**ts.extras, "episode_return": zero_r, "episode_length": zero_l}
        return EpisodeStatsState(env_state, zero_r, zero_l), ts.replace(extras=extras)

    def step(
        self, state: EpisodeStatsState, action: jax.Array
    ) -> tuple[EpisodeStatsState, TimeStep]:
        env_state, ts = self._env.step(state.env_state, action)
        ep_return = state.running_return + ts.reward.astype(jnp.float32)
        ep_length = state.running_length + jnp.int32(1)
        done = ts.step_type == LAST
        new_state = EpisodeStatsState(
            env_state,
            jnp.where(done, 0.0, ep_return).astype(jnp.float32),
            jnp.where(done, 0, ep_length).astype(jnp.int32),
        )
        extras = {**ts.extras, "episode_return": ep_return, "episode_length": ep_length}
        return new_state, ts.replace(extras=extras)


# --------------------------------------------------------------------------------------------
# Vmap
# --------------------------------------------------------------------------------------------


ENV_AXIS = "envs"


class VmapWrapper(Wrapper):
    """Batches ``num_envs`` copies of an env with ``jax.vmap`` over the axis named ``axis_name``.

    ``reset(key)`` splits ``key`` into ``num_envs`` keys; ``step(state, action)`` maps over the
    leading axis of ``state`` and ``action`` (``[num_envs, ...]``). Every timestep field (and every
    ``extras`` entry) gets a leading ``[num_envs]`` axis. The specs stay per-env (unbatched).

    ``branching="mask"`` steps under :func:`~stoixlite.envs.batching.masked_batches`: the
    batch-aware parts of the stack (auto-resets, the invalid-action sweep) compute every env's
    branch and select, without data-dependent control flow (``arch.branching``); ``"skip"``
    (the default) skips their rare work for the whole batch when no env needs it.
    """

    keeps_actions = True  # hands every action on unchanged

    def __init__(
        self, env: Environment, num_envs: int, axis_name: str = ENV_AXIS, branching: str = "skip"
    ):
        super().__init__(env)
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if branching not in ("skip", "mask"):
            raise ValueError(f"branching must be 'skip' or 'mask', got {branching!r}")
        self.num_envs = int(num_envs)
        self.axis_name = axis_name
        self.branching = branching

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self._env.reset, axis_name=self.axis_name)(keys)

    def step(self, state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        with masked_batches(self.branching == "mask"):
            return jax.vmap(self._env.step, axis_name=self.axis_name)(state, action)


def wrap_env(
    env: Environment,
    *,
    obs_augment: bool,
    batch_axis: str | None = None,
    obs_prev_reward: bool = False,
    check_actions: bool = False,
    obs_prev_action: bool = True,
) -> Environment:
    """The standard (unbatched) stack: raw -> InvalidActionFlag -> ObsAugment (optional) ->
    AutoReset -> EpisodeStats (-> ActionCheck with ``check_actions``).

    ``obs_prev_reward`` (only with ``obs_augment``) adds the previous reward to the augmentation;
    ``obs_prev_action=False`` leaves the previous action out of it (is-first flag only).

    On an auto-reset step the returned observation is the augmented first observation of the new
    episode (is_first = 1, zero previous action) and ``extras["next_obs"]`` is the augmented true
    final observation (last action, is_first = 0). Apply :class:`VmapWrapper` on top (its axis
    is ``ENV_AXIS`` unless named otherwise; ``batch_axis`` must name it, see
    :class:`AutoResetWrapper`), or use :func:`make_batched_env`. ``extras["invalid_action"]``
    flags invalid actions; ``check_actions`` raises on them instead (:class:`ActionCheckWrapper`).
    """
    if obs_prev_reward and not obs_augment:
        raise ValueError("obs_prev_reward requires obs_augment")
    env = InvalidActionFlagWrapper(env)
    if obs_augment:
        env = ObsAugmentWrapper(env, prev_reward=obs_prev_reward, prev_action=obs_prev_action)
    env = AutoResetWrapper(env, batch_axis=batch_axis)
    env = EpisodeStatsWrapper(env)
    return ActionCheckWrapper(env) if check_actions else env


def make_batched_env(
    env: Environment,
    num_envs: int,
    *,
    obs_augment: bool,
    obs_prev_reward: bool = False,
    check_actions: bool = False,
    obs_prev_action: bool = True,
    branching: str = "skip",
) -> Environment:
    """:func:`wrap_env` vmapped over ``num_envs`` copies, resets computed only when needed
    (``branching="skip"``), or every env's reset computed and selected on every step without
    data-dependent control flow (``"mask"``, an accelerator's choice; :class:`VmapWrapper`).

    With ``check_actions`` an :class:`ActionCheckWrapper` checks the whole batch of actions in one
    callback per step (``env.check_actions=true``).
    """
    stack = wrap_env(
        env,
        obs_augment=obs_augment,
        batch_axis=ENV_AXIS,
        obs_prev_reward=obs_prev_reward,
        obs_prev_action=obs_prev_action,
    )
    batched = VmapWrapper(stack, num_envs, branching=branching)
    return ActionCheckWrapper(batched) if check_actions else batched
