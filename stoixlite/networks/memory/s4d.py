"""Diagonal structured state space model (S4D) with S4D-Lin initialisation.

Gu, Gupta, Goel, Re (2022), "On the Parameterization and Initialization of Diagonal State Space
Models", NeurIPS 2022, https://arxiv.org/abs/2206.11893. Layer structure and sizes as POPGym's
S4D baseline (Morad et al. 2023): an input map to ``H = hidden_size`` channels, one S4D layer,
GELU, and a gated linear output.

Per layer, with ``N = state_size`` (even) and ``M = N / 2`` complex modes per channel (S4D's
conjugate pairs: only one of each pair is kept, the real part below accounts for both)::

    u_t        = W_u x_t + b_u                                          [H] channels
    A_{h,m}    = -exp(a_{h,m}) + i theta_{h,m}           S4D-Lin init: -1/2 + i pi m
    dt_h       = exp(log_dt_h),          log_dt ~ U[log dt_min, log dt_max]
    A_bar      = exp(dt_h A_{h,m})                        zero-order hold
    B_bar      = (A_bar - 1) / A_{h,m} * B_{h,m}          B complex, init 1
    s_{t,h,m}  = A_bar s_{t-1,h,m} + B_bar u_{t,h}        state in C^{H x M}
    z_{t,h}    = 2 Re(sum_m C_{h,m} s_{t,h,m}) + D_h u_{t,h}
    y_t        = GLU(W_o gelu(z_t) + b_o)                 W_o [H, 2H]; GLU(a, b) = a * sigmoid(b)

``C`` is complex normal (each part variance 1/2) and ``D`` standard normal, as in the paper's
code. Each channel is its own single-input single-output SSM (``H`` of them, each of ``M``
modes): ``H * M`` complex states per layer.

Evaluation: the recurrence is the diagonal linear recurrence of LRU and S5
(:class:`~stoixlite.networks.memory.lru.DiagonalCell`), so training sequences run through the
resettable scan (``scan=sequential``: the decay scan with its own gradient; ``associative``: the
parallel prefix scan), and the rollout steps it once per call (T == 1). Episode starts reset
the state to zeros. (The paper trains through the equivalent convolution kernel; a scan also
handles the resets inside a sequence and the carry.)
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._memoroid import MemoroidStack
from stoixlite.networks.memory.lru import DiagonalCell

Array = jax.Array
LinState = tuple[Array, Array]


def _complex_normal(key: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
    """``[2, ...]``: real and imaginary parts of a complex normal of variance 1 (1/2 each)."""
    return jax.random.normal(key, shape, dtype) * math.sqrt(0.5)


def _complex_ones(key: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
    """``[2, ...]``: real part 1, imaginary part 0."""
    del key
    return jnp.zeros(shape, dtype).at[0].set(1.0)


class S4DCell(DiagonalCell):
    """One S4D layer; its fields are the model's keys (``state_size`` N: even, N / 2 modes)."""

    state_size: int = 16  # N of the paper (POPGym: round(sqrt(hidden_size) / 2) * 2 = 16 at 256)
    dt_min: float = 0.001
    dt_max: float = 0.1

    @property
    def modes(self) -> int:
        """M = N / 2 complex modes per channel."""
        return self.state_size // 2

    @property
    def n(self) -> int:
        """The complex state size per layer, ``hidden_size * M`` (flattened as ``[H * M]``)."""
        return self.hidden_size * self.modes

    def setup(self) -> None:
        h, m = self.hidden_size, self.modes
        if self.state_size < 2 or self.state_size % 2:
            raise ValueError(f"state_size must be an even integer >= 2, got {self.state_size}")
        self.log_neg_real = self.param(
            "log_neg_real", nn.initializers.constant(math.log(0.5)), (h, m)
        )
        self.imag = self.param(
            "imag",
            lambda k, s: jnp.broadcast_to(jnp.pi * jnp.arange(s[1], dtype=jnp.float32), s),
            (h, m),
        )
        lo, hi = math.log(self.dt_min), math.log(self.dt_max)
        self.log_dt = self.param(
            "log_dt", lambda k, s: jax.random.uniform(k, s, minval=lo, maxval=hi), (h,)
        )
        self.B = self.param("B", _complex_ones, (2, h, m))
        self.C = self.param("C", _complex_normal, (2, h, m))
        self.D = self.param("D", nn.initializers.normal(1.0), (h,))
        self.map = Dense(h, name="map")
        self.out = Dense(2 * h, name="out")

    def _discretise(self) -> tuple[Array, Array]:
        """``(A_bar, B_bar)``, each ``[H, M]`` complex64 (zero-order hold)."""
        a = jax.lax.complex(-jnp.exp(self.log_neg_real), self.imag)
        a_bar = jnp.exp(a * jnp.exp(self.log_dt)[:, None])
        return a_bar, (a_bar - 1.0) / a * jax.lax.complex(self.B[0], self.B[1])

    def decay(self) -> Array:
        return self._discretise()[0].reshape(-1)

    def elements(self, x: Array) -> LinState:
        a_bar, b_bar = self._discretise()
        u = self.map(x)  # [T, B, H]
        e = (u[..., None] * b_bar).reshape(*u.shape[:-1], self.n)  # [T, B, H * M]
        return jnp.broadcast_to(a_bar.reshape(-1), e.shape), e

    def readout(self, states: LinState, x: Array) -> Array:
        s = states[1].reshape(*x.shape[:-1], self.hidden_size, self.modes)
        c_re, c_im = self.C
        z = 2.0 * (jnp.sum(c_re * s.real, -1) - jnp.sum(c_im * s.imag, -1))  # 2 Re(C s)
        z = z + self.D * self.map(x)
        a, b = jnp.split(self.out(jax.nn.gelu(z)), 2, axis=-1)
        return a * jax.nn.sigmoid(b)


@register_memory("s4d")
class S4D(MemoroidStack):
    """S4D (diagonal SSM, S4D-Lin, ZOH). Carry per layer: ``(prod A_bar, s)``, each
    ``[B, hidden_size * state_size / 2]`` complex64 (zeros and ones at an episode start).

    Fields: ``state_size`` (N, even: N / 2 complex modes per channel), ``dt_min``, ``dt_max``,
    plus ``num_layers`` and ``scan``.
    """

    cell = S4DCell

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        size = fields.get("state_size", cls.state_size)
        if not (isinstance(size, int) and size >= 2 and size % 2 == 0):
            return [("state_size", size, "must be an even integer >= 2 (N / 2 complex modes)")]
        return []
