"""The sequential scan of a time-invariant diagonal recurrence with resets, with its own gradient.

FFM's trace and the LRU/S5 states follow ``s_t = d * s_{t-1} + e_t`` with a decay ``d`` that is
the same at every step (a learned parameter, not a function of the input), reset at episode
starts::

    s_t = e_t                   if start_t
    s_t = d * s_{t-1} + e_t     otherwise         (s_{-1} = carry)

:func:`decay_scan` evaluates it with one ``lax.scan`` whose body is a single multiply-add on the
state flattened to ``[B, N]`` (``N`` = the product of the state axes), and differentiates it with
a second scan of the same form run backwards (the adjoint of the recurrence is the recurrence
with the next step's reset flags), which also accumulates the decay's gradient and sums the
elements' gradient over repeats (FFM's element is the same for its ``c`` contexts). JAX's own
transpose of the resettable monoid scan keeps the broadcast reset predicate and both branches
of the ``where`` for every step, and its loops run several kernels per step; measured in
docs/benchmarks.md ("What the speed-ups were worth").

Gradients follow JAX's convention for complex values (cotangents of complex-linear maps are
transposed, not conjugated), so they equal ``jax.grad`` of the plain recurrence
(``tests/test_decay_scan.py``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

Array = jax.Array


def _keep(start: Array) -> Array:
    """``[T, B]`` start flags -> ``[T, B, 1]`` float32 multipliers: 0 at a start, 1 elsewhere."""
    return jnp.logical_not(start).astype(jnp.float32)[..., None]


def _repeat(e: Array, repeats: int, dtype: jnp.dtype) -> Array:
    """``[B, M] -> [B, M * repeats]`` in ``dtype``, each value repeated ``repeats`` times."""
    b, m = e.shape
    return jnp.broadcast_to(e[:, :, None], (b, m, repeats)).reshape(b, m * repeats).astype(dtype)


def _recurrence(decay: Array, elems: Array, keep: Array, carry: Array, repeats: int) -> Array:
    """``s_t = keep_t * decay * s_{t-1} + repeat(e_t)`` over ``elems [T, B, M]`` from
    ``carry [B, N]`` (``N = M * repeats``); ``decay [N]``, ``keep [T, B, 1]``. Returns every
    ``s_t`` ``[T, B, N]``."""

    def body(s: Array, inp: tuple[Array, Array]) -> tuple[Array, Array]:
        e, k = inp
        s = k * (decay * s) + _repeat(e, repeats, s.dtype)
        return s, s

    return jax.lax.scan(body, carry, (elems, keep))[1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _decay_scan_flat(
    decay: Array, elems: Array, start: Array, carry: Array, repeats: int, real_elems: bool
) -> Array:
    return _recurrence(decay, elems, _keep(start), carry, repeats)


def _decay_scan_fwd(decay, elems, start, carry, repeats, real_elems):
    states = _decay_scan_flat(decay, elems, start, carry, repeats, real_elems)
    return states, (decay, start, carry, states)


def _decay_scan_bwd(repeats, real_elems, res, g):
    decay, start, carry, states = res
    keep = _keep(start)
    keep_next = jnp.concatenate([keep[1:], jnp.zeros_like(keep[:1])])

    # The adjoint a_t = g_t + keep_{t+1} * decay * a_{t+1} runs backwards in time. The same loop
    # sums each step's adjoint over the repeats (the elements' gradient; its real part for real
    # elements) and accumulates the decay's gradient sum_t keep_t a_t s_{t-1}: at step t it adds
    # step t+1's term keep_{t+1} a_{t+1} s_t (so s_{t-1} needs no shifted copy); step 0's term,
    # which involves the carry, is added after the loop.
    def body(c: tuple[Array, Array], inp: tuple[Array, Array, Array]):
        a_next, acc = c
        g_t, k_next, s_t = inp
        m = k_next * a_next
        a = decay * m + g_t
        d_e = jnp.real(a) if real_elems else a
        if repeats > 1:
            d_e = d_e.reshape(d_e.shape[0], -1, repeats).sum(-1)
        return (a, acc + m * s_t), d_e

    zeros = jnp.zeros_like(carry)
    (a0, acc), d_elems = jax.lax.scan(body, (zeros, zeros), (g, keep_next, states), reverse=True)
    kept0 = keep[0] * a0
    d_decay = jnp.sum(acc + kept0 * carry, axis=0)
    return d_decay, d_elems, None, decay * kept0


_decay_scan_flat.defvjp(_decay_scan_fwd, _decay_scan_bwd)


def decay_scan(decay: Array, elems: Array, start: Array, carry: Array) -> Array:
    """Every state of ``s_t = (0 if start_t else decay * s_{t-1}) + e_t``.

    Args:
      decay: ``[*S]`` (real or complex), the same at every step and in every batch row.
      elems: ``[T, B, *S]``, or ``[T, B, *S[:-1]]`` for elements that are the same along the
        state's last axis (FFM's ``x~_t 1_c^T``: the loop repeats them, and their gradient is
        summed over that axis in the reverse loop); real elements with a complex decay enter as
        real parts (their gradient is the real part).
      start: ``[T, B]`` bool; where set, ``s_{t-1}`` (the carry or the previous state) is dropped.
      carry: ``[B, *S]``, the state before step 0, in the decay's dtype.

    Returns:
      ``[T, B, *S]`` in the decay's dtype: the state after each step (the last one is the next
      carry).
    """
    length, batch = elems.shape[:2]
    state_shape = decay.shape
    if elems.shape[2:] == state_shape:
        repeats = 1
    elif elems.shape[2:] == state_shape[:-1]:
        repeats = state_shape[-1]
    else:
        raise ValueError(f"elems {elems.shape} do not fit the state {state_shape}")
    flat = _decay_scan_flat(
        decay.reshape(-1),
        elems.reshape(length, batch, -1),
        start,
        carry.reshape(batch, -1).astype(decay.dtype),
        repeats,
        not jnp.issubdtype(elems.dtype, jnp.complexfloating),
    )
    return flat.reshape(length, batch, *state_shape)


def steps_since_start(steps: Array, start: Array) -> Array:
    """The step counter after a sequence: ``steps [B]`` (steps before it) plus ``T``, or, where
    ``start [T, B]`` has a set flag, the steps since the last one (counting it)."""
    length = start.shape[0]
    last = length - 1 - jnp.argmax(start[::-1], axis=0)  # index of the last start
    return jnp.where(jnp.any(start, axis=0), length - last, steps + length).astype(steps.dtype)
