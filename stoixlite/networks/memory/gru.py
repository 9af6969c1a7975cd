"""Gated recurrent unit (Cho et al. 2014), evaluated with ``jax.lax.scan``.

Same equations and initialisers as ``flax.linen.GRUCell``::

    r  = sigmoid(W_ir x + b_ir + W_hr h)
    z  = sigmoid(W_iz x + b_iz + W_hz h)
    n  = tanh(W_in x + b_in + r * (W_hn h + b_hn))
    h' = (1 - z) * n + z * h

Performance: the input projections ``W_i* x`` for all T steps are one ``[T*B, F] x [F, 3H]``
matmul outside the loop; inside it only the fused ``[B, H] x [H, 3H]`` recurrent matmul and the
gates remain. Sequences (T > 1) run through ``rnn_kernels.gru_sequence``, a ``jax.custom_vjp``
recurrence with a lean hand-written reverse loop; a single step (T == 1, the rollout) is plain
code with no loop. ``unroll`` is the ``lax.scan`` unroll of both loops (1 measured fastest on
CPU: unrolled bodies fuse into larger kernels that XLA:CPU vectorises poorly).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import (
    ZeroStateRNN,
    check_inputs,
    default_kernel_init,
    default_recurrent_init,
    gate_bias_init,
    stacked_init,
)
from stoixlite.networks.memory.rnn_kernels import gru_sequence

Array = jax.Array


@register_memory("gru")
class GRU(ZeroStateRNN):
    """GRU memory. Carry: ``h`` of shape ``[B, hidden_size]`` (zeros at episode start).

    ``chrono_period`` (0: off) initialises the update gate ``z`` (the keep gate) with chrono
    init (:func:`~stoixlite.networks.memory._common.gate_bias_init`), so that at initialisation
    the state is kept for up to ``chrono_period`` steps instead of ~2 (docs/learning.md).

    ``__call__(carry, (x, start))`` with ``x [T, B, F]`` float32 and ``start [T, B]`` bool returns
    ``(h_T, y)`` with ``y [T, B, hidden_size]`` the hidden state after every step. Where
    ``start[t, b]`` the state is reset to zeros before ``x[t, b]`` is consumed.
    """

    chrono_period: float = 0.0

    @nn.compact
    def __call__(self, carry: Array, inputs: tuple[Array, Array]) -> tuple[Array, Array]:
        x, start = inputs
        check_inputs(x, start)
        H = self.hidden_size
        w_i = self.param("input_kernel", stacked_init(default_kernel_init, 3), (x.shape[-1], 3 * H))
        b_i = self.param(
            "input_bias", gate_bias_init(("reset", "keep", "new"), self.chrono_period), (3 * H,)
        )
        w_h = self.param("recurrent_kernel", stacked_init(default_recurrent_init, 3), (H, 3 * H))
        b_hn = self.param("recurrent_bias_n", nn.initializers.zeros_init(), (H,))

        xp = jnp.einsum("tbf,fg->tbg", x, w_i) + b_i  # [T, B, 3H], all steps at once

        if x.shape[0] == 1:  # rollout path: one step, no loop (plain autodiff)
            h = jnp.where(start[0][:, None], 0.0, carry)
            hh = h @ w_h
            xt = xp[0]
            r = jax.nn.sigmoid(xt[:, :H] + hh[:, :H])
            z = jax.nn.sigmoid(xt[:, H : 2 * H] + hh[:, H : 2 * H])
            n = jnp.tanh(xt[:, 2 * H :] + r * (hh[:, 2 * H :] + b_hn))
            h = (1.0 - z) * n + z * h
            return h, h[None]
        y = gru_sequence(xp, start, carry, w_h, b_hn, unroll=self.unroll)
        return y[-1], y
