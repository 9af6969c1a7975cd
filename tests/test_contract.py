"""``stoixlite.networks.contract.einsum2``: values and gradients equal ``jnp.einsum``, and on the
CPU every product has its left operand contracted over its last axis (the XNNPACK form)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.contract import einsum2

CASES = [
    ("tbhk,sbhk->bhts", (5, 3, 2, 4), (5, 3, 2, 4)),  # chunk scores
    ("bhts,sbhv->tbhv", (3, 2, 5, 5), (5, 3, 2, 6)),
    ("bhvk,tbhk->tbhv", (3, 2, 6, 4), (5, 3, 2, 4)),  # state read-out
    ("bhs,sbhk->bhk", (3, 2, 5), (5, 3, 2, 4)),
    ("sbhv,sbhk->bhvk", (5, 3, 2, 6), (5, 3, 2, 4)),  # state increment
    ("bhts,bhsd->bhtd", (3, 2, 5, 5), (3, 2, 5, 6)),  # batched matmul
    ("nf,ng->fg", (7, 3), (7, 4)),  # a weight gradient
    ("tbk,k->tb", (5, 3, 4), (4,)),
    ("abc,cd->a", (2, 3, 4), (4, 5)),  # letters summed out of the output
    ("ij,jk->ki", (3, 4), (4, 5)),  # transposed output
    ("ab,cd->abcd", (2, 3), (4, 5)),  # outer product (no contracted letter)
]


@pytest.mark.parametrize(("spec", "shape_a", "shape_b"), CASES)
def test_einsum2_equals_einsum_with_gradients(spec, shape_a, shape_b):
    ka, kb, kw = jax.random.split(jax.random.key(0), 3)
    a, b = jax.random.normal(ka, shape_a), jax.random.normal(kb, shape_b)
    ref = jnp.einsum(spec, a, b)
    w = jax.random.normal(kw, ref.shape)
    np.testing.assert_allclose(einsum2(spec, a, b), ref, rtol=1e-5, atol=1e-5)
    ours = jax.grad(lambda a, b: jnp.sum(w * jnp.tanh(einsum2(spec, a, b))), (0, 1))(a, b)
    plain = jax.grad(lambda a, b: jnp.sum(w * jnp.tanh(jnp.einsum(spec, a, b))), (0, 1))(a, b)
    for x, y in zip(ours, plain, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", ["abc,bc->a", "aa,ab->b", "ab,bc->cz"])
def test_einsum2_rejects_specs_it_does_not_evaluate(spec):
    with pytest.raises(ValueError, match="einsum2"):
        einsum2(spec, jnp.ones((2, 2)), jnp.ones((2, 2)))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU lowering property")
def test_einsum2_products_contract_the_left_operands_last_axis():
    """Forward and both gradients of a chunk-score product compile to dots whose left operand
    contracts its last axis; jnp.einsum's gradient does not (the negative control)."""
    a, b = jnp.ones((16, 8, 4, 16)), jnp.ones((16, 8, 4, 16))

    def dots(fn):
        g = jax.jit(jax.grad(lambda a, b: jnp.sum(jnp.sin(fn("tbhk,sbhk->bhts", a, b))), (0, 1)))
        hlo = g.lower(a, b).compile().as_text()
        return [line for line in hlo.splitlines() if " dot(" in line]

    ours = dots(einsum2)
    assert len(ours) >= 3, ours
    assert all("lhs_contracting_dims={2}" in line for line in ours), ours
    plain = dots(jnp.einsum)
    assert any("lhs_contracting_dims={2}" not in line for line in plain), plain
