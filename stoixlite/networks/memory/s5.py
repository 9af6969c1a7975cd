"""Simplified structured state space sequence model (S5) memoroid.

Smith, Warrington, Linderman (2023), "Simplified State Space Layers for Sequence Modeling",
ICLR 2023, https://arxiv.org/abs/2208.04933.

Per layer, a diagonal complex continuous-time SSM ``h' = Lambda h + B x``, ``y = Re(C h) + D x``
with a learned per-state step size ``Delta``, discretised by zero-order hold::

    Lambda_bar = exp(Lambda * Delta)
    B_bar      = (Lambda_bar - 1) / Lambda * B
    h_t        = Lambda_bar * h_{t-1} + B_bar x_t
    y_t        = gelu(Re(C h_t) + D x_t)

``Lambda = -exp(log_neg_real) + i imag`` (real part kept negative: stable for any parameters),
initialised S4D-Lin (``-1/2 + i pi n``), a simplification of S5's HiPPO-N initialisation.
``log Delta`` is initialised log-uniformly in ``[dt_min, dt_max]``. ``D`` as in LRU.

S5 vs S6: S5 is linear time-invariant: ``Lambda_bar`` and ``B_bar`` do not depend on the input, so
the elements' decays are the same at every step. S6 (Mamba; Gu and Dao 2023) is *selective*:
``Delta_t``, ``B_t`` and ``C_t`` are functions of ``x_t``, so ``Lambda_bar_t = exp(Lambda
Delta_t)`` varies per step. Both are the same monoid (diagonal linear recurrence, elements
``(Lambda_bar_t, B_bar_t x_t)``), so S6 fits the same scan; it is not implemented here (minGRU is
this package's input-dependent-decay memoroid).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._memoroid import MemoroidStack
from stoixlite.networks.memory.lru import ComplexDense, DiagonalCell, Feedthrough, RealPart

Array = jax.Array
LinState = tuple[Array, Array]


class S5Cell(DiagonalCell):
    """One S5 layer; its fields are the model's keys (``state_size`` N: ``None`` -> H)."""

    dt_min: float = 0.001
    dt_max: float = 0.1

    def setup(self) -> None:
        n = self.n
        self.log_neg_real = self.param(
            "log_neg_real", nn.initializers.constant(math.log(0.5)), (n,)
        )
        self.imag = self.param(
            "imag", lambda k, s: jnp.pi * jnp.arange(s[0], dtype=jnp.float32), (n,)
        )
        lo, hi = math.log(self.dt_min), math.log(self.dt_max)
        self.log_dt = self.param(
            "log_dt", lambda k, s: jax.random.uniform(k, s, minval=lo, maxval=hi), (n,)
        )
        self.B = ComplexDense(n, scale=2**-0.5)
        self.C = RealPart(self.hidden_size)
        self.D = Feedthrough(self.hidden_size)

    def _discretise(self) -> tuple[Array, Array]:
        lam = jax.lax.complex(-jnp.exp(self.log_neg_real), self.imag)
        lam_bar = jnp.exp(lam * jnp.exp(self.log_dt))
        return lam_bar, (lam_bar - 1.0) / lam

    def decay(self) -> Array:
        return self._discretise()[0]

    def elements(self, x: Array) -> LinState:
        lam_bar, b_scale = self._discretise()
        u = self.B(x) * b_scale
        return jnp.broadcast_to(lam_bar, u.shape), u


@register_memory("s5")
class S5(MemoroidStack):
    """S5 (diagonal SSM, ZOH). Carry per layer: ``(prod Lambda_bar, h)``, each ``[B, N]`` complex64.

    Fields: ``state_size`` (N; ``None`` -> ``hidden_size``), ``dt_min``, ``dt_max``, plus
    ``num_layers`` and ``scan``.
    """

    cell = S5Cell
