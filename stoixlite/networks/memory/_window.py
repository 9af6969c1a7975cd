"""Sliding windows over the last steps of an episode, carried between calls (no model here).

Frame stacking, Mamba's causal convolution and the attention memories all look at the last ``M``
steps. The carry holds those steps as a fixed-size cache (leaves ``[B, M, ...]``, oldest first)
with a validity mask ``[B, M]`` (false for empty slots and for steps of an earlier episode), so a
call on ``T`` steps sees exactly what ``T`` calls of one step would see.

Within a call the cache and the new steps form ``M + T`` *slots*; slot ``j`` holds step
``j - M`` (negative: cached). Episode segments: the new step ``t`` belongs to segment
``cumsum(start)[t]``; a valid cached slot belongs to segment 0 (the episode running when the call
began), an invalid one to segment -1 (matches nothing). Step ``t`` may see slot ``j`` iff they are
in the same segment, ``j - M <= t`` (causal) and ``t - (j - M) <= M`` (within the window).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array

# :func:`windows` builds one slice per window position (unrolled in the graph) and a
# ``[T, B, M + 1, D]`` array: frame stacks and convolutions longer than this are rejected by the
# config check (use an attention memory for long windows).
MAX_STACKED_STEPS = 64
STACK_LIMIT_WHY = " (stacked steps are unrolled; use transformer/gtrxl for long windows)"


def segments(valid: Array, start: Array) -> tuple[Array, Array]:
    """Segment ids of the ``M + T`` slots ``[B, M + T]`` and of the ``T`` queries ``[T, B]``.

    Args:
      valid: ``[B, M]`` bool, validity of the cached slots.
      start: ``[T, B]`` bool episode-start flags of the new steps.
    """
    query = jnp.cumsum(start.astype(jnp.int32), axis=0)  # [T, B]
    cached = jnp.where(valid, 0, -1).astype(jnp.int32)  # [B, M]
    return jnp.concatenate([cached, query.T], axis=1), query


def lags(memory: int, length: int) -> Array:
    """``[T, M + T]`` int32: how many steps slot ``j`` lies before new step ``t`` (``t - j + M``;
    negative for future slots)."""
    pos = jnp.arange(memory + length) - memory
    return (jnp.arange(length)[:, None] - pos[None, :]).astype(jnp.int32)


def visibility(valid: Array, start: Array) -> Array:
    """``[B, T, M + T]`` bool: may new step ``t`` see slot ``j`` (see the module docstring)."""
    m = valid.shape[1]
    slot_seg, query_seg = segments(valid, start)
    lag = lags(m, start.shape[0])
    in_window = (lag >= 0) & (lag <= m)
    return in_window[None] & (slot_seg[:, None, :] == query_seg.T[:, :, None])


def append(cache: Any, valid: Array, new: Any, start: Array) -> tuple[Any, Array]:
    """The cache after the call: the last ``M`` of the ``M + T`` slots, and their validity.

    Args:
      cache: pytree, leaves ``[B, M, ...]`` (oldest first).
      valid: ``[B, M]`` bool.
      new: pytree like ``cache`` with leaves ``[T, B, ...]`` (the new steps, time-major).
      start: ``[T, B]`` bool.

    A slot stays valid iff it belongs to the episode running after the last new step; invalid
    slots are zeroed so that stale values never reach the carry.
    """
    t = start.shape[0]
    slot_seg, query_seg = segments(valid, start)
    keep = slot_seg[:, t:] == query_seg[-1][:, None]  # [B, M]

    def roll(c: Array, n: Array) -> Array:
        slots = jnp.concatenate([c, jnp.moveaxis(n, 0, 1)], axis=1)[:, t:]
        return jnp.where(keep.reshape(keep.shape + (1,) * (slots.ndim - 2)), slots, 0)

    return jax.tree_util.tree_map(roll, cache, new), keep


def windows(cache: Array, valid: Array, x: Array, start: Array) -> Array:
    """The last ``M + 1`` steps seen by every new step: ``[T, B, M + 1, D]``, oldest first.

    Slots of another episode (or empty ones) are zeros; ``cache [B, M, D]``, ``x [T, B, D]``.
    Used for short windows (frame stacks, causal convolutions); attention uses
    :func:`visibility` on the ``M + T`` slots instead.
    """
    m, t = valid.shape[1], x.shape[0]
    slot_seg, query_seg = segments(valid, start)
    slots = jnp.concatenate([jnp.moveaxis(cache, 1, 0), x], axis=0)  # [M + T, B, D]
    out = []
    for i in range(m + 1):  # window position i holds slot t + i (M small)
        same = (slot_seg.T[i : i + t] == query_seg)[..., None]  # [T, B, 1]
        out.append(jnp.where(same, slots[i : i + t], 0.0))
    return jnp.stack(out, axis=2)
