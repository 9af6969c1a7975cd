"""Resettable monoid scans: the evaluation engine of every memoroid.

A memoroid (Morad et al. 2024, "Reinforcement Learning with Memoroids") is a monoid ``(S, ., e)``
over recurrent states: an associative ``combine(a, b)`` ("a then b") with an identity ``e``
(``combine(e, a) == combine(a, e) == a``). Every input step is mapped to an element ``s_t``; the
state after step ``t`` is ``carry . s_0 . s_1 . ... . s_t``.

Episode boundaries are handled by lifting the monoid to pairs ``(state, start)``::

    (a, fa) * (b, fb) = (b if fb else a . b,  fa or fb)

i.e. combining with an element whose start flag is set discards the left operand. This lifted
operator is again associative, with identity ``(e, False)``; after a reset the state restarts from
the identity (``e . s_t == s_t``). The incoming carry is the first (left-most) element, so
``start[0]`` discards it. Everything works on pytrees of states, e.g. ``(complex trace, int
counter)`` for FFM.

Two strategies evaluate the same operator:

* ``"associative"``: ``jax.lax.associative_scan`` over time (O(T) work, O(log T) depth); the
  carry is then combined on the left of every prefix (one extra elementwise application).
* ``"sequential"``: ``jax.lax.scan`` applying the operator step by step (O(T) work and depth).

``"auto"`` resolves with :func:`resolve_strategy` from the backend and T (see
docs/memory_models.md for the measurements behind it). With T == 1 (the rollout) no scan machinery
is used at all: one operator application.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array
State = Any  # pytree of arrays; leaves have leading [..., B] axes (time first inside scans)
Combine = Callable[[State, State], State]

STRATEGIES = ("auto", "associative", "sequential")

# "auto" resolution, from python -m stoixlite.benchmark memory (docs/memory_models.md): on CPU the
# sequential scan is faster at every measured length for B = 64, H = 128 (fwd + bwd). On GPU the
# associative scan is 2.6-17x faster at T = 1024 (H100, docs/benchmarks.md); TPUs: not measured.
# Models whose sequential strategy is a chunkwise-parallel form override this (_stack.ScannedStack
# .auto_sequential: linear attention, mLSTM).
AUTO_SEQUENTIAL_BACKENDS = ("cpu",)


def resolve_strategy(strategy: str, length: int) -> str:
    """``"associative"`` or ``"sequential"`` for a scan of ``length`` steps on this backend."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown scan strategy {strategy!r}; choose one of {STRATEGIES}")
    if strategy != "auto":
        return strategy
    del length  # measured: the choice does not depend on T on CPU (see docs/memory_models.md)
    if jax.default_backend() in AUTO_SEQUENTIAL_BACKENDS:
        return "sequential"
    return "associative"


def _flag_like(flag: Array, leaf: Array) -> Array:
    """Broadcast a ``[..., B]`` flag against a leaf ``[..., B, *state_dims]``."""
    return flag.reshape(flag.shape + (1,) * (leaf.ndim - flag.ndim))


def resettable(combine: Combine) -> Callable[[tuple[State, Array], tuple[State, Array]], Any]:
    """Lift ``combine`` to ``(state, start)`` pairs: a set start flag discards the left operand."""

    def op(a: tuple[State, Array], b: tuple[State, Array]) -> tuple[State, Array]:
        (sa, fa), (sb, fb) = a, b
        s = combine(sa, sb)
        s = jax.tree_util.tree_map(lambda n, r: jnp.where(_flag_like(fb, n), r, n), s, sb)
        return s, jnp.logical_or(fa, fb)

    return op


def resettable_scan(
    combine: Combine,
    carry: State,
    elems: State,
    start: Array,
    strategy: str = "auto",
    unroll: int = 1,
    step: Combine | None = None,
) -> tuple[State, State]:
    """All prefix states of ``carry . elems[0] . ... . elems[t]`` with resets at ``start``.

    Args:
      combine: the monoid operator on state pytrees; must broadcast over leading axes.
      carry: state before step 0, leaves ``[B, ...]``.
      elems: per-step elements, leaves ``[T, B, ...]`` (same structure as ``carry``).
      start: ``[T, B]`` bool; where set, the state restarts (the left operand is discarded).
      strategy: ``"auto" | "associative" | "sequential"``.
      unroll: loop unrolling of the sequential strategy.
      step: optional specialisation of ``combine(state, element)`` valid when the right operand is
        a single-step element as found in ``elems`` (e.g. FFM: ``gamma^1`` precomputed instead of
        ``exp(j log gamma)``); used by the sequential strategy and the T == 1 path.

    Returns:
      ``(states, final)``: ``states`` leaves ``[T, B, ...]`` (state after each step), ``final``
      the state after step T-1 (leaves ``[B, ...]``).
    """
    op = resettable(combine)
    step_op = op if step is None else resettable(step)
    length = start.shape[0]
    lead = jax.tree_util.tree_map(lambda c: c[None], carry)
    no_reset = jnp.zeros_like(start[:1])
    if length == 1:  # rollout path: a single operator application, no scan machinery
        states, _ = step_op((lead, no_reset), (elems, start))
        return states, jax.tree_util.tree_map(lambda s: s[0], states)
    if resolve_strategy(strategy, length) == "associative":
        prefix = jax.lax.associative_scan(op, (elems, start), axis=0)
        states, _ = op((lead, no_reset), prefix)
        return states, jax.tree_util.tree_map(lambda s: s[-1], states)

    def body(s: State, inp: tuple[State, Array]) -> tuple[State, State]:
        e, f = inp
        s, _ = step_op((s, f), (e, f))
        return s, s

    final, states = jax.lax.scan(body, carry, (elems, start), unroll=unroll)
    return states, final


# --- a reusable operator -------------------------------------------------------------------------


def linear_recurrence_combine(
    a: tuple[Array, Array], b: tuple[Array, Array]
) -> tuple[Array, Array]:
    """Monoid of the diagonal linear recurrence ``h_t = lambda_t * h_{t-1} + u_t``.

    Elements are ``(lambda, u)`` (real or complex, elementwise); ``(l1, u1) . (l2, u2) =
    (l1 * l2, l2 * u1 + u2)``; identity ``(1, 0)`` (multiplicative: *not* zero). Used by LRU, S5
    and minGRU.
    """
    (l1, u1), (l2, u2) = a, b
    return l1 * l2, l2 * u1 + u2


def linear_recurrence_identity(shape: tuple[int, ...], dtype: Any) -> tuple[Array, Array]:
    """Identity ``(ones, zeros)`` of :func:`linear_recurrence_combine`."""
    return jnp.ones(shape, dtype), jnp.zeros(shape, dtype)


# --- chunked evaluation (the chunkwise-parallel forms of mlstm and deltanet) --------------------


NEG_INF = -1e30  # a log weight that exp() turns into exactly 0 (masked pairs, empty states)


def time_chunks(
    arrays: tuple[Array, ...], fills: tuple[float | bool, ...], chunk_size: int
) -> tuple[tuple[Array, ...], int]:
    """Split time-major arrays ``[T, ...]`` into chunks ``[ceil(T / L), L, ...]``.

    ``L = min(chunk_size, T)`` (at least 1); the last chunk of each array is padded with its
    ``fill`` (a value that leaves the recurrence unchanged). Returns the chunked arrays and
    ``L``; :func:`from_chunks` undoes it.
    """
    length = arrays[0].shape[0]
    size = max(1, min(chunk_size, length))
    pad = -length % size

    def split(u: Array, fill: float | bool) -> Array:
        if pad:
            u = jnp.concatenate([u, jnp.full((pad, *u.shape[1:]), fill, u.dtype)])
        return u.reshape(-1, size, *u.shape[1:])

    return tuple(split(u, f) for u, f in zip(arrays, fills, strict=True)), size


def from_chunks(u: Array, length: int) -> Array:
    """Chunked outputs ``[C, L, ...]`` back to ``[length, ...]`` (the padding dropped)."""
    return u.reshape(-1, *u.shape[2:])[:length]


def chunk_episodes(start: Array) -> tuple[Array, Array]:
    """Episode structure of one chunk from its start flags ``[L, B]``.

    Returns ``(seg [B, L], sees [B, L, L])``: ``seg`` numbers the episode segments within the
    chunk (0: the episode running when the chunk began, i.e. the carry is visible), and
    ``sees[b, t, s]`` is true iff step ``s <= t`` belongs to the same episode as step ``t``.
    """
    seg = jnp.cumsum(start.astype(jnp.int32), axis=0).T
    size = start.shape[0]
    causal = jnp.tril(jnp.ones((size, size), bool))
    return seg, causal[None] & (seg[:, :, None] == seg[:, None, :])
