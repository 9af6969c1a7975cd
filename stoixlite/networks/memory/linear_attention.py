"""Normalised linear attention (a "fast autoregressive transformer") memoroid.

Katharopoulos, Vyas, Pappas, Fleuret (2020), "Transformers are RNNs: Fast Autoregressive
Transformers with Linear Attention", ICML 2020, https://arxiv.org/abs/2006.16236.

Per layer and head, with feature map ``phi(u) = elu(u) + 1`` (positive)::

    S_t = S_{t-1} + phi(k_t) v_t^T        [d_k, d_v]
    z_t = z_{t-1} + phi(k_t)              [d_k]        (accumulated key sum)
    o_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps)
    y_t = W_o concat_heads(o_t)

The output is normalised by the *accumulated* key sum since the episode start (causal softmax-free
attention over the episode), not only by the current key. ``d_v = hidden_size / num_heads``.

Monoid: addition of ``(S, z)``, identity ``(0, 0)``. The state is ``num_heads * d_k * d_v``
floats per batch element, much larger than the other memoroids: keep ``key_size`` small.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import heads_errors
from stoixlite.networks.memory._memoroid import MemoroidCell, MemoroidStack

Array = jax.Array
AttnState = tuple[Array, Array]  # (S [..., heads, d_k, d_v], z [..., heads, d_k]) float32


def attention_identity(batch_size: int, heads: int, dk: int, dv: int) -> AttnState:
    return (
        jnp.zeros((batch_size, heads, dk, dv), jnp.float32),
        jnp.zeros((batch_size, heads, dk), jnp.float32),
    )


def _add(a: AttnState, b: AttnState) -> AttnState:
    return a[0] + b[0], a[1] + b[1]


def _phi(u: Array) -> Array:
    return jax.nn.elu(u) + 1.0


class LinearAttentionCell(MemoroidCell):
    """One linear-attention layer; its fields are the model's keys."""

    hidden_size: int
    num_heads: int = 4
    key_size: int = 16
    eps: float = 1e-6

    def setup(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.num_heads}")
        self.query = Dense(self.num_heads * self.key_size)
        self.key = Dense(self.num_heads * self.key_size)
        self.value = Dense(self.hidden_size)
        self.out = Dense(self.hidden_size)

    @property
    def dv(self) -> int:
        return self.hidden_size // self.num_heads

    @nn.nowrap
    def identity(self, batch_size: int) -> AttnState:
        return attention_identity(batch_size, self.num_heads, self.key_size, self.dv)

    def operator(self) -> Callable[[AttnState, AttnState], AttnState]:
        return _add

    def _heads(self, u: Array, size: int) -> Array:
        return u.reshape(*u.shape[:-1], self.num_heads, size)

    def elements(self, x: Array) -> AttnState:
        k = _phi(self._heads(self.key(x), self.key_size))  # [T, B, h, dk]
        v = self._heads(self.value(x), self.dv)  # [T, B, h, dv]
        return k[..., :, None] * v[..., None, :], k

    def readout(self, states: AttnState, x: Array) -> Array:
        s, z = states
        q = _phi(self._heads(self.query(x), self.key_size))
        num = jnp.einsum("tbhk,tbhkv->tbhv", q, s)
        den = jnp.einsum("tbhk,tbhk->tbh", q, z)[..., None] + self.eps
        return self.out((num / den).reshape(*x.shape[:2], self.hidden_size))


@register_memory("linear_attention")
class LinearAttention(MemoroidStack):
    """Normalised linear attention. Carry per layer: ``(S [B, h, d_k, d_v], z [B, h, d_k])``.

    Fields: ``num_heads``, ``key_size`` (d_k), ``eps``, plus ``num_layers`` and ``scan``.
    """

    cell = LinearAttentionCell

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        return heads_errors(fields, cls.num_heads)
