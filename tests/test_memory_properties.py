"""Shared property suite: every registered memory model must satisfy the memory contract.

Parametrised over ``available_memories()``, so a newly registered model is tested automatically.
Properties (docs/memory_models.md, "Tests"): chunking, reset isolation (also from a random non-zero
carry), batch independence, finite non-zero gradients for every parameter, stable carry
structure/shapes/dtypes (needed to ``lax.scan`` the learner over calls).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.memory import (
    available_memories,
    build_memory,
    memory_class,
    output_width,
)

jax.config.update("jax_enable_x64", False)

H, T, B, F = 16, 12, 3, 5
T1 = T // 2  # equal chunks: fewer distinct shapes to compile
RTOL, ATOL = 1e-4, 1e-5


def _unique_models() -> list[str]:
    """Every registered name, aliases of an already listed class (``memoroid`` = ``ffm``) once."""
    seen, names = set(), []
    for name in available_memories():
        if memory_class(name) not in seen:
            seen.add(memory_class(name))
            names.append(name)
    return names


MODELS = _unique_models()


def random_carry(carry, key):
    """A random pytree with the structure, shapes and dtypes of ``carry`` (non-zero values)."""
    leaves, treedef = jax.tree_util.tree_flatten(carry)
    keys = jax.random.split(key, max(len(leaves), 1))
    out = []
    for leaf, k in zip(leaves, keys, strict=False):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            k1, k2 = jax.random.split(k)
            mag = jax.random.uniform(k1, leaf.shape, minval=0.1, maxval=1.0)
            phase = jax.random.uniform(k2, leaf.shape, minval=-np.pi, maxval=np.pi)
            out.append((mag * jnp.exp(1j * phase)).astype(leaf.dtype))
        elif jnp.issubdtype(leaf.dtype, jnp.floating):
            out.append(jax.random.uniform(k, leaf.shape, leaf.dtype, minval=0.1, maxval=1.0))
        elif leaf.dtype == jnp.bool_:
            out.append(jax.random.bernoulli(k, 0.5, leaf.shape))
        else:
            out.append(jax.random.randint(k, leaf.shape, 0, 5).astype(leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def assert_tree_close(a, b, rtol=RTOL, atol=ATOL, what=""):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, f"{what}: tree structures differ: {ta} vs {tb}"
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=what)


def make_inputs(key, t=T, p_start=0.15):
    kx, ks = jax.random.split(key)
    x = jax.random.normal(kx, (t, B, F), jnp.float32)
    start = jax.random.bernoulli(ks, p_start, (t, B))
    return x, start


@functools.cache
def setup(name: str):
    """(module, params, jitted apply) for one model, shared by all tests of that model."""
    model = build_memory(name, hidden_size=H)
    x, start = make_inputs(jax.random.key(0))
    params = jax.jit(model.init)(jax.random.key(1), model.initialize_carry(B), (x, start))
    apply = jax.jit(lambda p, c, x, s: model.apply(p, c, (x, s)))
    return model, params, apply


@pytest.mark.parametrize("name", MODELS)
def test_output_shape_and_carry_stable(name):
    model, params, apply = setup(name)
    carry0 = model.initialize_carry(B)
    assert jax.tree_util.tree_leaves(carry0), "carry must have at least one leaf"
    for leaf in jax.tree_util.tree_leaves(carry0):
        assert leaf.shape[0] == B, "carry leaves need a leading batch axis"
    spec = jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), carry0)
    for t in (T, 1):
        x, start = make_inputs(jax.random.key(2), t)
        for carry_in in (carry0, random_carry(carry0, jax.random.key(3))):
            carry, y = apply(params, carry_in, x, start)
            assert y.shape == (t, B, output_width(name, H, F)) and y.dtype == jnp.float32
            assert jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), carry) == spec
            assert np.all(np.isfinite(np.asarray(y)))

    # The learner scans over calls: the carry must be a valid lax.scan carry.
    xs, starts = make_inputs(jax.random.key(4), T)

    def body(c, inp):
        return apply(params, c, inp[0][None], inp[1][None])

    carry_scan, y_scan = jax.lax.scan(body, carry0, (xs, starts))
    carry_full, y_full = apply(params, carry0, xs, starts)
    np.testing.assert_allclose(y_scan[:, 0], y_full, rtol=RTOL, atol=ATOL)
    assert_tree_close(carry_scan, carry_full, what="scan-over-calls carry")


@pytest.mark.parametrize("name", MODELS)
def test_chunking(name):
    """One call on T steps == two calls (T1, T - T1) == T calls of one step, from a random carry."""
    model, params, apply = setup(name)
    x, start = make_inputs(jax.random.key(5))
    carry0 = random_carry(model.initialize_carry(B), jax.random.key(6))

    c_full, y_full = apply(params, carry0, x, start)

    c1, y1 = apply(params, carry0, x[:T1], start[:T1])
    c2, y2 = apply(params, c1, x[T1:], start[T1:])
    np.testing.assert_allclose(jnp.concatenate([y1, y2]), y_full, rtol=RTOL, atol=ATOL)
    assert_tree_close(c2, c_full, what="two chunks: final carry")

    c, ys = carry0, []
    for t in range(T):
        c, y = apply(params, c, x[t : t + 1], start[t : t + 1])
        ys.append(y)
    np.testing.assert_allclose(jnp.concatenate(ys), y_full, rtol=RTOL, atol=ATOL)
    assert_tree_close(c, c_full, what="single steps: final carry")


@pytest.mark.parametrize("name", MODELS)
def test_reset_isolation(name):
    """After a start flag nothing before it (inputs or incoming carry) influences the outputs."""
    model, params, apply = setup(name)
    k = T // 2  # same shapes as the chunking test: no extra compilation
    xa, start = make_inputs(jax.random.key(7))
    xb, _ = make_inputs(jax.random.key(8))
    start = start.at[k].set(True)
    xb = xb.at[k:].set(xa[k:])  # same inputs from the reset on, different before
    ca = random_carry(model.initialize_carry(B), jax.random.key(9))
    cb = random_carry(model.initialize_carry(B), jax.random.key(10))

    carry_a, ya = apply(params, ca, xa, start)
    carry_b, yb = apply(params, cb, xb, start)
    assert not np.allclose(ya[:k], yb[:k]), "outputs before the reset should differ (test sanity)"
    np.testing.assert_allclose(ya[k:], yb[k:], rtol=RTOL, atol=ATOL)
    assert_tree_close(carry_a, carry_b, what="final carry after reset")

    # ... and they equal a fresh episode started from initialize_carry.
    fresh = start[k:].at[0].set(True)
    carry_f, yf = apply(params, model.initialize_carry(B), xa[k:], fresh)
    np.testing.assert_allclose(ya[k:], yf, rtol=RTOL, atol=ATOL)
    assert_tree_close(carry_a, carry_f, what="final carry vs fresh episode")

    # A start flag at step 0 discards the incoming carry entirely.
    s0 = start.at[0].set(True)
    _, y0a = apply(params, ca, xa, s0)
    _, y0b = apply(params, model.initialize_carry(B), xa, s0)
    np.testing.assert_allclose(y0a, y0b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", MODELS)
def test_batch_independence(name):
    model, params, apply = setup(name)
    x, start = make_inputs(jax.random.key(11))
    carry = random_carry(model.initialize_carry(B), jax.random.key(12))
    c0, y0 = apply(params, carry, x, start)
    x2 = x.at[:, 1].add(jax.random.normal(jax.random.key(13), (T, F)))
    start2 = start.at[:, 1].set(~start[:, 1])
    c1, y1 = apply(params, carry, x2, start2)
    others = np.array([0, 2])
    np.testing.assert_allclose(y0[:, others], y1[:, others], rtol=RTOL, atol=ATOL)
    assert not np.allclose(y0[:, 1], y1[:, 1]), "perturbed element should change (test sanity)"
    assert_tree_close(
        jax.tree_util.tree_map(lambda a: a[others], c0),
        jax.tree_util.tree_map(lambda a: a[others], c1),
        what="carry of unperturbed batch elements",
    )


@pytest.mark.parametrize("name", MODELS)
def test_gradients_finite_nonzero(name):
    model, params, _ = setup(name)
    x, _ = make_inputs(jax.random.key(14))
    start = jnp.zeros((T, B), bool).at[0].set(True).at[7, 1].set(True)
    w = jax.random.normal(jax.random.key(15), (T, B, output_width(name, H, F)))
    carry = model.initialize_carry(B)
    if getattr(memory_class(name), "passthrough", False):
        # No parameters: the input gradient is the loss weight itself (y is x).
        assert not jax.tree_util.tree_leaves(params)
        dx = jax.grad(lambda x_: jnp.sum(w * model.apply(params, carry, (x_, start))[1]))(x)
        np.testing.assert_array_equal(np.asarray(dx), np.asarray(w))
        return

    @jax.jit
    def loss(p):
        _, y = model.apply(p, carry, (x, start))
        return jnp.sum(w * y)

    grads = jax.grad(loss)(params)
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    assert flat
    for path, g in flat:
        g = np.asarray(g)
        where = jax.tree_util.keystr(path)
        assert np.all(np.isfinite(g)), f"non-finite gradient at {where}"
        assert np.any(g != 0), f"zero gradient at {where}"
