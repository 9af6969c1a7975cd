"""No memory and no layer: the memory slot passes its input through.

With ``encoder_layers = 0`` the actor-critic becomes two separate feed-forward MLPs on the raw
observation (PureJaxRL ``ppo.py``'s architecture, ``configs/network/feedforward.yaml``).
"""

from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import check_inputs

Array = jax.Array


@register_memory("identity")
class IdentityMemory(nn.Module):
    """No memory: ``y[t, b] = x[t, b]`` (``[T, B, F] -> [T, B, F]``, no parameters).

    Carry: zeros ``[B, 1]`` float32, returned as zeros (nothing can leak across episodes).
    ``hidden_size`` is accepted for config uniformity and ignored (the output width is ``F``).
    """

    stateless: ClassVar[bool] = True
    passthrough: ClassVar[bool] = True  # y is x: width F, no parameters

    hidden_size: int = 0

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Array:
        return jnp.zeros((batch_size, 1), jnp.float32)

    def __call__(self, carry: Array, inputs: tuple[Array, Array]) -> tuple[Array, Array]:
        x, start = inputs
        check_inputs(x, start)
        return jnp.zeros_like(carry), x
