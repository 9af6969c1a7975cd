"""Gated DeltaNet: a fast-weight matrix memory written by the gated delta rule.

Yang, Kautz, Hatamizadeh (2025), "Gated Delta Networks: Improving Mamba2 with Delta Rule",
ICLR 2025, https://arxiv.org/abs/2412.06464 (the delta rule: Schlag, Irie, Schmidhuber 2021,
"Linear Transformers Are Secretly Fast Weight Programmers"). Per layer and head (head size
``d = hidden_size / num_heads``)::

    q_t, k_t = l2norm(W_q x_t), l2norm(W_k x_t),   v_t = W_v x_t          in R^d
    beta_t  = sigmoid(w_beta^T x_t + b_beta)                              (writing strength)
    alpha_t = exp(-exp(a_log) * softplus(w_alpha^T x_t + b_alpha))        (decay, in (0, 1))
    S_t     = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T   [d, d]
    o_t     = S_t q_t
    y_t     = W_out (concat_heads(o_t) * silu(W_g x_t))                   (output gate)

The delta rule replaces the value stored under key ``k_t`` by ``v_t`` (at rate ``beta_t``)
instead of adding to it, and ``alpha_t`` forgets (the "gated" rule, as in Mamba2).

Evaluation over ``T > 1`` steps: a loop over chunks of ``chunk_size`` steps in the chunkwise
form of the paper (Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length", with the gate of Yang et al. 2025; :func:`delta_rule_chunks`): within a chunk
the writes solve a unit lower-triangular system (inverted as a product of matrix powers, all
matrix products), and the outputs and the state after the chunk are ``[L, L]`` and ``[L, d]``
products, so the ``[T, B, h, d, d]`` states are never formed. ``chunk_size=1`` is the
step-by-step recurrence. The rollout (``T = 1``) applies the rule once
(:func:`delta_rule_step`). The carry at an episode start is ``S = 0``.

Deviations: no short convolution on q, k, v and no RMSNorm on the head outputs (the paper's
block); ``a_log`` is initialised to 0 and ``b_alpha`` so that ``softplus(b_alpha)`` is
log-uniform in ``[0.001, 0.1]`` (decays 0.9..0.999 at init); ``b_beta`` is 0.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.contract import einsum2
from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import heads_errors
from stoixlite.networks.memory._stack import CellStack
from stoixlite.networks.memory.mamba import dt_bias_init
from stoixlite.networks.memory.scan import NEG_INF, chunk_episodes, from_chunks, time_chunks

Array = jax.Array


def l2norm(u: Array, eps: float = 1e-6) -> Array:
    """``u / ||u||`` over the last axis (``eps`` inside the square root)."""
    return u * jax.lax.rsqrt(jnp.sum(u * u, axis=-1, keepdims=True) + eps)


def delta_rule_step(s: Array, k: Array, v: Array, alpha: Array, beta: Array) -> Array:
    """``S alpha (I - beta k k^T) + beta v k^T`` for ``S [..., d_v, d_k]``, ``k [..., d_k]``,
    ``v [..., d_v]``, ``alpha, beta [...]``; O(d^2) (no ``d x d`` identity is formed)."""
    sk = jnp.einsum("...vk,...k->...v", s, k)
    a, b = alpha[..., None, None], beta[..., None, None]
    return a * s + b * (v - alpha[..., None] * sk)[..., :, None] * k[..., None, :]


class DeltaNetCell(nn.Module):
    """One gated delta-rule layer: ``(S [B, h, d, d], x [T, B, F], start [T, B]) ->
    (S, y [T, B, hidden_size])``."""

    hidden_size: int
    num_heads: int = 4
    chunk_size: int = 16

    def setup(self) -> None:
        h, width = self.num_heads, self.hidden_size
        self.qkv = Dense(3 * width, use_bias=False)
        self.beta = Dense(h)
        self.alpha = Dense(h, bias_init=dt_bias_init(0.001, 0.1))
        self.a_log = self.param("a_log", nn.initializers.zeros_init(), (h,))
        self.gate = Dense(width)
        self.out = Dense(width)

    def _heads(self, u: Array) -> Array:
        return u.reshape(*u.shape[:-1], self.num_heads, self.hidden_size // self.num_heads)

    def __call__(self, carry: Array, x: Array, start: Array) -> tuple[Array, Array]:
        q, k, v = (self._heads(u) for u in jnp.split(self.qkv(x), 3, axis=-1))
        q, k = l2norm(q), l2norm(k)
        beta = jax.nn.sigmoid(self.beta(x))  # [T, B, h]
        log_alpha = -jnp.exp(self.a_log) * jax.nn.softplus(self.alpha(x))

        if x.shape[0] == 1:  # rollout path: one step, no loop
            s = delta_rule_step(
                jnp.where(start[0][:, None, None, None], 0.0, carry),
                k[0],
                v[0],
                jnp.exp(log_alpha[0]),
                beta[0],
            )
            o = jnp.einsum("bhvk,bhk->bhv", s, q[0])[None]
        else:
            s, o = delta_rule_chunks(carry, q, k, v, log_alpha, beta, start, self.chunk_size)
        o = o.reshape(*x.shape[:2], self.hidden_size)
        return s, self.out(o * jax.nn.silu(self.gate(x)))


MATMUL = "bhts,bhsd->bhtd"  # the [L, L] x [L, d] products of one chunk, per batch row and head
CHUNKS_MATMUL = "cbhts,cbhsd->cbhtd"  # the same for all chunks at once


def delta_rule_chunks(
    s0: Array,
    q: Array,
    k: Array,
    v: Array,
    log_alpha: Array,
    beta: Array,
    start: Array,
    chunk_size: int,
) -> tuple[Array, Array]:
    """The gated delta rule over T steps in chunks of ``L = chunk_size``: ``(S_T, o)``.

    Args: the carry ``s0 [B, h, d, d]``, ``q, k, v [T, B, h, d]``, ``log_alpha, beta [T, B, h]``
    and ``start [T, B]`` (the state restarts from zero at a start). Returns the state after step
    ``T - 1`` and the outputs ``o [T, B, h, d]``.

    Write ``S_t = alpha_t S_{t-1} + u_t k_t^T`` with ``u_t = beta_t (v_t - alpha_t S_{t-1}
    k_t)``. Within a chunk, with ``g_ts = exp(b_t - b_s)`` (``b`` the cumulative ``log alpha``
    from the chunk's start; zero unless ``s <= t`` in the same episode) and ``g_t0 = exp(b_t)``
    for the carry (zero once an episode has started in the chunk), ``S_t = g_t0 S_0 + sum_{s <=
    t} g_ts u_s k_s^T``, so the ``u`` solve the unit lower-triangular system::

        u_t + beta_t sum_{s < t} g_ts (k_t . k_s) u_s = beta_t (v_t - g_t0 S_0 k_t)

    ``(I + N)^-1 = (I - N)(I + N^2)(I + N^4)...`` (``N`` is nilpotent: ``N^L = 0``) solves it
    with ``log2 L`` matrix products; a batched LAPACK triangular solve deadlocked XLA's CPU
    thread pool here. Then ``o_t = g_t0 S_0 q_t + sum_{s <= t} g_ts (k_s . q_t) u_s`` and the
    state after the chunk is the last row's sum. The decays, ``(I + N)^-1`` and the ``g_ts (k_s
    . q_t)`` weights do not depend on the carry and are computed for all chunks at once; the
    loop over chunks does the five products that involve ``S_0``. Steps past ``T`` (padding)
    have ``beta = 0`` and ``log alpha = 0``: they leave the state unchanged.

    Every product is an :func:`~stoixlite.networks.contract.einsum2` (forward and gradients in
    the matmul form XLA:CPU runs fastest).
    """
    fills = (0.0, 0.0, 0.0, 0.0, 0.0, False)
    chunks, size = time_chunks((q, k, v, log_alpha, beta, start), fills, chunk_size)
    q, k, v, log_a, beta, st = chunks  # [C, L, B, h, d] x 3, [C, L, B, h] x 2, [C, L, B]
    strict = jnp.tril(jnp.ones((size, size), bool), -1)
    squarings = max(0, (size - 1).bit_length() - 1)  # N^(2^j) for j = 1..squarings
    # Everything that does not depend on the carry, for all chunks at once: the decays, the
    # inverse (I + N)^-1 = (I - N)(I + N^2)(I + N^4)... and the masked q . k weights.
    seg, sees = jax.vmap(chunk_episodes)(st)  # [C, B, L], [C, B, t, s]
    b = jnp.moveaxis(jnp.cumsum(log_a, axis=1), 1, -1)  # [C, B, h, L]
    g = jnp.exp(jnp.where(sees[:, :, None], b[..., :, None] - b[..., None, :], NEG_INF))
    g0 = jnp.where((seg == 0)[:, :, None, :], jnp.exp(b), 0.0)  # [C, B, h, L]
    beta = jnp.moveaxis(beta, 1, -1)[..., None]  # [C, B, h, L, 1]
    n = jnp.where(strict, beta * g * einsum2("ctbhd,csbhd->cbhts", k, k), 0.0)
    inverse, power = jnp.eye(size, dtype=n.dtype) - n, n
    for _ in range(squarings):
        power = einsum2(CHUNKS_MATMUL, power, power)
        inverse = inverse + einsum2(CHUNKS_MATMUL, power, inverse)
    a_qk = g * einsum2("ctbhd,csbhd->cbhts", q, k)

    def body(s: Array, chunk: tuple[Array, ...]) -> tuple[Array, Array]:
        inverse, a_qk, g0, g_last, beta, q, k, v = chunk  # [B, h, ...] and [L, B, h, d] x 3
        sk0 = g0[..., None] * einsum2("bhvk,tbhk->bhtv", s, k)
        u = einsum2(MATMUL, inverse, beta * (jnp.moveaxis(v, 0, 2) - sk0))  # [B, h, L, d]
        o = einsum2(MATMUL, a_qk, u) + g0[..., None] * einsum2("bhvk,tbhk->bhtv", s, q)
        s = g0[..., -1, None, None] * s + einsum2("bhsv,sbhk->bhvk", g_last[..., None] * u, k)
        return s, jnp.moveaxis(o, 2, 0)

    final, o = jax.lax.scan(body, s0, (inverse, a_qk, g0, g[..., -1, :], beta, q, k, v))
    return final, from_chunks(o, start.shape[0])


@register_memory("deltanet")
class DeltaNet(CellStack):
    """Gated DeltaNet. Carry per layer: ``S [B, num_heads, d, d]`` float32 (zeros at a start).

    Fields: ``num_heads`` (must divide ``hidden_size``; ``d = hidden_size / num_heads``),
    ``num_layers``, ``chunk_size`` (steps per loop iteration, :func:`delta_rule_chunks`).
    """

    num_heads: int = 4
    chunk_size: int = 16

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        return heads_errors(fields, cls.num_heads)

    @nn.nowrap
    def make_cell(self, layer: int) -> DeltaNetCell:
        return DeltaNetCell(self.hidden_size, self.num_heads, self.chunk_size)

    @nn.nowrap
    def cell_identity(self, batch_size: int) -> Array:
        d = self.hidden_size // self.num_heads
        return jnp.zeros((batch_size, self.num_heads, d, d), jnp.float32)
