"""Two-operand contractions (``einsum``) as one batched matmul in the form XLA:CPU runs fastest.

XLA:CPU (JAX 0.10) hands a matmul to its XNNPACK kernels only when the left operand's contracted
axes are its last ones; otherwise it runs the generic Eigen kernel, 2-5x slower at the sizes of
the chunkwise memories (docs/benchmarks.md, "Weight gradients in XNNPACK"). ``jnp.einsum`` leaves
the layout to XLA, and the gradients JAX derives from it contract the left operand over leading
axes (a weight gradient ``x^T g`` contracts the sample axis), so most backward products of the
chunkwise forms ran in Eigen.

:func:`einsum2` evaluates ``einsum(spec, a, b)`` as ``[batch, M, K] x [batch, K, N]`` (batch
axes first, the left operand's contracted axes last) and differentiates it with the same
function, so the forward product and both gradient products have that form. On the CPU the left
operand of each product is transposed into memory first (``optimization_barrier``: XLA would
otherwise fold the transpose back into the matmul's dimension numbers); other backends keep
XLA's choice. Results equal ``jnp.einsum`` up to float rounding (``tests/test_contract.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

Array = jax.Array


def materialised(a: Array) -> Array:
    """``a`` as its own buffer on the CPU (the transpose producing it is not folded into the
    consumer's dimension numbers); unchanged on other backends."""
    return jax.lax.optimization_barrier(a) if jax.default_backend() == "cpu" else a


def _parse(spec: str) -> tuple[str, str, str]:
    inputs, out = spec.replace(" ", "").split("->")
    a, b = inputs.split(",")
    for term in (a, b, out):
        if len(set(term)) != len(term):
            raise ValueError(f"einsum2 {spec!r}: a letter repeats within one term")
    if set(out) - set(a) - set(b):
        raise ValueError(f"einsum2 {spec!r}: an output letter is in neither operand")
    return a, b, out


def _matmul_form(sa: str, sb: str, out: str, a: Array, b: Array, lhs_copy: bool) -> Array:
    """``einsum(f"{sa},{sb}->{out}", a, b)`` as one ``dot_general`` of ``[batch, M, K]`` by
    ``[batch, K, N]``; ``lhs_copy``: materialise the transposed left operand. Every letter of
    ``sa`` and ``sb`` is in the other operand or in ``out``."""
    batch = [c for c in out if c in sa and c in sb]
    contracted = [c for c in sa if c in sb and c not in out]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    size = dict(zip(sa, a.shape, strict=True)) | dict(zip(sb, b.shape, strict=True))

    def prod(letters: list[str]) -> int:
        return math.prod(size[c] for c in letters)

    lhs = jnp.transpose(a, [sa.index(c) for c in batch + free_a + contracted])
    rhs = jnp.transpose(b, [sb.index(c) for c in batch + contracted + free_b])
    if lhs_copy:
        lhs = materialised(lhs)
    y = jax.lax.dot_general(
        lhs.reshape(prod(batch), prod(free_a), prod(contracted)),
        rhs.reshape(prod(batch), prod(contracted), prod(free_b)),
        (((2,), (1,)), ((0,), (0,))),
    )
    order = batch + free_a + free_b
    y = y.reshape([size[c] for c in order])
    return jnp.transpose(y, [order.index(c) for c in out])


def einsum2(spec: str, a: Array, b: Array) -> Array:
    """``jnp.einsum(spec, a, b)`` for two operands, forward and gradients as batched matmuls
    with the left operand contracted over its last axes (module docstring).

    ``spec`` is an explicit einsum (``"tbhk,sbhk->bhts"``) with no letter repeated within a
    term; letters of one operand that appear neither in the other nor in the output are summed
    first (by ``jnp.sum``, outside the matmul).
    """
    sa, sb, out = _parse(spec)
    if (len(sa), len(sb)) != (a.ndim, b.ndim):
        raise ValueError(f"einsum2 {spec!r}: operands of rank {a.ndim} and {b.ndim}")
    sa, a = _sum_single(sa, a, sb, out)
    sb, b = _sum_single(sb, b, sa, out)
    return _contraction(sa, sb, out)(a, b)


def _sum_single(term: str, x: Array, other: str, out: str) -> tuple[str, Array]:
    """Sum the axes of ``x`` whose letters are in neither ``other`` nor ``out``."""
    gone = [c for c in term if c not in other and c not in out]
    if not gone:
        return term, x
    x = jnp.sum(x, axis=tuple(term.index(c) for c in gone))
    return "".join(c for c in term if c not in gone), x


_CONTRACTIONS: dict[tuple[str, str, str], Callable[[Array, Array], Array]] = {}


def _contraction(sa: str, sb: str, out: str) -> Callable[[Array, Array], Array]:
    """The differentiable contraction of one spec (built once per spec): forward and both
    cotangents in the matmul form, the cotangents' left operands materialised."""
    key = (sa, sb, out)
    if key in _CONTRACTIONS:
        return _CONTRACTIONS[key]

    @jax.custom_vjp
    def f(a: Array, b: Array) -> Array:
        return _matmul_form(sa, sb, out, a, b, lhs_copy=False)

    def fwd(a: Array, b: Array) -> tuple[Array, tuple[Array, Array]]:
        # the product itself, not ``f``: forward-mode over this rule (Hessians) then works
        return _matmul_form(sa, sb, out, a, b, lhs_copy=False), (a, b)

    def bwd(res: tuple[Array, Array], g: Array) -> tuple[Array, Array]:
        a, b = res
        return (
            _matmul_form(out, sb, sa, g, b, lhs_copy=True),
            _matmul_form(sa, out, sb, a, g, lhs_copy=True),
        )

    f.defvjp(fwd, bwd)
    _CONTRACTIONS[key] = f
    return f
