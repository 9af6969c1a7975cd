"""Resettable GRU / LSTM recurrences with hand-written reverse passes (``jax.custom_vjp``).

No model is registered here; ``gru.py`` and ``lstm.py`` call these functions.

Why: autodiff of ``jax.lax.scan`` accumulates the recurrent-kernel cotangent (a ``[H, kH]`` outer
product plus an add) inside every reverse step and saves many per-step residuals. At the tiny
batches of recurrent PPO (B = 1..16) the loop is latency bound, so every op inside it counts.
Here

* the forward loop computes the primal states and also stacks each step's recurrent
  pre-activations ``h_{t-1} @ w_h`` (``[T, B, kH]``, already computed there; saving them beat
  recomputing them as one ``[T*B, H] x [H, kH]`` matmul after the loop: forward + backward with
  the input projection, H = 128, GRU 12 / 5 / 0 % and LSTM 4 / 7 / 5 % faster at B = 1 / 16 /
  64, docs/benchmarks.md);
* the gates are recomputed from them *vectorised over all T* (elementwise) and folded into a
  few per-step coefficient arrays, because the reverse recurrence is linear in the carried
  cotangent;
* the reverse loop carries only the state cotangent and does one ``[B, kH] x [kH, H]`` matmul
  and a handful of elementwise ops per step;
* the recurrent-kernel gradient is one matmul over all T outside the loop, the bias gradients
  are sums, and the input-projection gradients are elementwise products.

Reset semantics (the memory contract): where ``start[t, b]`` the state is replaced by zeros
*before* step ``t`` consumes ``x[t, b]``; the gradient flowing into the previous state (or the
incoming carry, for ``t == 0``) is zero there.

Shapes: ``xp [T, B, kH]`` input projections (bias included), ``start [T, B]`` bool,
``w_h [H, kH]``; gates are ordered ``(r, z, n)`` for the GRU and ``(i, f, g, o)`` for the LSTM.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from stoixlite.networks.dense import outer_sum

Array = jax.Array

# Loop unrolling of the forward / reverse loops (measured on a 2-core CPU, B = 1..16, H = 128).
DEFAULT_UNROLL = 1


def _shift_prev(init: Array, seq: Array, start: Array) -> Array:
    """The state each step starts from: ``[init, seq[:-1]]`` with zeros where ``start``."""
    prev = jnp.concatenate([init[None], seq[:-1]], axis=0)
    return jnp.where(start[..., None], 0.0, prev)


# --------------------------------------------------------------------------------------------
# GRU:  r = s(xr + hr), z = s(xz + hz), n = tanh(xn + r (hn + b_hn)), h' = (1 - z) n + z h
# with [hr, hz, hn] = h @ w_h and h the (reset) previous state.
# --------------------------------------------------------------------------------------------


def _gru_forward(
    xp: Array,
    start: Array,
    h_init: Array,
    w_h: Array,
    b_hn: Array,
    unroll: int,
    keep_recurrent: bool = False,
):
    """Hidden states ``hs [T, B, H]``; with ``keep_recurrent`` also ``hh [T, B, 3H]``, every
    step's recurrent pre-activations ``h_{t-1} @ w_h`` (saved for the reverse pass)."""
    H = h_init.shape[-1]
    # Per-gate input sequences: XLA:CPU vectorises the loop-body fusions far better when they do
    # not read several slices of one operand (measured ~2x faster at B = 16).
    xr, xz, xn = xp[..., :H], xp[..., H : 2 * H], xp[..., 2 * H :]

    def step(h: Array, inp: tuple[Array, Array, Array, Array]):
        ar, az, an, st = inp
        h = jnp.where(st[:, None], 0.0, h)
        hh = h @ w_h
        r = jax.nn.sigmoid(ar + hh[:, :H])
        z = jax.nn.sigmoid(az + hh[:, H : 2 * H])
        n = jnp.tanh(an + r * (hh[:, 2 * H :] + b_hn))
        h = n + z * (h - n)
        return h, ((h, hh) if keep_recurrent else h)

    _, out = jax.lax.scan(step, h_init, (xr, xz, xn, start), unroll=unroll)
    return out


def gru_sequence(
    xp: Array, start: Array, h_init: Array, w_h: Array, b_hn: Array, unroll: int = DEFAULT_UNROLL
) -> Array:
    """Hidden states ``hs [T, B, H]`` of a resettable GRU (see module docstring).

    Differentiable w.r.t. ``xp``, ``h_init``, ``w_h`` and ``b_hn`` with a custom reverse pass.
    """
    return _gru_seq(unroll, xp, start, h_init, w_h, b_hn)


def _gru_seq_fwd(unroll, xp, start, h_init, w_h, b_hn):
    hs, hh = _gru_forward(xp, start, h_init, w_h, b_hn, unroll, keep_recurrent=True)
    return hs, (xp, start, h_init, w_h, b_hn, hs, hh)


def _gru_seq_bwd(unroll, res, dhs):
    xp, start, h_init, w_h, b_hn, hs, hh = res
    H = h_init.shape[-1]
    # Recompute all gates at once from the saved recurrent pre-activations.
    hp = _shift_prev(h_init, hs, start)  # [T, B, H] reset previous states
    rz = jax.nn.sigmoid(xp[..., : 2 * H] + hh[..., : 2 * H])
    r, z = rz[..., :H], rz[..., H:]
    hn = hh[..., 2 * H :] + b_hn
    n = jnp.tanh(xp[..., 2 * H :] + r * hn)
    # With g the total cotangent of h_t:
    #   dn_pre = g (1 - z)(1 - n^2) = g a,   dz_pre = g (hp - n) z (1 - z),
    #   dr_pre = dn_pre hn r (1 - r),        d(hn + b_hn) = dn_pre r,     dhp_direct = g z.
    a = (1.0 - z) * (1.0 - n * n)
    k_r = a * hn * r * (1.0 - r)
    k_z = (hp - n) * z * (1.0 - z)
    k_n = a * r
    k = jnp.concatenate([k_r, k_z, k_n], axis=-1)  # [T, B, 3H]: d(hh + [0, 0, b_hn]) = tile(g) k
    keep_z = jnp.where(start[..., None], 0.0, z)  # reset: no gradient into the previous state
    keep = (~start)[..., None].astype(hs.dtype)
    w_t = w_h.T  # [3H, H]

    def step(dh: Array, inp: tuple[Array, Array, Array, Array, Array]) -> tuple[Array, Array]:
        dy, kt, zt, mt = inp
        g = dh + dy
        dgh = jnp.concatenate([g, g, g], axis=-1) * kt
        dh_prev = g * zt + mt * (dgh @ w_t)
        return dh_prev, g

    dh_init, gs = jax.lax.scan(
        step, jnp.zeros_like(h_init), (dhs, k, keep_z, keep), reverse=True, unroll=unroll
    )
    g3 = jnp.concatenate([gs, gs, gs], axis=-1)
    dgh = g3 * k  # [T, B, 3H] cotangent of hp @ w_h (+ b_hn in the n block)
    dxp = jnp.concatenate([dgh[..., : 2 * H], gs * a], axis=-1)
    dw_h = outer_sum(hp, dgh)
    db_hn = jnp.sum(dgh[..., 2 * H :], axis=(0, 1))
    return dxp, None, dh_init, dw_h, db_hn


def _gru_primal(unroll, xp, start, h_init, w_h, b_hn):
    return _gru_forward(xp, start, h_init, w_h, b_hn, unroll)


_gru_seq = jax.custom_vjp(_gru_primal, nondiff_argnums=(0,))
_gru_seq.defvjp(_gru_seq_fwd, _gru_seq_bwd)


# --------------------------------------------------------------------------------------------
# LSTM: [i, f, g, o] = xp + h @ w_h;  c' = s(f) c + s(i) tanh(g);  h' = s(o) tanh(c')
# --------------------------------------------------------------------------------------------


def _lstm_forward(
    xp: Array,
    start: Array,
    c_init: Array,
    h_init: Array,
    w_h: Array,
    unroll: int,
    keep_recurrent: bool = False,
):
    """``(cs, hs)``, each ``[T, B, H]``; with ``keep_recurrent`` also ``hh [T, B, 4H]``, every
    step's recurrent pre-activations ``h_{t-1} @ w_h`` (saved for the reverse pass)."""
    H = h_init.shape[-1]
    xs = tuple(xp[..., j * H : (j + 1) * H] for j in range(4))  # per-gate, see _gru_forward

    def step(ch: tuple[Array, Array], inp):
        c, h = ch
        xi, xf, xg, xo, st = inp
        keep = ~st[:, None]
        c = jnp.where(keep, c, 0.0)
        h = jnp.where(keep, h, 0.0)
        hh = h @ w_h
        i = jax.nn.sigmoid(xi + hh[:, :H])
        f = jax.nn.sigmoid(xf + hh[:, H : 2 * H])
        g = jnp.tanh(xg + hh[:, 2 * H : 3 * H])
        o = jax.nn.sigmoid(xo + hh[:, 3 * H :])
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (c, h), ((c, h, hh) if keep_recurrent else (c, h))

    _, out = jax.lax.scan(step, (c_init, h_init), (*xs, start), unroll=unroll)
    return out


def lstm_sequence(
    xp: Array,
    start: Array,
    c_init: Array,
    h_init: Array,
    w_h: Array,
    unroll: int = DEFAULT_UNROLL,
) -> tuple[Array, Array]:
    """``(c_T [B, H], hs [T, B, H])`` of a resettable LSTM (see module docstring).

    Differentiable w.r.t. ``xp``, ``c_init``, ``h_init`` and ``w_h`` with a custom reverse pass.
    """
    return _lstm_seq(unroll, xp, start, c_init, h_init, w_h)


def _lstm_primal(unroll, xp, start, c_init, h_init, w_h):
    cs, hs = _lstm_forward(xp, start, c_init, h_init, w_h, unroll)
    return cs[-1], hs


def _lstm_seq_fwd(unroll, xp, start, c_init, h_init, w_h):
    cs, hs, hh = _lstm_forward(xp, start, c_init, h_init, w_h, unroll, keep_recurrent=True)
    return (cs[-1], hs), (xp, start, c_init, h_init, w_h, cs, hs, hh)


def _lstm_seq_bwd(unroll, res, cot):
    dc_T, dhs = cot
    xp, start, c_init, h_init, w_h, cs, hs, hh = res
    H = h_init.shape[-1]
    cp = _shift_prev(c_init, cs, start)
    hp = _shift_prev(h_init, hs, start)
    gates = xp + hh
    s = jax.nn.sigmoid(gates)
    si, sf, so = s[..., :H], s[..., H : 2 * H], s[..., 3 * H :]
    tg = jnp.tanh(gates[..., 2 * H : 3 * H])
    tc = jnp.tanh(cs)
    # gh: cotangent of h_t, gc: total cotangent of c_t = dc + gh so (1 - tc^2).
    #   di = gc tg si(1-si), df = gc cp sf(1-sf), dg = gc si (1-tg^2), do = gh tc so(1-so),
    #   d c_prev = gc sf, d h_prev = [di, df, dg, do] @ w_h^T  (both zero where start).
    p = so * (1.0 - tc * tc)
    k = jnp.concatenate(
        [tg * si * (1.0 - si), cp * sf * (1.0 - sf), si * (1.0 - tg * tg), tc * so * (1.0 - so)],
        axis=-1,
    )
    keep = (~start)[..., None].astype(hs.dtype)
    keep_f = keep * sf
    w_t = w_h.T

    def step(carry: tuple[Array, Array], inp):
        dc, dh = carry
        dy, pt, kt, ft, mt = inp
        gh = dh + dy
        gc = dc + gh * pt
        dg = jnp.concatenate([gc, gc, gc, gh], axis=-1) * kt
        return (gc * ft, mt * (dg @ w_t)), dg

    (dc_init, dh_init), dgs = jax.lax.scan(
        step,
        (dc_T, jnp.zeros_like(h_init)),
        (dhs, p, k, keep_f, keep),
        reverse=True,
        unroll=unroll,
    )
    dw_h = outer_sum(hp, dgs)
    return dgs, None, dc_init, dh_init, dw_h


_lstm_seq = jax.custom_vjp(_lstm_primal, nondiff_argnums=(0,))
_lstm_seq.defvjp(_lstm_seq_fwd, _lstm_seq_bwd)
