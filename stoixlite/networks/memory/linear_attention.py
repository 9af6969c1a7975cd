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

The sequential strategy over T > 1 steps (the CPU default) runs in chunks of ``chunk_size``
steps in the chunkwise-parallel form (:func:`linear_attention_chunks`: masked ``[L, L]`` scores
within a chunk, the state carried between chunks), so neither the ``[T, B, h, d_k, d_v]``
elements nor the prefix states are materialised; the same outputs, carries and gradients as the
monoid scan up to float rounding (``tests/test_memoroid_scan.py``; a per-step reference for chunks
of 1, 3, 8 and 16 steps in ``tests/test_memory_references.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.contract import einsum2
from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import heads_errors
from stoixlite.networks.memory._memoroid import MemoroidCell, MemoroidStack
from stoixlite.networks.memory.scan import (
    chunk_episodes,
    from_chunks,
    resolve_strategy,
    time_chunks,
)

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
    chunk_size: int = 16  # steps per loop iteration of the sequential strategy (1: step by step)

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

    def __call__(
        self, carry: AttnState, x: Array, start: Array, strategy: str
    ) -> tuple[AttnState, Array]:
        """The memoroid (:class:`MemoroidCell`), except the sequential strategy over T > 1 steps:
        :func:`linear_attention_chunks` over chunks of ``chunk_size`` steps."""
        if start.shape[0] == 1 or resolve_strategy(strategy, start.shape[0]) != "sequential":
            return super().__call__(carry, x, start, strategy)
        q = _phi(self._heads(self.query(x), self.key_size))
        k = _phi(self._heads(self.key(x), self.key_size))
        v = self._heads(self.value(x), self.dv)
        final, o = linear_attention_chunks(carry, q, k, v, start, self.chunk_size, self.eps)
        return final, self.out(o.reshape(*x.shape[:2], self.hidden_size))


def linear_attention_chunks(
    carry: AttnState,
    q: Array,
    k: Array,
    v: Array,
    start: Array,
    chunk_size: int,
    eps: float,
) -> tuple[AttnState, Array]:
    """Normalised linear attention over ``T`` steps in chunks of ``L = chunk_size``.

    Args: the feature-mapped ``q = phi(q), k = phi(k)`` ``[T, B, h, d_k]``, ``v [T, B, h, d_v]``,
    ``start [T, B]`` and the carry ``(S [B, h, d_k, d_v], z [B, h, d_k])`` before step 0.
    Returns the carry after step ``T - 1`` and ``o [T, B, h, d_v]``.

    Within a chunk, step ``t`` sees the steps ``s <= t`` of its own episode (``[L, L]`` scores
    ``q_t . k_s``) and, if no episode starts in the chunk up to ``t``, the state before the
    chunk::

        o_t = (sum_s [s sees t] (q_t . k_s) v_s + [t sees carry] q_t^T S_0)
              / (sum_s [s sees t] (q_t . k_s) + [t sees carry] q_t . z_0 + eps)

    and the state after the chunk is the sum of ``k_s v_s^T`` (``k_s``) over its last episode,
    plus ``(S_0, z_0)`` if no episode starts in it. Steps past ``T`` (padding up to a multiple of
    ``L``) have ``k = v = 0`` and no start, so they leave the state unchanged. ``L = 1`` is the
    step-by-step recurrence.

    Evaluation: the within-chunk products and each chunk's own state increment are computed for
    all chunks at once; only the states before each chunk (``S_c = keep_c S_{c-1} + dS_c``,
    elementwise) run in a loop over the ``T / L`` chunks. Every product is an
    :func:`~stoixlite.networks.contract.einsum2` (forward and gradients in the matmul form
    XLA:CPU runs fastest; docs/benchmarks.md, "Weight gradients in XNNPACK").
    """
    (q, k, v, st), _ = time_chunks((q, k, v, start), (0.0, 0.0, 0.0, False), chunk_size)
    # q, k [C, L, B, h, dk], v [C, L, B, h, dv], st [C, L, B]
    seg, sees = jax.vmap(chunk_episodes)(st)  # [C, B, L], [C, B, t, s]
    a = jnp.where(sees[:, :, None], einsum2("ctbhk,csbhk->cbhts", q, k), 0.0)
    num = einsum2("cbhts,csbhv->ctbhv", a, v)
    den = jnp.moveaxis(jnp.sum(a, axis=-1), -1, 1)  # [C, L, B, h]
    # each chunk's own increment: k_s v_s^T (k_s) over the steps of its last episode
    in_last = jnp.moveaxis(seg == seg[..., -1:], 2, 1)  # [C, L, B]
    k_last = in_last.astype(k.dtype)[..., None, None] * k
    d_s = einsum2("csbhk,csbhv->cbhkv", k_last, v)
    d_z = jnp.sum(k_last, axis=1)  # [C, B, h, dk]
    keep = seg[..., -1] == 0  # [C, B]: no start in the chunk, the state before it carries on

    def carry_on(state: AttnState, chunk: tuple[Array, Array, Array]):
        (s, z), (kp, ds, dz) = state, chunk
        after = (
            jnp.where(kp[:, None, None, None], s, 0.0) + ds,
            jnp.where(kp[:, None, None], z, 0.0) + dz,
        )
        return after, state

    final, (s_in, z_in) = jax.lax.scan(carry_on, carry, (keep, d_s, d_z))
    sees_carry = jnp.moveaxis(seg == 0, 2, 1)[..., None]  # [C, L, B, 1]
    num = num + jnp.where(sees_carry[..., None], einsum2("ctbhk,cbhkv->ctbhv", q, s_in), 0.0)
    den = den + jnp.where(sees_carry, einsum2("ctbhk,cbhk->ctbh", q, z_in), 0.0)
    o = num / (den + eps)[..., None]
    return final, from_chunks(o, start.shape[0])


@register_memory("linear_attention")
class LinearAttention(MemoroidStack):
    """Normalised linear attention. Carry per layer: ``(S [B, h, d_k, d_v], z [B, h, d_k])``.

    Fields: ``num_heads``, ``key_size`` (d_k), ``eps``, plus ``num_layers`` and ``scan``.
    """

    cell = LinearAttentionCell
    auto_sequential = True  # the chunkwise form is faster on CPU and GPU

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        return heads_errors(fields, cls.num_heads)
