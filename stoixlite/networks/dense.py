"""Matmuls over time-major activations ``[T, B, ..., F]``, done as 2-D matmuls.

XLA:CPU compiles a matmul whose operand keeps several leading axes (``[T, B, F] x [F, G]``, and
above all its weight gradient, which contracts over both T and B) to slower code than the same
matmul on ``[T*B, F]``. Measured on the 2-core CPU of docs/benchmarks.md, forward + backward:
``[1, 2048, 64] x [64, 64]`` 1.6x slower, ``[128, 16, 128] x [128, 384]`` 1.7x slower, and a
feed-forward PPO minibatch step 1.7x slower than PureJaxRL's, whose data has no time axis. These
helpers flatten the leading axes first; results are equal up to float rounding.
"""

from __future__ import annotations

import flax.linen as nn
import jax


def matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x [..., F] @ w [F, G] -> [..., G]`` as one 2-D matmul over the flattened leading axes."""
    lead = x.shape[:-1]
    return (x.reshape((-1, x.shape[-1])) @ w).reshape(lead + (w.shape[-1],))


def outer_sum(a: jax.Array, b: jax.Array) -> jax.Array:
    """``sum over the leading axes of a[..., :, None] * b[..., None, :]`` -> ``[F, G]``.

    The weight gradient of :func:`matmul` (``einsum("tbf,tbg->fg")``) as one 2-D matmul.
    """
    return a.reshape((-1, a.shape[-1])).T @ b.reshape((-1, b.shape[-1]))


class Dense(nn.Dense):
    """``flax.linen.Dense`` on ``[..., F]`` inputs flattened to 2-D (same parameters and names)."""

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        lead = inputs.shape[:-1]
        y = super().__call__(inputs.reshape((-1, inputs.shape[-1])))
        return y.reshape(lead + y.shape[-1:])
