"""Elman RNN (Elman 1990, "Finding Structure in Time"), the simple recurrent baseline of POPGym.

Morad, Kortvelesy, Bettini, Liwicki, Prorok (2023), "POPGym: Benchmarking Partially Observable
Reinforcement Learning", ICLR 2023, https://arxiv.org/abs/2303.01859 (the "Elman" model)::

    h_t = tanh(W_x x_t + b + W_h h_{t-1}),     y_t = h_t

Initialisers as the GRU (lecun-normal input kernel, orthogonal recurrent kernel, zero bias). The
input projections of all T steps are one matmul outside ``jax.lax.scan``; with T == 1 (the
rollout) no loop is built.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import (
    ZeroStateRNN,
    check_inputs,
    default_kernel_init,
    default_recurrent_init,
)

Array = jax.Array


@register_memory("elman")
class Elman(ZeroStateRNN):
    """Elman RNN. Carry: ``h [B, hidden_size]`` (zeros at episode start).

    ``__call__(carry, (x [T, B, F], start [T, B])) -> (h_T, y [T, B, hidden_size])``; where
    ``start[t, b]`` the state is reset to zeros before ``x[t, b]`` is consumed.
    """

    @nn.compact
    def __call__(self, carry: Array, inputs: tuple[Array, Array]) -> tuple[Array, Array]:
        x, start = inputs
        check_inputs(x, start)
        H = self.hidden_size
        xp = Dense(H, kernel_init=default_kernel_init, name="input")(x)  # [T, B, H]
        w_h = self.param("recurrent_kernel", default_recurrent_init, (H, H))

        def step(h: Array, inp: tuple[Array, Array]) -> tuple[Array, Array]:
            xt, st = inp
            h = jnp.tanh(xt + jnp.where(st[:, None], 0.0, h) @ w_h)
            return h, h

        if x.shape[0] == 1:  # rollout path: one step, no loop
            h, _ = step(carry, (xp[0], start[0]))
            return h, h[None]
        h, ys = jax.lax.scan(step, carry, (xp, start), unroll=self.unroll)
        return h, ys
