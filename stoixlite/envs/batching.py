"""Per-env functions that see the whole batch under ``vmap``: :func:`batch_aware`.

An env is written for one env and batched with ``vmap``. A ``lax.cond`` inside it then becomes
a ``select`` that computes both branches for every env (its predicate is batched). Two costly
branches run rarely: auto-resets (only where an episode ended) and the worst-valid-action sweep
of the gymnax-style adapters (only for invalid actions). :func:`batch_aware` gives such a
function a second implementation for a whole batch, which can skip or shrink the rare branch
for the batch at once (a ``lax.cond`` on a batch-wide predicate stays a ``cond``). Nested
``vmap`` (seeds x envs) is merged into one batch first, so the saving holds there too.

Under :func:`masked_batches` (``arch.branching=mask``: :class:`stoixlite.envs.wrappers.VmapWrapper`
enters it while it traces a step) a batch-aware function is the plain ``vmap`` of its one-env
form instead: every branch computed for every env and selected (a ``lax.cond`` batched by
``vmap`` is a ``select``), with no data-dependent control flow, which an accelerator runs
without waiting for a predicate on the host. Results are the same (up to float rounding where
XLA vectorises a step differently).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

_MASKED = contextvars.ContextVar("stoixlite_masked_batches", default=False)


@contextlib.contextmanager
def masked_batches(masked: bool = True) -> Iterator[None]:
    """While active (at trace time), :func:`batch_aware` functions batched by ``vmap`` compute
    every env's branches and select (``masked``), instead of skipping rare work for the whole
    batch with a data-dependent branch."""
    token = _MASKED.set(masked)
    try:
        yield
    finally:
        _MASKED.reset(token)


def _broadcast_unbatched(tree: Any, batched: Any, axis_size: int) -> Any:
    """Every leaf of ``tree`` with a leading ``[axis_size]`` axis (``batched``: which have one)."""
    return jax.tree.map(
        lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))), tree, batched
    )


def batch_aware(
    one: Callable[..., Any], batch: Callable[..., Any], masked: Callable[..., Any] | None = None
) -> Callable[..., Any]:
    """``f(*args)`` that computes ``one(*args)`` for one env, and under ``vmap`` (any nesting)
    ``batch(*args)`` once on the whole batch: every leaf of every argument with one leading batch
    axis ``[B, ...]`` (nested axes ``[S, B, ...]`` merged to ``[S * B, ...]``, unbatched leaves
    broadcast). ``batch`` must return ``vmap(one)(*args)`` exactly, with the batch axis leading on
    every output leaf; it exists to compute that more cheaply. Under :func:`masked_batches` the
    batched form is ``vmap(masked)`` (default: ``vmap(one)``): ``masked`` is ``one`` without
    data-dependent control flow, where ``one``'s branches batched by ``vmap`` (each computed and
    selected) would cost more."""

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
        if _MASKED.get():
            in_axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
            out = jax.vmap(masked or one, in_axes=in_axes, axis_size=axis_size)(*args)
            return out, jax.tree.map(lambda _: True, out)
        out = flat(*_broadcast_unbatched(args, tuple(in_batched), axis_size))
        return out, jax.tree.map(lambda _: True, out)

    return single
