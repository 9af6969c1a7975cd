"""Memoroids: the resettable monoid scan, its two strategies, and exact sequential references.

* the lifted operator ``(state, start)`` is associative and ``(identity, False)`` is a two-sided
  identity, on random elements, products of elements and random start flags, for every memoroid;
* the associative (``jax.lax.associative_scan``) and sequential (``jax.lax.scan``) strategies give
  the same outputs, final carries and parameter gradients (also for a 2-layer residual stack);
* each model's prefix states equal an explicit numpy recurrence with resets (written from the
  papers' equations, not from the operator);
* ``scan="auto"`` resolution and validation.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stoixlite.networks.memory.scan as scan_module
from stoixlite.networks.memory import available_memories, build_memory, memory_class
from stoixlite.networks.memory._memoroid import MemoroidStack
from stoixlite.networks.memory.scan import resettable, resettable_scan, resolve_strategy

jax.config.update("jax_enable_x64", False)

H, T, B, F = 16, 12, 3, 5
RTOL, ATOL = 1e-4, 1e-5


def _memoroids() -> list[str]:
    seen, names = set(), []
    for name in available_memories():
        cls = memory_class(name)
        if issubclass(cls, MemoroidStack) and cls not in seen:
            seen.add(cls)
            names.append(name)
    return names


MEMOROIDS = _memoroids()


def test_expected_memoroids_registered():
    assert {"ffm", "lru", "s5", "linear_attention", "mingru", "mlstm"} <= set(MEMOROIDS)
    assert memory_class("memoroid") is memory_class("ffm")


def _random_like(tree, key):
    """Random non-zero values with ``tree``'s structure (ints: small non-negative counters)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out = []
    for leaf, k in zip(leaves, jax.random.split(key, len(leaves)), strict=True):
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            k1, k2 = jax.random.split(k)
            mag = jax.random.uniform(k1, leaf.shape, minval=0.1, maxval=1.0)
            ph = jax.random.uniform(k2, leaf.shape, minval=-np.pi, maxval=np.pi)
            out.append((mag * jnp.exp(1j * ph)).astype(leaf.dtype))
        elif jnp.issubdtype(leaf.dtype, jnp.floating):
            out.append(jax.random.uniform(k, leaf.shape, leaf.dtype, minval=0.1, maxval=1.0))
        else:
            out.append(jax.random.randint(k, leaf.shape, 0, 5).astype(leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def _close(a, b, rtol=RTOL, atol=ATOL, what=""):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, what
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        scale = max(1.0, float(np.max(np.abs(y)))) if y.size else 1.0
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol * scale, err_msg=what)


def _inputs(key):
    kx, ks = jax.random.split(key)
    x = jax.random.normal(kx, (T, B, F))
    start = jax.random.bernoulli(ks, 0.2, (T, B)).at[7, 0].set(True)
    return x, start


@functools.cache
def _setup(name: str, num_layers: int = 1):
    x, start = _inputs(jax.random.key(0))
    models = {
        s: build_memory(name, hidden_size=H, num_layers=num_layers, scan=s)
        for s in ("associative", "sequential")
    }
    carry0 = models["sequential"].initialize_carry(B)
    params = jax.jit(models["sequential"].init)(jax.random.key(1), carry0, (x, start))
    return models, params


@functools.cache
def _layer0_fns(name: str):
    """Jitted helpers on layer 0's cell: elements, scanned states (per strategy), operator."""
    models, _ = _setup(name)
    m = models["sequential"]

    def elements(p, x):
        return m.apply(p, x, method=lambda mod, x: mod.cells[0].elements(x))

    def states(p, carry, x, start, strategy):
        def f(mod, carry, x, start):
            cell = mod.cells[0]
            return resettable_scan(cell.operator(), carry, cell.elements(x), start, strategy)

        return m.apply(p, carry, x, start, method=f)

    def op(p, a, b):
        return m.apply(p, a, b, method=lambda mod, a, b: resettable(mod.cells[0].operator())(a, b))

    return (
        jax.jit(elements),
        jax.jit(states, static_argnames="strategy"),
        jax.jit(op),
    )


@pytest.mark.parametrize("name", MEMOROIDS)
def test_operator_is_associative_with_identity(name):
    models, params = _setup(name)
    elements, states, op = _layer0_fns(name)
    x, start = _inputs(jax.random.key(2))
    identity = models["sequential"].initialize_carry(B)[0]
    carry = _random_like(identity, jax.random.key(3))
    elems = elements(params, x)
    prefix, _ = states(params, carry, x, start, "associative")  # products of several elements
    at = lambda tree, t: jax.tree_util.tree_map(lambda leaf: leaf[t], tree)
    cases = [
        (at(elems, 0), at(elems, 1), at(elems, 2)),
        (at(prefix, 3), at(elems, 5), at(prefix, 9)),
        (carry, at(prefix, 10), at(elems, 11)),
    ]
    keys = jax.random.split(jax.random.key(4), len(cases))
    for (a, b, c), k in zip(cases, keys, strict=True):
        fa, fb, fc = jax.random.bernoulli(k, 0.4, (3, B))
        a, b, c = (a, fa), (b, fb), (c, fc)
        _close(op(params, op(params, a, b), c), op(params, a, op(params, b, c)), what="assoc")
        e = (identity, jnp.zeros((B,), bool))
        _close(op(params, e, a), a, what="left identity")
        _close(op(params, a, e), a, what="right identity")
        # A set start flag on the right discards the left operand.
        reset_b = (b[0], jnp.ones((B,), bool))
        _close(op(params, a, reset_b)[0], b[0], what="reset discards left")


@pytest.mark.parametrize("name,num_layers", [(n, 1) for n in MEMOROIDS] + [("mingru", 2)])
def test_associative_equals_sequential(name, num_layers):
    models, params = _setup(name, num_layers)
    x, start = _inputs(jax.random.key(5))
    carry = _random_like(models["sequential"].initialize_carry(B), jax.random.key(6))
    w = jax.random.normal(jax.random.key(7), (T, B, H))

    def run(strategy):
        m = models[strategy]

        def loss(p):
            c, y = m.apply(p, carry, (x, start))
            return jnp.sum(w * y), (c, y)

        return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

    (_, (c_a, y_a)), g_a = run("associative")
    (_, (c_s, y_s)), g_s = run("sequential")
    _close(y_a, y_s, what="outputs")
    _close(c_a, c_s, what="final carry")
    _close(g_a, g_s, rtol=1e-4, atol=1e-4, what="parameter gradients")


def _numpy_linear_recurrence(a, u, a0, h0, start):
    """``A_t = a_t A_{t-1}``, ``h_t = a_t h_{t-1} + u_t``; reset to ``(1, 0)`` where ``start``."""
    a, u, start = np.asarray(a), np.asarray(u), np.asarray(start)
    acc, h = np.array(a0), np.array(h0)
    out_a, out_h = [], []
    for t in range(a.shape[0]):
        acc = np.where(start[t][:, None], 1.0, acc)
        h = np.where(start[t][:, None], 0.0, h)
        acc, h = a[t] * acc, a[t] * h + u[t]
        out_a.append(acc)
        out_h.append(h)
    return np.stack(out_a), np.stack(out_h)


@pytest.mark.parametrize("name", MEMOROIDS)
@pytest.mark.parametrize("strategy", ["associative", "sequential"])
def test_states_match_numpy_recurrence(name, strategy):
    models, params = _setup(name)
    elements, states, _ = _layer0_fns(name)
    x, start = _inputs(jax.random.key(8))
    carry = _random_like(models["sequential"].initialize_carry(B)[0], jax.random.key(9))
    elems = elements(params, x)
    got, final = states(params, carry, x, start, strategy)
    p = params["params"]["cells_0"]
    s = np.asarray(start)

    if name == "ffm":
        gamma = np.exp(-np.abs(np.asarray(p["decay"]))[:, None] + 1j * np.asarray(p["frequency"]))
        trace, steps = np.asarray(carry[0]), np.asarray(carry[1])
        x_in = np.asarray(elems[0])
        ref_trace, ref_steps = [], []
        for t in range(T):
            trace = np.where(s[t][:, None, None], 0.0, trace)
            steps = np.where(s[t], 0, steps)
            trace, steps = gamma * trace + x_in[t], steps + 1
            ref_trace.append(trace)
            ref_steps.append(steps)
        _close(got[0], np.stack(ref_trace).astype(np.complex64), what="ffm trace")
        np.testing.assert_array_equal(got[1], np.stack(ref_steps))
    elif name == "linear_attention":
        kv, k = np.asarray(carry[0]), np.asarray(carry[1])
        ref_kv, ref_k = [], []
        for t in range(T):
            kv = np.where(s[t][:, None, None, None], 0.0, kv) + np.asarray(elems[0][t])
            k = np.where(s[t][:, None, None], 0.0, k) + np.asarray(elems[1][t])
            ref_kv.append(kv)
            ref_k.append(k)
        _close(got, (np.stack(ref_kv), np.stack(ref_k)), what="linear attention sums")
    elif name == "mlstm":
        # xLSTM's sequential stabiliser (Beck et al. 2024, eqs. 15-17) on the scaled state.
        c, n, m, f_sum = (np.asarray(leaf) for leaf in carry)
        kv, k, log_i, log_f = (np.asarray(leaf) for leaf in elems)
        refs = []
        for t in range(T):
            r = s[t][:, None]
            c = np.where(r[..., None, None], 0.0, c)
            n = np.where(r[..., None], 0.0, n)
            m_prev = np.where(r, -np.inf, m)
            f_sum = np.where(r, 0.0, f_sum)
            m = np.maximum(log_f[t] + m_prev, log_i[t])
            f_keep, i_keep = np.exp(log_f[t] + m_prev - m), np.exp(log_i[t] - m)
            c = f_keep[..., None, None] * c + i_keep[..., None, None] * kv[t]
            n = f_keep[..., None] * n + i_keep[..., None] * k[t]
            f_sum = f_sum + log_f[t]
            refs.append((c, n, m, f_sum))
        ref = tuple(np.stack([r[j] for r in refs]) for j in range(4))
        _close(got, ref, what="mlstm stabilised states")
    else:
        decay, u = np.asarray(elems[0]), np.asarray(elems[1])
        if name == "lru":
            nu, theta, _ = np.asarray(p["nu_theta_gamma_log"])
            lam = np.exp(-np.exp(nu) + 1j * np.exp(theta))
            np.testing.assert_allclose(decay, np.broadcast_to(lam, decay.shape), rtol=1e-5)
        elif name == "s5":
            lam = -np.exp(np.asarray(p["log_neg_real"])) + 1j * np.asarray(p["imag"])
            lam_bar = np.exp(lam * np.exp(np.asarray(p["log_dt"])))
            np.testing.assert_allclose(decay, np.broadcast_to(lam_bar, decay.shape), rtol=1e-5)
        elif name == "s4d":
            a = -np.exp(np.asarray(p["log_neg_real"])) + 1j * np.asarray(p["imag"])
            a_bar = np.exp(a * np.exp(np.asarray(p["log_dt"]))[:, None]).reshape(-1)
            np.testing.assert_allclose(decay, np.broadcast_to(a_bar, decay.shape), rtol=1e-5)
        elif name == "mingru":
            z = 1.0 / (1.0 + np.exp(-(np.asarray(x) @ p["gate"]["kernel"] + p["gate"]["bias"])))
            cand = np.asarray(x) @ p["candidate"]["kernel"] + p["candidate"]["bias"]
            np.testing.assert_allclose(decay, 1.0 - z, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(u, z * cand, rtol=1e-5, atol=1e-6)
        ref = _numpy_linear_recurrence(decay, u, carry[0], carry[1], s)
        _close(got, ref, what=f"{name} linear recurrence")
    _close(final, jax.tree_util.tree_map(lambda leaf: leaf[-1], got), what="final == last state")


def test_linear_attention_output_is_normalised_by_accumulated_keys():
    """With a constant value projection every output is the same convex mix: W_o v + b_o."""
    models, params = _setup("linear_attention")
    m = models["sequential"]
    p = jax.tree_util.tree_map(lambda a: a, params)
    cell = dict(p["params"]["cells_0"])
    cell["value"] = {"kernel": jnp.zeros_like(cell["value"]["kernel"]), "bias": jnp.ones(H)}
    p = {"params": {"cells_0": cell}}
    x, start = _inputs(jax.random.key(10))
    _, y = m.apply(p, m.initialize_carry(B), (x, start))
    expected = np.ones(H) @ np.asarray(cell["out"]["kernel"]) + np.asarray(cell["out"]["bias"])
    np.testing.assert_allclose(y, np.broadcast_to(expected, y.shape), rtol=1e-4, atol=1e-5)


def test_auto_strategy_and_validation(monkeypatch):
    assert resolve_strategy("associative", 64) == "associative"
    assert resolve_strategy("sequential", 64) == "sequential"
    if jax.default_backend() == "cpu":
        assert resolve_strategy("auto", 4096) == "sequential"
    with pytest.raises(ValueError, match="scan strategy"):
        resolve_strategy("parallel", 8)
    # the chunkwise forms (linear attention, mLSTM) are "auto" on every backend; FFM follows the
    # backend (here made one whose "auto" is associative, as on a GPU)
    monkeypatch.setattr(scan_module, "AUTO_SEQUENTIAL_BACKENDS", ())
    assert resolve_strategy("auto", 64) == "associative"
    for name, chunkwise in (("linear_attention", True), ("mlstm", True), ("ffm", False)):
        stack = build_memory(name, hidden_size=H)
        expected = "sequential" if chunkwise else "associative"
        assert stack.cell_kwargs(64) == {"strategy": expected}
        assert build_memory(name, hidden_size=H, scan="associative").cell_kwargs(64) == {
            "strategy": "associative"
        }
    model = build_memory("ffm", hidden_size=H, scan="parallel")
    x, start = _inputs(jax.random.key(11))
    with pytest.raises(ValueError, match="scan strategy"):
        model.init(jax.random.key(0), model.initialize_carry(B), (x, start))
