"""Memoryless baseline: a Dense layer and activation applied to every step independently.

It satisfies the memory contract with a dummy carry (zeros ``[B, 1]``) so that a feed-forward
policy runs through exactly the same rollout/training code as the recurrent ones.
"""

from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import check_inputs, get_activation

Array = jax.Array


@register_memory("mlp")
class MLPMemory(nn.Module):
    """No memory: ``y[t, b] = activation(W x[t, b] + b)``.

    Carry: zeros ``[B, 1]`` float32, returned unchanged in shape (always zeros, so nothing can
    leak across episodes). ``x [T, B, F]`` -> ``y [T, B, hidden_size]``.
    """

    stateless: ClassVar[bool] = True

    hidden_size: int
    activation: str = "relu"

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Array:
        return jnp.zeros((batch_size, 1), jnp.float32)

    @nn.compact
    def __call__(self, carry: Array, inputs: tuple[Array, Array]) -> tuple[Array, Array]:
        x, start = inputs
        check_inputs(x, start)
        y = get_activation(self.activation)(Dense(self.hidden_size, name="dense")(x))
        return jnp.zeros_like(carry), y
