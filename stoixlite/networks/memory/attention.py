"""Windowed causal self-attention memories: ``transformer`` and ``gtrxl``.

Every step attends to itself and to the last ``memory_length`` (M) steps of its episode. The keys
and values of those M steps, for every layer, are the carry: a fixed-size cache
(``[B, M, heads, d]`` per layer, oldest first) with a validity mask ``[B, M]``
(:mod:`._window`). A call on ``T`` steps attends over the ``M + T`` slots (cache, then the new
steps) with a mask allowing slot ``j`` for step ``t`` iff it is in the same episode, not in the
future and at most M steps back. So a call on ``T`` steps equals ``T`` one-step calls, training
on a T-step sequence starts from exactly the cache the rollout had, and nothing is padded on the
host. Episode starts hide everything before them.

Per layer (pre-norm, Xiong et al. 2020; multi-head attention, Vaswani et al. 2017)::

    a   = MHA(LayerNorm(h))           softmax(q k^T / sqrt(d) + b[lag]) v over the visible slots
    h   = h + a                       (transformer)   |   h = g(h, relu(a))   (gtrxl)
    f   = W_2 relu(W_1 LayerNorm(h))  (ff_size hidden units)
    h   = h + f                       (transformer)   |   h = g(h, relu(f))   (gtrxl)

then ``y = LayerNorm(h)``. The input is first projected to ``hidden_size``. Positions: a learned
relative bias ``b[head, lag]`` per lag ``0..M`` (lag = how many steps back the key is; as the
relative biases of Shaw et al. 2018 / Raffel et al. 2020, with one bucket per lag): exact for
any chunking, unlike absolute positions.

``gtrxl``: Parisotto et al. (2020), "Stabilizing Transformers for Reinforcement Learning", ICML,
https://arxiv.org/abs/1910.06764: the identity-map reordering (pre-norm, ReLU on the sublayer
output) and GRU-type gating layers replacing the residual additions::

    r = sigmoid(W_r y + U_r x),  z = sigmoid(W_z y + U_z x - b_g),  n = tanh(W_g y + U_g (r * x))
    g(x, y) = (1 - z) * x + z * n            (b_g = 2 at init: close to the identity map)

Deviations from GTrXL: a sliding window of single steps with relative *biases* instead of
Transformer-XL segment memory with sinusoidal relative encodings; the cache stores each layer's
keys and values (not its inputs), which is equivalent for fixed parameters and cheaper per
rollout step.
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import _window, register_memory
from stoixlite.networks.memory._common import bounded_int_errors, check_inputs, heads_errors

Array = jax.Array
MAX_MEMORY_LENGTH = 4096  # the longest window the config check accepts
KV = tuple[Array, Array]  # (keys, values), each [B, M, heads, d]
AttentionCarry = tuple[Array, tuple[KV, ...]]  # (valid [B, M] bool, per-layer caches)


class GRUGate(nn.Module):
    """GTrXL's GRU-type gate ``g(x, y)`` (x: the residual stream, y: the sublayer output)."""

    gate_bias: float = 2.0

    @nn.compact
    def __call__(self, x: Array, y: Array) -> Array:
        width = x.shape[-1]
        wy = Dense(3 * width, use_bias=False, name="w")(y)
        ux = Dense(2 * width, use_bias=False, name="u")(x)
        r = jax.nn.sigmoid(wy[..., :width] + ux[..., :width])
        bias = self.param("bias", nn.initializers.constant(self.gate_bias), (width,))
        z = jax.nn.sigmoid(wy[..., width : 2 * width] + ux[..., width:] - bias)
        n = jnp.tanh(wy[..., 2 * width :] + Dense(width, use_bias=False, name="ug")(r * x))
        return (1.0 - z) * x + z * n


class AttentionLayer(nn.Module):
    """One pre-norm block: windowed multi-head attention, then a feed-forward MLP."""

    hidden_size: int
    num_heads: int
    memory_length: int
    ff_size: int
    gated: bool

    def _residual(self, x: Array, y: Array, name: str) -> Array:
        return GRUGate(name=name)(x, jax.nn.relu(y)) if self.gated else x + y

    @nn.compact
    def __call__(
        self, cache: KV, h: Array, visible: Array, lag: Array
    ) -> tuple[tuple[Array, Array], Array]:
        """``h [T, B, H]``, ``visible [B, T, M + T]``, ``lag [T, M + T]`` (clipped to 0..M).

        Returns this call's ``(keys, values)`` (``[T, B, heads, d]``, for the cache) and ``h``.
        """
        heads, d = self.num_heads, self.hidden_size // self.num_heads
        qkv = Dense(3 * self.hidden_size, name="qkv")(nn.LayerNorm(name="attn_norm")(h))
        q, k, v = (u.reshape(*u.shape[:-1], heads, d) for u in jnp.split(qkv, 3, axis=-1))
        keys = jnp.concatenate([jnp.moveaxis(cache[0], 1, 0), k], axis=0)  # [M + T, B, h, d]
        values = jnp.concatenate([jnp.moveaxis(cache[1], 1, 0), v], axis=0)
        bias = self.param("rel_bias", nn.initializers.zeros_init(), (heads, self.memory_length + 1))
        scores = jnp.einsum("tbhd,sbhd->bhts", q, keys) / jnp.sqrt(d) + bias[:, lag]
        scores = jnp.where(visible[:, None], scores, -1e30)  # every step sees itself
        o = jnp.einsum("bhts,sbhd->tbhd", jax.nn.softmax(scores, axis=-1), values)
        o = Dense(self.hidden_size, name="attn_out")(o.reshape(h.shape))
        h = self._residual(h, o, "attn_gate")
        f = Dense(self.ff_size, name="ff_in")(nn.LayerNorm(name="ff_norm")(h))
        f = Dense(self.hidden_size, name="ff_out")(jax.nn.relu(f))
        return (k, v), self._residual(h, f, "ff_gate")


class WindowedAttention(nn.Module):
    """Causal self-attention over the last ``memory_length`` steps (module docstring).

    Carry: ``(valid [B, M] bool, ((keys, values) per layer))``, keys/values ``[B, M, heads,
    hidden_size / heads]`` float32. ``x [T, B, F]`` -> ``y [T, B, hidden_size]``.
    Fields: ``num_layers``, ``num_heads`` (must divide ``hidden_size``), ``memory_length`` (M),
    ``ff_size`` (``None``: 4 x hidden_size).
    """

    hidden_size: int
    num_layers: int = 2
    num_heads: int = 4
    memory_length: int = 64
    ff_size: int | None = None
    gated: ClassVar[bool] = False

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        why = " (the carry holds 2 x memory_length x hidden_size floats per layer and env)"
        length = {"memory_length": cls.memory_length}
        return heads_errors(fields, cls.num_heads) + bounded_int_errors(
            fields, length, MAX_MEMORY_LENGTH, why
        )

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> AttentionCarry:
        d = self.hidden_size // self.num_heads
        kv = jnp.zeros((batch_size, self.memory_length, self.num_heads, d), jnp.float32)
        valid = jnp.zeros((batch_size, self.memory_length), bool)
        return valid, tuple((kv, kv) for _ in range(self.num_layers))

    @nn.compact
    def __call__(
        self, carry: AttentionCarry, inputs: tuple[Array, Array]
    ) -> tuple[AttentionCarry, Array]:
        x, start = inputs
        check_inputs(x, start)
        valid, caches = carry
        if len(caches) != self.num_layers:
            raise ValueError(f"carry has {len(caches)} layers, model has {self.num_layers}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads {self.num_heads} does not divide {self.hidden_size}")
        visible = _window.visibility(valid, start)
        lag = jnp.clip(_window.lags(self.memory_length, x.shape[0]), 0, self.memory_length)
        h = Dense(self.hidden_size, name="embed")(x)
        new_caches, new_valid = [], valid
        for i, cache in enumerate(caches):
            layer = AttentionLayer(
                self.hidden_size,
                self.num_heads,
                self.memory_length,
                self.ff_size or 4 * self.hidden_size,
                self.gated,
                name=f"layer_{i}",
            )
            kv, h = layer(cache, h, visible, lag)
            new_cache, new_valid = _window.append(cache, valid, kv, start)
            new_caches.append(new_cache)
        return (new_valid, tuple(new_caches)), nn.LayerNorm(name="out_norm")(h)


@register_memory("transformer")
class Transformer(WindowedAttention):
    """Pre-norm transformer, residual additions, sliding window (``network=transformer``)."""


@register_memory("gtrxl")
class GTrXL(WindowedAttention):
    """Gated transformer (GTrXL gating, ``network=gtrxl``); otherwise as ``transformer``."""

    gated: ClassVar[bool] = True
