"""mLSTM (the matrix-memory cell of xLSTM) as a memoroid, with its exponential-gate stabiliser.

Beck, Poeppel, Spanring, Auer, Prudnikova, Kopp, Klambauer, Brandstetter, Hochreiter (2024),
"xLSTM: Extended Long Short-Term Memory", NeurIPS 2024, https://arxiv.org/abs/2405.04517,
Section 2.3 (equations 19-27). Per layer and head (head size ``d = hidden_size / num_heads``)::

    q_t = W_q x_t,  k_t = W_k x_t / sqrt(d),  v_t = W_v x_t            in R^d
    i_t = exp(i~_t),  f_t = sigmoid(f~_t)              (scalar gates per head: w^T x_t + b)
    C_t = f_t C_{t-1} + i_t v_t k_t^T                  [d, d]
    n_t = f_t n_{t-1} + i_t k_t                        [d]
    h~_t = C_t q_t / max(|n_t^T q_t|, 1)
    y_t = W_out (sigmoid(W_o x_t) * concat_heads(h~_t))

Stabiliser: the exponential input gate overflows, so the state is kept scaled, ``C_t =
exp(m_t) C^_t`` (and ``n``), with ``m_t = max(log f_t + m_{t-1}, i~_t)`` (the paper's equations
15-17). The normaliser becomes ``max(|n^_t^T q_t|, exp(-m_t))``, the same value.

Monoid (the stabilised linear recurrence): an element spanning steps ``s..t`` is ``(C^, n^, m,
F)`` with ``F`` the summed log forget gates and true state ``exp(m) C^``; ``a . b`` is::

    m = max(F_b + m_a, m_b),  C^ = exp(F_b + m_a - m) C^_a + exp(m_b - m) C^_b  (n^ likewise),
    F = F_a + F_b

with identity ``(0, 0, -1e30, 0)`` (``m = -inf`` up to float range: exactly absorbed, as
``exp(-1e30 - m) = 0``). Step ``t``'s element is ``(v_t k_t^T, k_t, i~_t, log f_t)``; scanning
from the left reproduces the paper's sequential stabiliser exactly (tested). Because the
stabiliser is part of the monoid, the associative scan stays overflow-free.

Deviations: the cell only (no xLSTM block: up-projection, causal convolution, learnable skip and
group norm); the layers are stacked like the other memoroids (pre-LayerNorm residual blocks). The
forget bias is initialised to ``linspace(3, 6)`` over heads (as in the reference code), the input
bias to 0.
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
    NEG_INF,
    chunk_episodes,
    from_chunks,
    resolve_strategy,
    time_chunks,
)

Array = jax.Array
# (C^ [..., heads, d, d], n^ [..., heads, d], m [..., heads], F [..., heads]) float32
MLSTMState = tuple[Array, Array, Array, Array]


def mlstm_identity(batch_size: int, heads: int, d: int) -> MLSTMState:
    return (
        jnp.zeros((batch_size, heads, d, d), jnp.float32),
        jnp.zeros((batch_size, heads, d), jnp.float32),
        jnp.full((batch_size, heads), NEG_INF, jnp.float32),
        jnp.zeros((batch_size, heads), jnp.float32),
    )


def mlstm_combine(a: MLSTMState, b: MLSTMState) -> MLSTMState:
    """The stabilised linear-recurrence monoid (module docstring); broadcasts over leading axes."""
    c_a, n_a, m_a, f_a = a
    c_b, n_b, m_b, f_b = b
    m = jnp.maximum(f_b + m_a, m_b)
    s_a, s_b = jnp.exp(f_b + m_a - m), jnp.exp(m_b - m)
    return (
        s_a[..., None, None] * c_a + s_b[..., None, None] * c_b,
        s_a[..., None] * n_a + s_b[..., None] * n_b,
        m,
        f_a + f_b,
    )


class MLSTMCell(MemoroidCell):
    hidden_size: int
    num_heads: int = 4
    chunk_size: int = 16  # steps per loop iteration of the sequential strategy (1: step by step)

    def setup(self) -> None:
        h, width = self.num_heads, self.hidden_size
        self.qkv = Dense(3 * width, use_bias=False)
        self.input_gate = Dense(h, bias_init=nn.initializers.zeros_init())
        self.forget_gate = Dense(
            h, bias_init=lambda k, s, dtype=jnp.float32: jnp.linspace(3.0, 6.0, s[0], dtype=dtype)
        )
        self.output_gate = Dense(width)
        self.out = Dense(width)

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @nn.nowrap
    def identity(self, batch_size: int) -> MLSTMState:
        return mlstm_identity(batch_size, self.num_heads, self.hidden_size // self.num_heads)

    def operator(self) -> Callable[[MLSTMState, MLSTMState], MLSTMState]:
        return mlstm_combine

    def _heads(self, u: Array) -> Array:
        return u.reshape(*u.shape[:-1], self.num_heads, self.head_size)

    def elements(self, x: Array) -> MLSTMState:
        _, k, v = jnp.split(self.qkv(x), 3, axis=-1)
        k = self._heads(k) / jnp.sqrt(self.head_size)
        v = self._heads(v)
        log_f = jax.nn.log_sigmoid(self.forget_gate(x))
        return v[..., :, None] * k[..., None, :], k, self.input_gate(x), log_f

    def readout(self, states: MLSTMState, x: Array) -> Array:
        c, n, m, _ = states
        q = self._heads(jnp.split(self.qkv(x), 3, axis=-1)[0])
        return self._output(mlstm_read(c, n, m, q), x)

    def _output(self, h: Array, x: Array) -> Array:
        """``W_out (sigmoid(W_o x) * concat_heads(h~))`` from ``h~ [T, B, heads, d]``."""
        h = h.reshape(*x.shape[:2], self.hidden_size)
        return self.out(jax.nn.sigmoid(self.output_gate(x)) * h)

    def __call__(
        self, carry: MLSTMState, x: Array, start: Array, strategy: str
    ) -> tuple[MLSTMState, Array]:
        """The memoroid (:class:`MemoroidCell`), except the sequential strategy over T > 1 steps:
        a loop over chunks of ``chunk_size`` steps in the chunkwise-parallel form
        (:func:`mlstm_chunks`; ``chunk_size=1``: one step per iteration), so neither the
        ``[T, B, heads, d, d]`` elements nor the prefix states are materialised (the same
        values up to float rounding)."""
        if start.shape[0] == 1 or resolve_strategy(strategy, start.shape[0]) != "sequential":
            return super().__call__(carry, x, start, strategy)
        q, k, v = (self._heads(u) for u in jnp.split(self.qkv(x), 3, axis=-1))
        k = k / jnp.sqrt(self.head_size)
        i_pre, log_f = self.input_gate(x), jax.nn.log_sigmoid(self.forget_gate(x))
        final, h = mlstm_chunks(carry, q, k, v, i_pre, log_f, start, self.chunk_size)
        return final, self._output(h, x)


def mlstm_chunks(
    carry: MLSTMState,
    q: Array,
    k: Array,
    v: Array,
    i_pre: Array,
    log_f: Array,
    start: Array,
    chunk_size: int,
) -> tuple[MLSTMState, Array]:
    """The stabilised mLSTM over ``T`` steps in chunks of ``L = chunk_size``: ``(final, h~)``.

    Args: ``q, k, v [T, B, heads, d]`` (``k`` already scaled by ``1 / sqrt(d)``), the input-gate
    pre-activation ``i_pre`` and ``log_f = log sigmoid(f~)`` ``[T, B, heads]``, ``start [T, B]``
    and the carry before step 0. Returns the state after step ``T - 1`` and ``h~ [T, B, heads,
    d]``.

    Within a chunk, with ``b_t`` the cumulative sum of ``log f`` from the chunk's first step, step
    ``s <= t`` of the same episode reaches ``t`` with log weight ``b_t - b_s + i~_s`` and the
    state before the chunk with ``b_t + m_0`` (only if no episode starts in ``[0, t]``). The
    stabiliser ``m_t`` is the largest of these: exactly the paper's ``m_t = max(log f_t +
    m_{t-1}, i~_t)`` unrolled. With ``w = exp(log weight - m_t)``::

        h~_t = (sum_s w_ts (q_t . k_s) v_s + w_t0 C^_0 q_t) / max(|sum_s w_ts (q_t . k_s)
               + w_t0 n^_0 . q_t|, exp(-m_t))

    (``[L, L]`` products per head: the chunkwise-parallel form of linear attention with decay,
    Yang et al. 2024, "Gated Linear Attention Transformers with Hardware-Efficient Training",
    with mLSTM's max stabiliser), and the state after the chunk is the last row's weights
    applied to ``v_s k_s^T``, ``k_s`` and ``(C^_0, n^_0)``. Steps past ``T`` (padding up to a
    multiple of ``L``) have ``i~ = -1e30`` (no input), ``log f = 0`` and no start, so they leave
    the state unchanged. ``L = 1`` is the step-by-step recurrence. The products are
    :func:`~stoixlite.networks.contract.einsum2` (forward and gradients in the matmul form
    XLA:CPU runs fastest).
    """
    fills = (0.0, 0.0, 0.0, NEG_INF, 0.0, False)
    xs, _ = time_chunks((q, k, v, i_pre, log_f, start), fills, chunk_size)

    def body(state: MLSTMState, chunk: tuple[Array, ...]) -> tuple[MLSTMState, Array]:
        c0, n0, m0, f0 = state  # [B, h, d, d], [B, h, d], [B, h], [B, h]
        q, k, v, i_pre, log_f, st = chunk  # [L, B, h, d] x 3, [L, B, h] x 2, [L, B]
        seg, sees = chunk_episodes(st)  # [B, L], [B, t, s]
        b_t = jnp.moveaxis(jnp.cumsum(log_f, axis=0), 0, -1)  # [B, h, L]
        log_w = b_t[..., :, None] - b_t[..., None, :] + jnp.moveaxis(i_pre, 0, -1)[..., None, :]
        log_w = jnp.where(sees[:, None], log_w, NEG_INF)  # [B, h, t, s]
        sees_carry = (seg == 0)[:, None, :]  # [B, 1, L]
        log_w0 = jnp.where(sees_carry, b_t + m0[..., None], NEG_INF)  # [B, h, L]
        m = jnp.maximum(jnp.max(log_w, axis=-1), log_w0)  # [B, h, L]
        w = jnp.exp(log_w - m[..., None])
        w0 = jnp.exp(log_w0 - m)
        a = w * einsum2("tbhd,sbhd->bhts", q, k)
        num = einsum2("bhts,sbhd->tbhd", a, v)
        num = num + jnp.moveaxis(w0, -1, 0)[..., None] * einsum2("bhvk,tbhk->tbhv", c0, q)
        den = jnp.sum(a, axis=-1) + w0 * einsum2("bhk,tbhk->bht", n0, q)  # [B, h, L]
        den = jnp.maximum(jnp.abs(den), jnp.exp(-m))
        h = num / jnp.moveaxis(den, -1, 0)[..., None]
        w_end, w0_end = w[..., -1, :], w0[..., -1]  # the state after the chunk's last step
        wv = jnp.moveaxis(w_end, -1, 0)[..., None] * v  # [L, B, h, d]
        c = einsum2("sbhv,sbhk->bhvk", wv, k) + w0_end[..., None, None] * c0
        n = einsum2("bhs,sbhk->bhk", w_end, k) + w0_end[..., None] * n0
        in_last = (seg == seg[:, -1:]).T[..., None]  # [L, B, 1]: steps of the last episode
        f = jnp.sum(jnp.where(in_last, log_f, 0.0), axis=0)
        f = f + jnp.where(seg[:, -1:] == 0, f0, 0.0)
        return (c, n, m[..., -1], f), h

    final, h = jax.lax.scan(body, carry, xs)
    return final, from_chunks(h, start.shape[0])


def mlstm_read(c: Array, n: Array, m: Array, q: Array) -> Array:
    """``h~ = C q / max(|n^T q|, exp(-m))`` for ``C [..., heads, d, d]``, ``n, q [..., heads,
    d]``, ``m [..., heads]``: the paper's normalised readout in the stabilised state."""
    num = jnp.einsum("...hvk,...hk->...hv", c, q)
    den = jnp.maximum(jnp.abs(jnp.einsum("...hk,...hk->...h", n, q)), jnp.exp(-m))
    return num / den[..., None]


@register_memory("mlstm")
class MLSTM(MemoroidStack):
    """xLSTM's mLSTM. Carry per layer: ``(C^ [B, h, d, d], n^ [B, h, d], m [B, h], F [B, h])``.

    Fields: ``num_heads`` (must divide ``hidden_size``; ``d = hidden_size / num_heads``),
    ``chunk_size`` (steps per iteration of the sequential strategy, :func:`mlstm_chunks`), plus
    ``num_layers`` and ``scan``.
    """

    cell = MLSTMCell
    auto_sequential = True  # the chunkwise form is faster on CPU and GPU

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        return heads_errors(fields, cls.num_heads)
