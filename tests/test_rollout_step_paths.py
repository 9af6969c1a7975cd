"""The one-step calls (``T == 1``, the rollout) of mamba and mlstm equal their scans over T > 1.

At ``T == 1`` both models take :func:`~stoixlite.networks.memory.scan.resettable_scan`'s single
operator application whatever the strategy. ``tests/test_memory_properties.py::test_chunking``
already checks that T one-step calls give the outputs and final carry of one T-step call (default
strategy). Here, in addition: the comparison with *each* strategy's T-step path (associative and
sequential: mamba's selective scan, mlstm's chunkwise form), and the gradients of a loss on the
outputs and the final carry (mamba's ``prod`` included) with respect to the parameters and the
incoming carry (training differentiates through T == 1 calls with ``system.bptt_length=1``), from a
random carry, with and without a reset at each step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_memory_properties import random_carry

from stoixlite.networks.memory import build_memory

H, B, F = 16, 4, 5
KWARGS = {"mamba": {"state_size": 4}, "mlstm": {"num_heads": 2}}
# step 0 / step 1 per batch element: reset then none, none then reset, both, neither
START = jnp.array([[True, False, True, False], [False, True, True, False]])


def _close(a, b, what, rtol=1e-5, atol=1e-6):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, what
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=what)


# The associative scans under `pytest -m slow` (CI runs it: .ci/run-slow):
# 17 s of CPU each. By default the sequential scans are checked here, and the associative ones
# against them or the per-step reference (tests/test_memoroid_scan.py for mlstm,
# tests/test_memory_references.py for mamba).
@pytest.mark.parametrize(
    "strategy", [pytest.param("associative", marks=pytest.mark.slow), "sequential"]
)
@pytest.mark.parametrize(
    # mamba's own scan is checked against its recurrence in test_memory_references.py
    "name",
    [pytest.param("mamba", marks=pytest.mark.slow), "mlstm"],
)
def test_one_step_calls_equal_the_scan(name, strategy):
    """Two T = 1 calls == one T = 2 call: outputs, carry, and gradients (parameters, carry)."""
    model = build_memory(name, hidden_size=H, scan=strategy, **KWARGS[name])
    x = jax.random.normal(jax.random.key(0), (2, B, F))
    w = jax.random.normal(jax.random.key(1), (2, B, H))
    carry = random_carry(model.initialize_carry(B), jax.random.key(2))
    params = jax.jit(model.init)(jax.random.key(3), carry, (x, START))  # one program
    floats, treedef = jax.tree_util.tree_flatten(carry)
    is_float = [jnp.issubdtype(leaf.dtype, jnp.floating) for leaf in floats]

    def with_floats(float_leaves):  # the carry with its float leaves replaced
        it = iter(float_leaves)
        leaves = [next(it) if f else leaf for leaf, f in zip(floats, is_float, strict=True)]
        return jax.tree_util.tree_unflatten(treedef, leaves)

    def loss(call):
        def f(p, float_leaves):
            c, y = call(p, with_floats(float_leaves))
            extra = sum(
                jnp.sum(jnp.sin(leaf))
                for leaf in jax.tree_util.tree_leaves(c)
                if jnp.issubdtype(leaf.dtype, jnp.floating)
            )
            return jnp.sum(w * y) + extra, (c, y)

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))

    def steps(p, c):
        c, y0 = model.apply(p, c, (x[:1], START[:1]))
        c, y1 = model.apply(p, c, (x[1:], START[1:]))
        return c, jnp.concatenate([y0, y1])

    def scan(p, c):
        return model.apply(p, c, (x, START))

    float_leaves = [leaf for leaf, f in zip(floats, is_float, strict=True) if f]
    (v_s, (c_s, y_s)), g_s = loss(steps)(params, float_leaves)
    (v_t, (c_t, y_t)), g_t = loss(scan)(params, float_leaves)
    _close(y_s, y_t, "outputs")
    _close(c_s, c_t, "final carry")
    np.testing.assert_allclose(v_s, v_t, rtol=1e-5)
    _close(g_s[0], g_t[0], "parameter gradients", atol=1e-5)
    _close(g_s[1], g_t[1], "carry gradients", atol=1e-5)
