"""New memory models against sequential references written from their papers' equations.

Each reference below is a plain per-step Python loop over ``jax.numpy`` arrays (one step at a
time, explicit resets, explicit windows), written from the equations in the model's docstring,
not from the model's code: no scans, no window helpers, no monoid operators. Each test compares
the model's outputs, final carry and parameter gradients (of a random linear functional of the
outputs) with the reference, from a random non-zero carry, with episode starts inside the
sequence, and for every scan strategy where the model has one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.memory import build_memory

jax.config.update("jax_enable_x64", False)

T, B, F, H = 11, 3, 5, 8
RTOL, ATOL = 2e-4, 2e-5


def _close(a, b, what, rtol=RTOL, atol=ATOL):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, f"{what}: structures differ"
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        scale = max(1.0, float(np.max(np.abs(y)))) if y.size else 1.0
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol * scale, err_msg=what)


def _inputs(seed: int = 0):
    kx, ks, kw = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, (T, B, F))
    start = jax.random.bernoulli(ks, 0.2, (T, B)).at[4, 0].set(True).at[1, 2].set(True)
    w = jax.random.normal(kw, (T, B, H))
    return x, start, w


def _dense(p, x):
    return x @ p["kernel"] + (p["bias"] if "bias" in p else 0.0)


# --- windows of the last steps (frame stacks, causal convolutions) ----------------------------


def window_list(carry):
    """The carried window ``(values [B, M, D], valid [B, M])`` as a list of (value, ok) pairs."""
    window, valid = carry
    return [(window[:, i], valid[:, i]) for i in range(window.shape[1])]


def slide(past, start_t, new):
    """One step of a window of the last steps: a start invalidates the past, ``new`` is
    appended; returns the window's values (zeros where invalid, oldest first, ``new`` last) and
    the past for the next step (the oldest entry dropped)."""
    past = [(v, ok & ~start_t) for v, ok in past]
    frames = past + [(new, jnp.ones_like(start_t))]
    return [jnp.where(ok[:, None], v, 0.0) for v, ok in frames], frames[1:]


def window_carry(past, carry):
    """The final ``(values, valid)`` window (values zeroed where invalid)."""
    if not past:
        return carry
    valid = jnp.stack([ok for _, ok in past], axis=1)
    return jnp.stack([jnp.where(ok[:, None], v, 0.0) for v, ok in past], axis=1), valid


# --- Mamba ------------------------------------------------------------------------------------


def mamba_reference(p, carry, x, start):
    """Mamba block (Gu and Dao 2023, Algorithm 2) one step at a time, one layer.

    The conv window is a list of the last ``k - 1`` (input, valid) pairs (:func:`slide`).
    """
    conv_carry, (acc, h) = carry
    past = window_list(conv_carry)
    a = -jnp.exp(p["A_log"])
    ys = []
    for t in range(x.shape[0]):
        s = start[t]
        acc = jnp.where(s[:, None, None], 1.0, acc)
        h = jnp.where(s[:, None, None], 0.0, h)
        x_in, z = jnp.split(_dense(p["in_proj"], x[t]), 2, axis=-1)
        frames, past = slide(past, s, x_in)
        conv = sum(f * p["conv_kernel"][i] for i, f in enumerate(frames))
        u = jax.nn.silu(conv + p["conv_bias"])
        dt = jax.nn.softplus(_dense(p["dt"], _dense(p["dt_low"], u)))
        b, c = jnp.split(_dense(p["bc"], u), 2, axis=-1)
        decay = jnp.exp(dt[:, :, None] * a)
        acc = decay * acc
        h = decay * h + (dt * u)[:, :, None] * b[:, None, :]
        y = jnp.einsum("ben,bn->be", h, c) + p["D"] * u
        ys.append(_dense(p["out_proj"], y * jax.nn.silu(z)))
    return (window_carry(past, conv_carry), (acc, h)), jnp.stack(ys)


def layer0(cell_reference):
    """Reference of a one-layer stack from the reference of its cell (carry: 1-tuple)."""

    def ref(p, carry, x, start):
        c, y = cell_reference(p["cells_0"], carry[0], x, start)
        return (c,), y

    return ref


# --- POPGym baselines -------------------------------------------------------------------------


def elman_reference(p, h, x, start):
    ys = []
    for t in range(x.shape[0]):
        h = jnp.where(start[t][:, None], 0.0, h)
        h = jnp.tanh(_dense(p["input"], x[t]) + h @ p["recurrent_kernel"])
        ys.append(h)
    return h, jnp.stack(ys)


def framestack_reference(p, carry, x, start):
    """MLP on the concatenation of the last k projected frames (zeros before the start)."""
    past = window_list(carry)
    ys = []
    for t in range(x.shape[0]):
        frames, past = slide(past, start[t], x[t] @ p["frame"]["kernel"])
        ys.append(jax.nn.relu(_dense(p["mlp"], jnp.concatenate(frames, axis=-1))))
    return window_carry(past, carry), jnp.stack(ys)


def positional_mlp_reference(p, n, x, start):
    size = p["dense"]["kernel"].shape[1]
    ys = []
    for t in range(x.shape[0]):
        n = jnp.where(start[t], 0, n)
        i = np.arange(size) // 2
        angle = n[:, None].astype(jnp.float32) / 1024.0 ** (2 * i / size)
        pe = jnp.where(np.arange(size) % 2 == 0, jnp.sin(angle), jnp.cos(angle))
        ys.append(jax.nn.relu(_dense(p["dense"], x[t]) + pe))
        n = n + 1
    return n, jnp.stack(ys)


# --- the parametrised comparison --------------------------------------------------------------

CASES = {
    "mamba-associative": (
        "mamba",
        {"state_size": 4, "scan": "associative"},
        layer0(mamba_reference),
    ),
    "mamba-sequential": ("mamba", {"state_size": 4, "scan": "sequential"}, layer0(mamba_reference)),
    "mamba-conv1": ("mamba", {"state_size": 4, "conv_size": 1}, layer0(mamba_reference)),
    "elman": ("elman", {}, elman_reference),
    "framestack": ("framestack", {"frames": 3}, framestack_reference),
    "framestack-1": ("framestack", {"frames": 1}, framestack_reference),
    "positional_mlp": ("positional_mlp", {}, positional_mlp_reference),
}
# How to compare a model's carry with its reference's (default: as is).
CARRY_VIEWS = {}


def _random_carry(carry, key):
    """Random carry: floats in [0.1, 1], bools (window validity) random, ints in [0, 50)."""
    leaves, treedef = jax.tree_util.tree_flatten(carry)
    out = []
    for leaf, k in zip(leaves, jax.random.split(key, len(leaves)), strict=True):
        if leaf.dtype == jnp.bool_:
            out.append(jax.random.bernoulli(k, 0.7, leaf.shape))
        elif jnp.issubdtype(leaf.dtype, jnp.integer):
            out.append(jax.random.randint(k, leaf.shape, 0, 50).astype(leaf.dtype))
        else:
            out.append(jax.random.uniform(k, leaf.shape, leaf.dtype, 0.1, 1.0))
    return jax.tree_util.tree_unflatten(treedef, out)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_sequential_reference(case):
    """Outputs, final carry and parameter gradients equal the per-step reference."""
    name, kwargs, reference = CASES[case]
    model = build_memory(name, hidden_size=H, **kwargs)
    x, start, w = _inputs(2)
    carry = _random_carry(model.initialize_carry(B), jax.random.key(3))
    params = model.init(jax.random.key(1), carry, (x, start))

    def loss_model(params):
        c, y = model.apply(params, carry, (x, start))
        return jnp.sum(w * y), (c, y)

    def loss_ref(params):
        c, y = reference(params["params"], carry, x, start)
        return jnp.sum(w * y), (c, y)

    (_, (c_m, y_m)), g_m = jax.jit(jax.value_and_grad(loss_model, has_aux=True))(params)
    (_, (c_r, y_r)), g_r = jax.value_and_grad(loss_ref, has_aux=True)(params)
    assert y_m.shape == (T, B, H)
    _close(y_m, y_r, "outputs")
    _close(CARRY_VIEWS.get(name, lambda c: c)(c_m), c_r, "final carry")
    _close(g_m, g_r, "parameter gradients", atol=1e-4)
