"""The window of the most recent finished training episodes, RLlib's ``episode_reward_mean``.

The POPGym paper's MMER is RLlib's ``episode_reward_mean`` (the mean return of the most recent
:data:`WINDOW` = 100 completed episodes, ``metrics_num_episodes_for_smoothing``) maximised over
training, read once per training iteration of :data:`READ_EVERY` = 65,536 env steps (popgym's
``train_batch_size``). The learner keeps that window on the device, per seed, and reports its mean
after every update and at every reading point (:func:`reads_at`); the window's maximum over the
readings is the paper's MMER (docs/popgym_table.md).

Episodes enter the window in the order they finished: by rollout step, then by env index within a
step (envs that finish on the same step have no order of their own; RLlib's workers do not
define one either). All functions are pure and jit/vmap-safe.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

WINDOW = 100  # RLlib's metrics_num_episodes_for_smoothing (default)
READ_EVERY = 65_536  # popgym's train_batch_size: env steps per RLlib training iteration


@struct.dataclass
class EpisodeWindow:
    """The returns of the last ``min(count, WINDOW)`` finished episodes.

    ``returns [WINDOW]`` float32, oldest first, the valid ones at the end (slots
    ``WINDOW - count ..``); ``count`` int32 scalar, at most ``WINDOW``.
    """

    returns: jax.Array
    count: jax.Array


def empty_window() -> EpisodeWindow:
    """A window with no episodes."""
    return EpisodeWindow(jnp.zeros((WINDOW,), jnp.float32), jnp.zeros((), jnp.int32))


def push_finished(window: EpisodeWindow, returns: jax.Array, last: jax.Array) -> EpisodeWindow:
    """The window after the episodes of one rollout: ``returns [T, N]`` is each step's episode
    return, valid where ``last [T, N]`` (the episode ended there); they enter in time-major order
    (step, then env), the oldest leaving once more than :data:`WINDOW` are held."""
    new_returns = returns.reshape(-1).astype(jnp.float32)
    new_valid = last.reshape(-1).astype(bool)
    held = jnp.arange(WINDOW) >= WINDOW - window.count
    values = jnp.concatenate([window.returns, new_returns])
    valid = jnp.concatenate([held, new_valid])
    # rank from the newest valid entry (0 = newest); keep the WINDOW newest
    total = valid.sum(dtype=jnp.int32)
    rank = total - jnp.cumsum(valid, dtype=jnp.int32)
    keep = valid & (rank < WINDOW)
    slot = jnp.where(keep, WINDOW - 1 - rank, WINDOW)  # WINDOW: dropped
    out = jnp.zeros((WINDOW,), jnp.float32).at[slot].set(values, mode="drop")
    return EpisodeWindow(out, jnp.minimum(total, WINDOW).astype(jnp.int32))


def window_mean(window: EpisodeWindow) -> jax.Array:
    """Mean return of the held episodes (float32 scalar; 0 while none has finished, which
    ``window.count`` tells apart: the learner's metrics must stay finite)."""
    held = jnp.arange(WINDOW) >= WINDOW - window.count
    total = jnp.where(held, window.returns, 0.0).sum()
    return total / jnp.maximum(window.count, 1).astype(jnp.float32)


def reads_at(update: jax.Array, steps_per_update: int) -> jax.Array:
    """Whether the update numbered ``update`` (0-based; int32 scalar) ends a training iteration:
    its last step reaches or crosses a multiple of :data:`READ_EVERY` env steps (every update
    when an update has at least that many steps). RLlib reads ``episode_reward_mean`` at the end
    of each iteration, after at least :data:`READ_EVERY` new steps; with updates that divide
    :data:`READ_EVERY` the reading points are the same steps.

    Computed modulo :data:`READ_EVERY` in uint32, so it holds for any number of updates.
    """
    if steps_per_update >= READ_EVERY:
        return jnp.ones((), bool)
    done = (update.astype(jnp.uint32) + 1) % READ_EVERY  # updates finished, mod READ_EVERY
    end = (done * jnp.uint32(steps_per_update)) % READ_EVERY  # < 2^16 * 2^16: no overflow
    return end < steps_per_update
