"""Per-env functions that see the whole batch under ``vmap``: :func:`batch_aware`.

An env is written for one env and batched with ``vmap``. A ``lax.cond`` inside it then becomes
a ``select`` that computes both branches for every env (its predicate is batched). Two costly
branches run rarely: auto-resets (only where an episode ended) and the worst-valid-action sweep
of the gymnax-style adapters (only for invalid actions). :func:`batch_aware` gives such a
function a second implementation for a whole batch, which can skip or shrink the rare branch
for the batch at once (a ``lax.cond`` on a batch-wide predicate stays a ``cond``). Nested
``vmap`` (seeds x envs) is merged into one batch first, so the saving holds there too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def _broadcast_unbatched(tree: Any, batched: Any, axis_size: int) -> Any:
    """Every leaf of ``tree`` with a leading ``[axis_size]`` axis (``batched``: which have one)."""
    return jax.tree.map(
        lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))), tree, batched
    )


def batch_aware(one: Callable[..., Any], batch: Callable[..., Any]) -> Callable[..., Any]:
    """``f(*args)`` that computes ``one(*args)`` for one env, and under ``vmap`` (any nesting)
    ``batch(*args)`` once on the whole batch: every leaf of every argument with one leading batch
    axis ``[B, ...]`` (nested axes ``[S, B, ...]`` merged to ``[S * B, ...]``, unbatched leaves
    broadcast). ``batch`` must return ``vmap(one)(*args)`` exactly, with the batch axis leading on
    every output leaf; it exists to compute that more cheaply."""

    @jax.custom_batching.custom_vmap
    def flat(*args: Any) -> Any:
        return batch(*args)

    @flat.def_vmap
    def merge_axes(axis_size: int, in_batched: list[Any], *args: Any) -> tuple[Any, Any]:
        """A batch of batches ``[S, B, ...]`` is one batch ``[S * B, ...]``."""
        args = _broadcast_unbatched(args, tuple(in_batched), axis_size)
        inner = jax.tree.leaves(args)[0].shape[1]
        merge = lambda x: x.reshape((axis_size * inner, *x.shape[2:]))  # noqa: E731
        split = lambda x: x.reshape((axis_size, inner, *x.shape[1:]))  # noqa: E731
        out = jax.tree.map(split, flat(*jax.tree.map(merge, args)))
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_batching.custom_vmap
    def single(*args: Any) -> Any:
        return one(*args)

    @single.def_vmap
    def batched(axis_size: int, in_batched: list[Any], *args: Any) -> tuple[Any, Any]:
        out = flat(*_broadcast_unbatched(args, tuple(in_batched), axis_size))
        return out, jax.tree.map(lambda _: True, out)

    return single
