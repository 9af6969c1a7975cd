"""Positional MLP: an MLP that sees the step index within the episode (a POPGym baseline).

Morad et al. (2023), "POPGym: Benchmarking Partially Observable Reinforcement Learning",
ICLR 2023, https://arxiv.org/abs/2303.01859 (the "Positional MLP" model): a feed-forward policy
with the sinusoidal positional encoding of Vaswani et al. (2017) of the episode's time step::

    n_t = steps since the episode start (0 on the first step)
    y_t = act(W x_t + b + PE(n_t))                      in R^H
    PE(n)[2i] = sin(n / max_period^(2i / H)),  PE(n)[2i + 1] = cos(n / max_period^(2i / H))

The carry is the step counter ``n`` (int32), so the index is exact across calls and chunks. The
encoding is added to the projected input, as in transformers (POPGym adds it to the
observation's embedding).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import check_inputs, get_activation

Array = jax.Array


def steps_since_start(count: Array, start: Array) -> Array:
    """Episode step index ``[T, B]`` int32 of each step, given ``count [B]`` steps already taken
    in the running episode before the call and ``start [T, B]``."""
    t = jnp.arange(start.shape[0], dtype=jnp.int32)[:, None]
    last_start = jax.lax.cummax(jnp.where(start, t, -1), axis=0)  # [T, B], -1: none yet
    return jnp.where(last_start >= 0, t - last_start, count[None] + t)


def sinusoidal_encoding(n: Array, size: int, max_period: float) -> Array:
    """``[..., size]`` sinusoidal encoding of integer positions ``n [...]`` (sin/cos pairs)."""
    freqs = max_period ** (-jnp.arange(0, size, 2, dtype=jnp.float32) / size)
    angles = n[..., None].astype(jnp.float32) * freqs
    enc = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*n.shape, -1)
    return enc[..., :size]


@register_memory("positional_mlp")
class PositionalMLP(nn.Module):
    """MLP plus the episode step's positional encoding. Carry: step counter ``[B]`` int32.

    ``x [T, B, F]`` -> ``y [T, B, hidden_size]``; the carry after the call counts the steps of
    the running episode (a step with ``start`` counts as its first).
    """

    hidden_size: int
    activation: str = "relu"
    max_period: float = 1024.0

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Array:
        return jnp.zeros((batch_size,), jnp.int32)

    @nn.compact
    def __call__(self, carry: Array, inputs: tuple[Array, Array]) -> tuple[Array, Array]:
        x, start = inputs
        check_inputs(x, start)
        n = steps_since_start(carry, start)
        pe = sinusoidal_encoding(n, self.hidden_size, self.max_period)
        y = get_activation(self.activation)(Dense(self.hidden_size, name="dense")(x) + pe)
        return n[-1] + 1, y
