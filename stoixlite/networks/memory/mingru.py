"""minGRU memoroid.

Feng, Tung, Ahmed, Bengio, Hajimirsadeghi (2024), "Were RNNs All We Needed?",
https://arxiv.org/abs/2410.01201.

Per layer (gates depend on the input only, so the recurrence is linear in ``h``)::

    z_t  = sigmoid(W_z x_t + b_z)
    h~_t = W_h x_t + b_h
    h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t,     y_t = h_t

Direct form (not the paper's log-space form): the monoid is the diagonal linear recurrence with
elements ``(1 - z_t, z_t * h~_t)`` and identity ``(1, 0)``. The direct form never divides by
cumulative products (the reason for log space in the paper's ``cumsum`` formulation), so it is
numerically safe in float32; ``1 - z_t`` is computed as ``sigmoid(-k_t)``.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._memoroid import MemoroidCell, MemoroidStack
from stoixlite.networks.memory.scan import linear_recurrence_combine, linear_recurrence_identity

Array = jax.Array
LinState = tuple[Array, Array]  # (cumulative 1 - z, h), both [..., H] float32


class MinGRUCell(MemoroidCell):
    """One minGRU layer."""

    hidden_size: int

    def setup(self) -> None:
        self.gate = nn.Dense(self.hidden_size)
        self.candidate = nn.Dense(self.hidden_size)

    @nn.nowrap
    def identity(self, batch_size: int) -> LinState:
        return linear_recurrence_identity((batch_size, self.hidden_size), jnp.float32)

    def operator(self) -> Callable[[LinState, LinState], LinState]:
        return linear_recurrence_combine

    def elements(self, x: Array) -> LinState:
        k = self.gate(x)
        return jax.nn.sigmoid(-k), jax.nn.sigmoid(k) * self.candidate(x)

    def readout(self, states: LinState, x: Array) -> Array:
        return states[1]


@register_memory("mingru")
class MinGRU(MemoroidStack):
    """minGRU. Carry per layer: ``(prod (1 - z), h)``, each ``[B, hidden_size]`` float32."""

    cell = MinGRUCell
