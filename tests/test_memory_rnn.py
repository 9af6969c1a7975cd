"""GRU / LSTM / MLP memories against independent references.

GRU and LSTM are checked against ``flax.linen.GRUCell`` / ``LSTMCell`` stepped in a Python loop
with an explicit reset, using the same weights (our fused kernels split into the per-gate Dense
layers of the flax cells). The MLP memory is checked against numpy.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.memory import build_memory

H, T, B, F = 8, 9, 2, 3


def _inputs():
    x = jax.random.normal(jax.random.key(0), (T, B, F))
    start = jnp.zeros((T, B), bool).at[0, 0].set(True).at[4, 1].set(True).at[6, 0].set(True)
    return x, start


def _run_cell(cell, cell_params, carry, x, start, zero_carry):
    ys = []
    for t in range(T):
        carry = jax.tree_util.tree_map(
            lambda z, c, t=t: jnp.where(start[t][:, None], z, c), zero_carry, carry
        )
        carry, y = cell.apply(cell_params, carry, x[t])
        ys.append(y)
    return carry, jnp.stack(ys)


@pytest.mark.parametrize("unroll", [1, 3])
def test_gru_matches_flax_cell(unroll):
    model = build_memory("gru", hidden_size=H, unroll=unroll)
    x, start = _inputs()
    c0 = jax.random.normal(jax.random.key(1), (B, H))
    p = model.init(jax.random.key(2), model.initialize_carry(B), (x, start))["params"]
    wi = np.split(np.asarray(p["input_kernel"]), 3, axis=1)
    bi = np.split(np.asarray(p["input_bias"]), 3)
    wh = np.split(np.asarray(p["recurrent_kernel"]), 3, axis=1)
    cell_params = {"params": {}}
    for j, g in enumerate("rzn"):
        cell_params["params"][f"i{g}"] = {"kernel": wi[j], "bias": bi[j]}
        cell_params["params"][f"h{g}"] = {"kernel": wh[j]}
    cell_params["params"]["hn"]["bias"] = np.asarray(p["recurrent_bias_n"])
    cell = nn.GRUCell(features=H)
    ref_c, ref_y = _run_cell(cell, cell_params, c0, x, start, jnp.zeros((B, H)))
    c, y = model.apply({"params": p}, c0, (x, start))
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, ref_c, rtol=1e-5, atol=1e-5)


def test_gru_init_matches_flax_conventions():
    model = build_memory("gru", hidden_size=H)
    x, start = _inputs()
    p = model.init(jax.random.key(3), model.initialize_carry(B), (x, start))["params"]
    for block in np.split(np.asarray(p["recurrent_kernel"]), 3, axis=1):
        np.testing.assert_allclose(block.T @ block, np.eye(H), atol=1e-5)  # orthogonal per gate
    assert not np.any(np.asarray(p["input_bias"]))


@pytest.mark.parametrize("unroll", [1, 4])
def test_lstm_matches_flax_cell(unroll):
    model = build_memory("lstm", hidden_size=H, unroll=unroll)
    x, start = _inputs()
    k4, k5 = jax.random.key(4), jax.random.key(5)
    c0 = (jax.random.normal(k4, (B, H)), jax.random.normal(k5, (B, H)))
    p = model.init(jax.random.key(6), model.initialize_carry(B), (x, start))["params"]
    wi = np.split(np.asarray(p["input_kernel"]), 4, axis=1)
    bi = np.split(np.asarray(p["input_bias"]), 4)
    wh = np.split(np.asarray(p["recurrent_kernel"]), 4, axis=1)
    cell_params = {"params": {}}
    for j, g in enumerate("ifgo"):
        cell_params["params"][f"i{g}"] = {"kernel": wi[j]}
        cell_params["params"][f"h{g}"] = {"kernel": wh[j], "bias": bi[j]}
    cell = nn.LSTMCell(features=H)
    zero = (jnp.zeros((B, H)), jnp.zeros((B, H)))
    ref_c, ref_y = _run_cell(cell, cell_params, c0, x, start, zero)
    c, y = model.apply({"params": p}, c0, (x, start))
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    for a, b in zip(c, ref_c, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_mlp_is_per_step_dense():
    model = build_memory("mlp", hidden_size=H, activation="tanh")
    x, start = _inputs()
    carry = model.initialize_carry(B)
    p = model.init(jax.random.key(7), carry, (x, start))["params"]
    c, y = model.apply({"params": p}, carry, (x, start))
    ref = np.tanh(np.asarray(x) @ np.asarray(p["dense"]["kernel"]) + np.asarray(p["dense"]["bias"]))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert c.shape == (B, 1) and not np.any(np.asarray(c))
