"""Matmuls over time-major activations ``[T, B, ..., F]``, done as 2-D matmuls.

XLA:CPU compiles a matmul whose operand keeps several leading axes (``[T, B, F] x [F, G]``, and
above all its weight gradient, which contracts over both T and B) to slower code than the same
matmul on ``[T*B, F]``. Measured on the 2-core CPU of docs/benchmarks.md, forward + backward:
``[1, 2048, 64] x [64, 64]`` 1.6x slower, ``[128, 16, 128] x [128, 384]`` 1.7x slower, and a
feed-forward PPO minibatch step 1.7x slower than PureJaxRL's, whose data has no time axis. These
helpers flatten the leading axes first; results are equal up to float rounding.

The weight gradient ``x^T g`` contracts both operands over their leading (sample) axis. XLA:CPU
(JAX 0.10) hands a matmul to its fast XNNPACK kernels only when the left operand's contracted
axis is its last one, so ``x^T g`` as JAX differentiates it runs in the generic Eigen kernel,
2-5x slower at these sizes (docs/benchmarks.md, "Weight gradients in XNNPACK"). On the CPU,
:func:`outer_sum` therefore transposes ``x`` into memory first (an ``optimization_barrier`` keeps
XLA from folding the transpose back into the matmul), and :func:`matmul` and :class:`Dense` are
differentiated by :func:`~stoixlite.networks.contract.einsum2`, whose weight gradient has the same
form. Other backends keep the plain product.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from stoixlite.networks.contract import einsum2, materialised


def _leading_first(a: jax.Array) -> jax.Array:
    """``a [..., F] -> [F, N]`` (N = the product of the leading axes), materialised on the CPU."""
    return materialised(a.reshape((-1, a.shape[-1])).T)


def outer_sum(a: jax.Array, b: jax.Array) -> jax.Array:
    """``sum over the leading axes of a[..., :, None] * b[..., None, :]`` -> ``[F, G]``.

    The weight gradient of :func:`matmul` (``einsum("tbf,tbg->fg")``) as one 2-D matmul whose
    left operand contracts its last axis (see the module docstring).
    """
    return _leading_first(a) @ b.reshape((-1, b.shape[-1]))


def matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x [..., F] @ w [F, G] -> [..., G]`` as one 2-D matmul over the flattened leading axes,
    differentiated by :func:`~stoixlite.networks.contract.einsum2` (its weight gradient is
    ``x^T g`` with ``x^T`` materialised on the CPU, as in :func:`outer_sum`)."""
    lead = x.shape[:-1]
    return einsum2("nf,fg->ng", x.reshape((-1, x.shape[-1])), w).reshape(lead + (w.shape[-1],))


class Dense(nn.Dense):
    """``flax.linen.Dense`` on ``[..., F]`` inputs flattened to 2-D, with :func:`matmul`'s weight
    gradient (same parameters, names and initialisers)."""

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        kernel = self.param(
            "kernel", self.kernel_init, (inputs.shape[-1], self.features), self.param_dtype
        )
        bias = (
            self.param("bias", self.bias_init, (self.features,), self.param_dtype)
            if self.use_bias
            else None
        )
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = matmul(inputs, kernel)
        return y if bias is None else y + bias
