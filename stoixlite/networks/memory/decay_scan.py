"""The sequential scan of a time-invariant diagonal recurrence with resets, with its own gradient.

FFM's trace and the LRU/S5 states follow ``s_t = d * s_{t-1} + e_t`` with a decay ``d`` that is
the same at every step (a learned parameter, not a function of the input), reset at episode
starts::

    s_t = e_t                   if start_t
    s_t = d * s_{t-1} + e_t     otherwise         (s_{-1} = carry)

:func:`decay_scan` evaluates it with one ``lax.scan`` whose body is a single multiply-add on the
state flattened to ``[B, N]`` (``N`` = the product of the state axes), and differentiates it with
a second scan of the same form run backwards (the adjoint of the recurrence is the recurrence
with the next step's reset flags), plus vectorised reductions after the loop for the decay and
carry gradients. JAX's own transpose of the resettable monoid scan keeps the broadcast reset
predicate and both branches of the ``where`` for every step, and its loops run several kernels
per step; measured in docs/benchmarks.md ("FFM's sequential scan, with its own gradient").

Gradients follow JAX's convention for complex values (cotangents of complex-linear maps are
transposed, not conjugated), so they equal ``jax.grad`` of the plain recurrence
(``tests/test_decay_scan.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def _flat(u: Array, lead: int) -> Array:
    """``[*lead_axes, *state_axes] -> [*lead_axes, N]``."""
    return u.reshape(u.shape[:lead] + (-1,))


def _keep(start: Array, dtype: jnp.dtype) -> Array:
    """``[T, B]`` start flags -> ``[T, B, 1]`` multipliers: 0 at a start, 1 elsewhere."""
    real = jnp.finfo(dtype).dtype  # float32 for complex64
    return jnp.logical_not(start).astype(real)[..., None]


def _recurrence(decay: Array, elems: Array, keep: Array, carry: Array) -> Array:
    """``s_t = keep_t * decay * s_{t-1} + e_t`` over ``elems [T, B, N]`` from ``carry [B, N]``;
    ``decay [N]``, ``keep [T, B, 1]``. Returns every ``s_t`` ``[T, B, N]``."""

    def body(s: Array, inp: tuple[Array, Array]) -> tuple[Array, Array]:
        e, k = inp
        s = k * (decay * s) + e
        return s, s

    return jax.lax.scan(body, carry, (elems, keep))[1]


@jax.custom_vjp
def _decay_scan_flat(decay: Array, elems: Array, start: Array, carry: Array) -> Array:
    return _recurrence(decay, elems, _keep(start, elems.dtype), carry)


def _decay_scan_fwd(decay, elems, start, carry):
    states = _decay_scan_flat(decay, elems, start, carry)
    return states, (decay, start, carry, states)


def _decay_scan_bwd(res, g):
    decay, start, carry, states = res
    keep = _keep(start, states.dtype)
    keep_next = jnp.concatenate([keep[1:], jnp.zeros_like(keep[:1])])

    # The adjoint a_t = g_t + keep_{t+1} * decay * a_{t+1} runs backwards in time; the same loop
    # accumulates the decay's gradient sum_t keep_t a_t s_{t-1}: at step t it adds step t+1's
    # term keep_{t+1} a_{t+1} s_t (so s_{t-1} needs no shifted copy), and step 0's term, which
    # involves the carry, is added after the loop.
    def body(c: tuple[Array, Array], inp: tuple[Array, Array, Array]):
        a_next, acc = c
        g_t, k_next, s_t = inp
        m = k_next * a_next
        a = decay * m + g_t
        return (a, acc + m * s_t), a

    zeros = jnp.zeros_like(carry)
    (_, acc), adj = jax.lax.scan(body, (zeros, zeros), (g, keep_next, states), reverse=True)
    kept0 = keep[0] * adj[0]
    d_decay = jnp.sum(acc + kept0 * carry, axis=0)
    return d_decay, adj, None, decay * kept0


_decay_scan_flat.defvjp(_decay_scan_fwd, _decay_scan_bwd)


def decay_scan(decay: Array, elems: Array, start: Array, carry: Array) -> Array:
    """Every state of ``s_t = (0 if start_t else decay * s_{t-1}) + e_t``.

    Args:
      decay: ``[*S]`` (real or complex), the same at every step and in every batch row.
      elems: ``[T, B, *S]``, same dtype as ``decay``.
      start: ``[T, B]`` bool; where set, ``s_{t-1}`` (the carry or the previous state) is dropped.
      carry: ``[B, *S]``, the state before step 0.

    Returns:
      ``[T, B, *S]``: the state after each step (the last one is the next carry).
    """
    shape = elems.shape
    flat = _decay_scan_flat(decay.reshape(-1), _flat(elems, 2), start, _flat(carry, 1))
    return flat.reshape(shape)


def steps_since_start(steps: Array, start: Array) -> Array:
    """The step counter after a sequence: ``steps [B]`` (steps before it) plus ``T``, or, where
    ``start [T, B]`` has a set flag, the steps since the last one (counting it)."""
    length = start.shape[0]
    last = length - 1 - jnp.argmax(start[::-1], axis=0)  # index of the last start
    return jnp.where(jnp.any(start, axis=0), length - last, steps + length).astype(steps.dtype)
