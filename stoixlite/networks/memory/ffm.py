"""Fast and Forgetful Memory (FFM), registered as ``ffm`` and ``memoroid``.

Morad, Kortvelesy, Liwicki, Prorok (2023), "Reinforcement Learning with Fast and Forgetful
Memory", NeurIPS 2023, https://arxiv.org/abs/2310.04128; memoroid form from Morad et al. (2024),
"Reinforcement Learning with Memoroids" (https://openreview.net/forum?id=nA4Q983a1v).

Per layer, with trace size ``m`` and context size ``c``::

    x~_t = W_pre x_t * sigmoid(W_in x_t)                                   in R^m   (input gate)
    S_t  = gamma * S_{t-1} + x~_t 1_c^T,   gamma = exp(-|alpha| + i omega)  in C^{m x c}
    z_t  = W_mix [Re S_t, Im S_t]                                           in R^H
    g_t  = sigmoid(W_out x_t)                                   (output gate)
    y_t  = LayerNorm(z_t * g_t) + skip(x_t) * (1 - g_t)

``alpha`` (per trace channel, decay) and ``omega`` (per context channel, frequency) are learned,
initialised as ``alpha = linspace(1e-6, 0.5, m)`` and ``omega = 2 pi / geomspace(min_period,
max_period, c)``. Deviation from the paper's ``linspace(1, 1024, c)`` periods: a period of 1 is a
full turn per step (``exp(2 pi i) = 1``, no positional information) and linearly spaced long
periods leave short lags indistinguishable except by decay. Log-spaced periods from 2 (default
``min_period``) cover short and long lags; with the paper's init FFM did not learn
popgym/repeat_previous (eval 0.07 after 2M steps); with this one it reaches 0.95 after 0.8M and
1.0 by 2M steps at the shipped defaults (docs/memory_models.md).
``skip`` is the identity when F == H and a Dense projection otherwise.

Monoid (the recurrence unrolled over a gap of ``j`` steps is ``gamma^j``): elements ``(S, n)``
with ``n`` the number of steps they span, ``(S_a, i) . (S_b, j) = (gamma^j * S_a + S_b, i + j)``,
identity ``(0, 0)``. Each step is the element ``(x~_t 1_c^T, 1)``.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._memoroid import MemoroidCell, MemoroidStack
from stoixlite.networks.memory.decay_scan import decay_scan, steps_since_start

Array = jax.Array
FFMState = tuple[Array, Array]  # (trace [..., m, c] complex64, steps [...] int32)


def ffm_identity(batch_size: int, trace_size: int, context_size: int) -> FFMState:
    """Identity ``(0, 0)``: empty trace, zero elapsed steps."""
    return (
        jnp.zeros((batch_size, trace_size, context_size), jnp.complex64),
        jnp.zeros((batch_size,), jnp.int32),
    )


class FFMCell(MemoroidCell):
    """One FFM layer; its fields are the model's keys."""

    hidden_size: int
    trace_size: int = 32
    context_size: int = 4
    min_period: float = 2.0
    max_period: float = 1024.0

    def setup(self) -> None:
        m, c = self.trace_size, self.context_size
        self.decay = self.param("decay", lambda k, s: jnp.linspace(1e-6, 0.5, s[0]), (m,))
        self.frequency = self.param(
            "frequency",
            lambda k, s: 2 * jnp.pi / jnp.geomspace(self.min_period, self.max_period, s[0]),
            (c,),
        )
        self.pre = Dense(m)
        self.gate_in = Dense(m)
        self.gate_out = Dense(self.hidden_size)
        self.mix = Dense(self.hidden_size)
        self.skip = Dense(self.hidden_size)  # only used (and created) when F != H
        self.norm = nn.LayerNorm(use_bias=False, use_scale=False)

    @nn.nowrap
    def identity(self, batch_size: int) -> FFMState:
        return ffm_identity(batch_size, self.trace_size, self.context_size)

    def log_gamma(self) -> Array:
        """``log gamma = -|alpha| + i omega``, ``[m, c]`` complex."""
        return jax.lax.complex(-jnp.abs(self.decay)[:, None], self.frequency[None, :])

    def operator(self) -> Callable[[FFMState, FFMState], FFMState]:
        log_gamma = self.log_gamma()

        def combine(a: FFMState, b: FFMState) -> FFMState:
            (sa, i), (sb, j) = a, b
            gamma = jnp.exp(log_gamma * j.astype(jnp.float32)[..., None, None])
            return gamma * sa + sb, i + j

        return combine

    def step_operator(self) -> Callable[[FFMState, FFMState], FFMState]:
        """Right operand = one step (``j == 1``): ``gamma`` once instead of ``exp(j log gamma)``."""
        gamma = jnp.exp(self.log_gamma())

        def combine_step(a: FFMState, b: FFMState) -> FFMState:
            (sa, i), (sb, j) = a, b
            return gamma * sa + sb, i + j

        return combine_step

    def elements(self, x: Array) -> FFMState:
        gated = self._gated(x)
        trace = jnp.broadcast_to(gated[..., None], (*gated.shape, self.context_size))
        return trace.astype(jnp.complex64), jnp.ones(x.shape[:2], jnp.int32)

    def _gated(self, x: Array) -> Array:
        """The gated input ``x~_t = W_pre x_t * sigmoid(W_in x_t)``, ``[T, B, m]``."""
        return self.pre(x) * jax.nn.sigmoid(self.gate_in(x))

    def __call__(
        self, carry: FFMState, x: Array, start: Array, strategy: str
    ) -> tuple[FFMState, Array]:
        """The memoroid call; the sequential strategy (T > 1) runs the trace's recurrence
        ``S_t = gamma S_{t-1} + x~_t 1_c^T`` (time-invariant ``gamma``) as a
        :func:`~stoixlite.networks.memory.decay_scan.decay_scan` with its own gradient, and counts
        the steps after the loop; same states, final carry and gradients as the monoid scan."""
        if strategy != "sequential" or x.shape[0] == 1:
            return super().__call__(carry, x, start, strategy)
        trace0, steps0 = carry
        # the element x~_t 1_c^T enters as x~_t [T, B, m]: decay_scan repeats it over c
        trace = decay_scan(jnp.exp(self.log_gamma()), self._gated(x), start, trace0)
        final = (trace[-1], steps_since_start(steps0, start))
        return final, self.readout((trace, None), x)

    def readout(self, states: FFMState, x: Array) -> Array:
        trace, _ = states
        z = jnp.concatenate([trace.real, trace.imag], axis=-1).reshape(*x.shape[:2], -1)
        z = self.mix(z)
        g = jax.nn.sigmoid(self.gate_out(x))
        skip = x if x.shape[-1] == self.hidden_size else self.skip(x)
        return self.norm(z * g) + skip * (1.0 - g)


@register_memory("ffm", "memoroid")
class FFM(MemoroidStack):
    """Fast and Forgetful Memory. Carry per layer: ``(trace [B, m, c] complex64, steps [B] int32)``.

    Fields (from :class:`FFMCell`): ``trace_size`` (m), ``context_size`` (c), ``min_period`` /
    ``max_period`` (frequency init), plus ``num_layers`` and ``scan`` from :class:`MemoroidStack`.
    """

    cell = FFMCell
