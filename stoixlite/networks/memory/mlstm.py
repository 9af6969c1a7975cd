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

from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import heads_errors
from stoixlite.networks.memory._memoroid import MemoroidCell, MemoroidStack
from stoixlite.networks.memory.scan import resettable, resolve_strategy

Array = jax.Array
# (C^ [..., heads, d, d], n^ [..., heads, d], m [..., heads], F [..., heads]) float32
MLSTMState = tuple[Array, Array, Array, Array]
NEG_INF = -1e30  # the identity's log scale: exp(NEG_INF - m) == 0 for every finite m


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

    def setup(self) -> None:
        h, width = self.num_heads, self.hidden_size
        self.qkv = nn.Dense(3 * width, use_bias=False)
        self.input_gate = nn.Dense(h, bias_init=nn.initializers.zeros_init())
        self.forget_gate = nn.Dense(
            h, bias_init=lambda k, s, dtype=jnp.float32: jnp.linspace(3.0, 6.0, s[0], dtype=dtype)
        )
        self.output_gate = nn.Dense(width)
        self.out = nn.Dense(width)

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
        one loop that forms each step's element, applies the operator with its reset and reads
        ``h~_t`` out inside the body, so neither the ``[T, B, heads, d, d]`` elements nor the
        prefix states are materialised in the forward pass (the same values)."""
        if start.shape[0] == 1 or resolve_strategy(strategy, start.shape[0]) != "sequential":
            return super().__call__(carry, x, start, strategy)
        q, k, v = (self._heads(u) for u in jnp.split(self.qkv(x), 3, axis=-1))
        k = k / jnp.sqrt(self.head_size)
        i_pre, log_f = self.input_gate(x), jax.nn.log_sigmoid(self.forget_gate(x))

        step = resettable(mlstm_combine)

        def body(state: MLSTMState, inp: tuple[Array, ...]) -> tuple[MLSTMState, Array]:
            q_t, k_t, v_t, i_t, f_t, s_t = inp
            elem = (v_t[..., :, None] * k_t[..., None, :], k_t, i_t, f_t)
            new, _ = step((state, s_t), (elem, s_t))  # the operator with its reset
            c, n, m, _ = new
            return new, mlstm_read(c, n, m, q_t)

        final, h = jax.lax.scan(body, carry, (q, k, v, i_pre, log_f, start))
        return final, self._output(h, x)


def mlstm_read(c: Array, n: Array, m: Array, q: Array) -> Array:
    """``h~ = C q / max(|n^T q|, exp(-m))`` for ``C [..., heads, d, d]``, ``n, q [..., heads,
    d]``, ``m [..., heads]``: the paper's normalised readout in the stabilised state."""
    num = jnp.einsum("...hvk,...hk->...hv", c, q)
    den = jnp.maximum(jnp.abs(jnp.einsum("...hk,...hk->...h", n, q)), jnp.exp(-m))
    return num / den[..., None]


@register_memory("mlstm")
class MLSTM(MemoroidStack):
    """xLSTM's mLSTM. Carry per layer: ``(C^ [B, h, d, d], n^ [B, h, d], m [B, h], F [B, h])``.

    Fields: ``num_heads`` (must divide ``hidden_size``; ``d = hidden_size / num_heads``), plus
    ``num_layers`` and ``scan``.
    """

    cell = MLSTMCell

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        return heads_errors(fields, cls.num_heads)
