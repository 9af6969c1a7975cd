"""Custom-VJP GRU / LSTM recurrences (``rnn_kernels``) against independent references.

* Gradients w.r.t. every input (input projections, incoming carry, recurrent kernel, bias) equal
  plain JAX autodiff of a straightforward ``lax.scan`` reference, with random start flags
  (including a start at t = 0 for some batch elements) and a non-zero incoming carry.
* The GRU / LSTM modules' forward passes equal ``flax.linen.GRUCell`` / ``OptimizedLSTMCell``
  stepped sequentially in Python with the same weights and explicit resets, and their parameter
  gradients equal those of that sequential reference.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.memory import build_memory
from stoixlite.networks.memory.rnn_kernels import gru_sequence, lstm_sequence

jax.config.update("jax_enable_x64", False)

T, B, H, F = 11, 3, 8, 5
TOL = dict(rtol=1e-5, atol=1e-5)


def _start(key):
    start = jax.random.bernoulli(key, 0.25, (T, B))
    return start.at[0, 0].set(True).at[0, 1].set(False).at[5, 1].set(True)


def _gru_reference(xp, start, h_init, w_h, b_hn):
    def step(h, inp):
        xt, st = inp
        h = jnp.where(st[:, None], 0.0, h)
        hh = h @ w_h
        r = jax.nn.sigmoid(xt[:, :H] + hh[:, :H])
        z = jax.nn.sigmoid(xt[:, H : 2 * H] + hh[:, H : 2 * H])
        n = jnp.tanh(xt[:, 2 * H :] + r * (hh[:, 2 * H :] + b_hn))
        h = (1.0 - z) * n + z * h
        return h, h

    return jax.lax.scan(step, h_init, (xp, start))[1]


def _lstm_reference(xp, start, c_init, h_init, w_h):
    def step(ch, inp):
        (c, h), (xt, st) = ch, inp
        c = jnp.where(st[:, None], 0.0, c)
        h = jnp.where(st[:, None], 0.0, h)
        i, f, g, o = jnp.split(xt + h @ w_h, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    (c, _), hs = jax.lax.scan(step, (c_init, h_init), (xp, start))
    return c, hs


def _loss(outputs, wy, wc):
    """Weighted sum of all outputs plus a term on the final state(s)."""
    if isinstance(outputs, tuple):  # LSTM: (c_T, hs)
        c, hs = outputs
        return jnp.sum(wy * hs) + jnp.sum(wc * c) + jnp.sum(hs[-1] ** 2)
    return jnp.sum(wy * outputs) + jnp.sum(outputs[-1] ** 2)


def _assert_grads_close(g_ref, g_new):
    leaves = jax.tree_util.tree_leaves
    for a, b in zip(leaves(g_ref), leaves(g_new), strict=True):
        assert np.all(np.isfinite(np.asarray(b)))
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), **TOL)


@pytest.mark.parametrize("unroll", [1, 3])
def test_gru_custom_vjp_matches_autodiff(unroll):
    ks = jax.random.split(jax.random.key(0), 7)
    xp = jax.random.normal(ks[0], (T, B, 3 * H))
    start = _start(ks[1])
    h_init = jax.random.normal(ks[2], (B, H))
    w_h = 0.5 * jax.random.normal(ks[3], (H, 3 * H))
    b_hn = jax.random.normal(ks[4], (H,))
    wy = jax.random.normal(ks[5], (T, B, H))
    args = (xp, h_init, w_h, b_hn)

    def ref(xp, h, w, b):
        return _loss(_gru_reference(xp, start, h, w, b), wy, None)

    def new(xp, h, w, b):
        return _loss(gru_sequence(xp, start, h, w, b, unroll=unroll), wy, None)

    y_new = gru_sequence(xp, start, h_init, w_h, b_hn)
    np.testing.assert_allclose(y_new, _gru_reference(xp, start, h_init, w_h, b_hn), **TOL)
    g_ref = jax.jit(jax.grad(ref, argnums=(0, 1, 2, 3)))(*args)
    g_new = jax.jit(jax.grad(new, argnums=(0, 1, 2, 3)))(*args)
    _assert_grads_close(g_ref, g_new)
    # Sanity: the incoming carry matters only where no reset happened at t = 0.
    dh = np.asarray(g_new[1])
    assert np.all(dh[0] == 0) and np.any(dh[1] != 0)


@pytest.mark.parametrize("unroll", [1, 3])
def test_lstm_custom_vjp_matches_autodiff(unroll):
    ks = jax.random.split(jax.random.key(1), 8)
    xp = jax.random.normal(ks[0], (T, B, 4 * H))
    start = _start(ks[1])
    c_init = jax.random.normal(ks[2], (B, H))
    h_init = jax.random.normal(ks[3], (B, H))
    w_h = 0.5 * jax.random.normal(ks[4], (H, 4 * H))
    wy = jax.random.normal(ks[5], (T, B, H))
    wc = jax.random.normal(ks[6], (B, H))
    args = (xp, c_init, h_init, w_h)

    def ref(xp, c, h, w):
        return _loss(_lstm_reference(xp, start, c, h, w), wy, wc)

    def new(xp, c, h, w):
        return _loss(lstm_sequence(xp, start, c, h, w, unroll=unroll), wy, wc)

    out_new = lstm_sequence(*args[:1], start, *args[1:])
    out_ref = _lstm_reference(xp, start, c_init, h_init, w_h)
    _assert_grads_close(out_ref, out_new)
    g_ref = jax.jit(jax.grad(ref, argnums=(0, 1, 2, 3)))(*args)
    g_new = jax.jit(jax.grad(new, argnums=(0, 1, 2, 3)))(*args)
    _assert_grads_close(g_ref, g_new)
    for d in (np.asarray(g_new[1]), np.asarray(g_new[2])):
        assert np.all(d[0] == 0) and np.any(d[1] != 0)


# ---- modules vs flax cells stepped sequentially (forward and parameter gradients) ----------------


def _inputs(key):
    kx, ks, kc = jax.random.split(key, 3)
    return jax.random.normal(kx, (T, B, F)), _start(ks), kc


def _cell_params_gru(p):
    wi = jnp.split(p["input_kernel"], 3, axis=1)
    bi = jnp.split(p["input_bias"], 3)
    wh = jnp.split(p["recurrent_kernel"], 3, axis=1)
    out = {}
    for j, g in enumerate("rzn"):
        out[f"i{g}"] = {"kernel": wi[j], "bias": bi[j]}
        out[f"h{g}"] = {"kernel": wh[j]}
    out["hn"]["bias"] = p["recurrent_bias_n"]
    return {"params": out}


def _cell_params_lstm(p):
    wi = jnp.split(p["input_kernel"], 4, axis=1)
    bi = jnp.split(p["input_bias"], 4)
    wh = jnp.split(p["recurrent_kernel"], 4, axis=1)
    out = {}
    for j, g in enumerate("ifgo"):  # the flax LSTM cells keep the bias in the h* Dense layers
        out[f"i{g}"] = {"kernel": wi[j]}
        out[f"h{g}"] = {"kernel": wh[j], "bias": bi[j]}
    return {"params": out}


def _step_cell(cell, cell_params, carry, x, start):
    """Python loop over T with an explicit reset to zeros before each flagged step."""
    ys = []
    for t in range(T):
        carry = jax.tree_util.tree_map(lambda c, t=t: jnp.where(start[t][:, None], 0.0, c), carry)
        carry, y = cell.apply(cell_params, carry, x[t])
        ys.append(y)
    return carry, jnp.stack(ys)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_module_matches_flax_cell(name):
    model = build_memory(name, hidden_size=H)
    x, start, kc = _inputs(jax.random.key(2))
    if name == "gru":
        carry = jax.random.normal(kc, (B, H))
        cell, to_cell = nn.GRUCell(features=H), _cell_params_gru
    else:
        k1, k2 = jax.random.split(kc)
        carry = (jax.random.normal(k1, (B, H)), jax.random.normal(k2, (B, H)))
        cell, to_cell = nn.OptimizedLSTMCell(features=H), _cell_params_lstm
    params = model.init(jax.random.key(3), model.initialize_carry(B), (x, start))["params"]
    wy = jax.random.normal(jax.random.key(4), (T, B, H))

    def loss_model(p, carry, x):
        c, y = model.apply({"params": p}, carry, (x, start))
        return jnp.sum(wy * y) + sum(jnp.sum(leaf**2) for leaf in jax.tree_util.tree_leaves(c))

    def loss_cell(p, carry, x):
        c, y = _step_cell(cell, to_cell(p), carry, x, start)
        return jnp.sum(wy * y) + sum(jnp.sum(leaf**2) for leaf in jax.tree_util.tree_leaves(c))

    c_ref, y_ref = _step_cell(cell, to_cell(params), carry, x, start)
    c_new, y_new = model.apply({"params": params}, carry, (x, start))
    np.testing.assert_allclose(y_new, y_ref, **TOL)
    _assert_grads_close(c_ref, c_new)

    g_ref = jax.jit(jax.grad(loss_cell, argnums=(0, 1, 2)))(params, carry, x)
    g_new = jax.jit(jax.grad(loss_model, argnums=(0, 1, 2)))(params, carry, x)
    _assert_grads_close(g_ref, g_new)
