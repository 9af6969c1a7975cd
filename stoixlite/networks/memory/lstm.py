"""Long short-term memory (Hochreiter & Schmidhuber 1997), evaluated with ``jax.lax.scan``.

Same equations and initialisers as ``flax.linen.LSTMCell``::

    i = sigmoid(W_ii x + b_i + W_hi h)     f = sigmoid(W_if x + b_f + W_hf h)
    g = tanh(W_ig x + b_g + W_hg h)        o = sigmoid(W_io x + b_o + W_ho h)
    c' = f * c + i * g                     h' = o * tanh(c')

As in ``gru.py`` the input projections for all T steps are one matmul outside the loop; the
fused ``[B, H] x [H, 4H]`` recurrent matmul and the gates run inside. Sequences (T > 1) run
through ``rnn_kernels.lstm_sequence`` (``jax.custom_vjp``, hand-written reverse loop); T == 1 is
plain code with no loop. ``unroll`` is the ``lax.scan`` unroll of both loops.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import (
    check_inputs,
    default_kernel_init,
    default_recurrent_init,
    gate_bias_init,
    stacked_init,
)
from stoixlite.networks.memory.rnn_kernels import lstm_sequence

Array = jax.Array
Carry = tuple[Array, Array]


@register_memory("lstm")
class LSTM(nn.Module):
    """LSTM memory. Carry: ``(c, h)``, each ``[B, hidden_size]`` (zeros at episode start).

    ``__call__(carry, (x, start))`` with ``x [T, B, F]`` and ``start [T, B]`` bool returns
    ``((c_T, h_T), y)`` with ``y [T, B, hidden_size]`` the hidden states ``h``. Where
    ``start[t, b]`` both ``c`` and ``h`` are reset to zeros before ``x[t, b]`` is consumed.
    """

    hidden_size: int
    unroll: int = 1
    chrono_period: float = 0.0  # chrono init of the forget (keep) and input (write) gates

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Carry:
        z = jnp.zeros((batch_size, self.hidden_size), jnp.float32)
        return (z, z)

    @nn.compact
    def __call__(self, carry: Carry, inputs: tuple[Array, Array]) -> tuple[Carry, Array]:
        x, start = inputs
        check_inputs(x, start)
        H = self.hidden_size
        w_i = self.param("input_kernel", stacked_init(default_kernel_init, 4), (x.shape[-1], 4 * H))
        b_i = self.param(
            "input_bias",
            gate_bias_init(("write", "keep", "cell", "out"), self.chrono_period),
            (4 * H,),
        )
        w_h = self.param("recurrent_kernel", stacked_init(default_recurrent_init, 4), (H, 4 * H))

        xp = jnp.einsum("tbf,fg->tbg", x, w_i) + b_i  # [T, B, 4H]

        if x.shape[0] == 1:  # rollout path: one step, no loop (plain autodiff)
            c, h = carry
            keep = ~start[0][:, None]
            c = jnp.where(keep, c, 0.0)
            h = jnp.where(keep, h, 0.0)
            gates = xp[0] + h @ w_h
            i, f, g, o = jnp.split(gates, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (c, h), h[None]
        c_init, h_init = carry
        c, y = lstm_sequence(xp, start, c_init, h_init, w_h, unroll=self.unroll)
        return (c, y[-1]), y
