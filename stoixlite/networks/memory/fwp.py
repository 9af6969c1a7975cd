"""Fast weight programmer (FWP), as the POPGym paper ran it.

Schlag, Irie, Schmidhuber (2021), "Linear Transformers Are Secretly Fast Weight Programmers",
ICML 2021, https://arxiv.org/abs/2102.11174; the POPGym baseline of Morad et al. (2023),
"POPGym: Benchmarking Partially Observable Reinforcement Learning", ICLR 2023: a single layer
of additive fast weights (no delta rule), ReLU in place of the paper's DPFP feature map, the
sum normalisation of keys and queries, and a sinusoidal encoding of the episode step added to
the input with a learned strength.

This is popgym's FWP as published with the paper (popgym before May 2023). In May 2023 popgym
changed the block (a two-layer ReLU perceptron after the read-out, a linear shortcut from the
input, and the read-out below transposed to ``F_t q_t``) and added a deep variant; those
changes are *not* implemented here.

Per step, with ``d = key_size`` (POPGym: ``round(sqrt(hidden_size))``, 16 at its width 256)::

    n_t  = steps since the episode start (0 on its first step)
    e_t  = (1 - s) x_t + s PE(n_t),      s = clip(strength, 0, 1), strength init 1/2
    x~_t = LayerNorm(e_t)
    k_t  = relu(W_k x~_t) / (1e-5 + sum relu(W_k x~_t))        [d]   (sum normalisation)
    q_t  = relu(W_q x~_t) / (1e-5 + sum relu(W_q x~_t))        [d]
    v_t  = W_v x~_t                                            [d]   (W_k, W_q, W_v: no bias)
    F_t  = F_{t-1} + v_t k_t^T                                 [d, d] fast weights
    y_t  = W_o (F_t^T q_t) + b_o                               [hidden_size]

``PE`` is the sinusoidal encoding of the positional MLP (``max_period`` 1024 as popgym's,
:func:`~stoixlite.networks.memory.positional_mlp.sinusoidal_encoding`) over the input's width.
The read-out ``F_t^T q_t = sum_s k_s (v_s . q_t)`` is popgym's published one: the query is
matched against the written values and returns the keys.

Carry: ``(F [B, d, d], n [B] int32)``; at an episode start ``F = 0`` and ``n = 0``. The fast
weights are the additive monoid's resettable scan
(:func:`~stoixlite.networks.memory.scan.resettable_scan`, ``scan`` picks the strategy); the
rollout (T == 1) is one step.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import check_inputs
from stoixlite.networks.memory.positional_mlp import sinusoidal_encoding, steps_since_start
from stoixlite.networks.memory.scan import resettable_scan

Array = jax.Array
Carry = tuple[Array, Array]  # (fast weights [B, d, d] float32, episode step counter [B] int32)

SUM_NORM_EPS = 1e-5  # popgym's sum normalisation: u / (1e-5 + sum u)
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, as popgym's


def sum_normalise(u: Array) -> Array:
    """``u / (1e-5 + sum(u))`` over the last axis (``u >= 0`` after the ReLU)."""
    return u / (SUM_NORM_EPS + jnp.sum(u, axis=-1, keepdims=True))


def _add(a: Array, b: Array) -> Array:
    return a + b


@register_memory("fwp")
class FWP(nn.Module):
    """Fast weight programmer. Carry: ``(F [B, key_size, key_size], n [B] int32)``.

    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``; where
    ``start[t, b]`` the fast weights and the step counter restart from zero before ``x[t, b]``.
    Fields: ``key_size`` (d), ``max_period`` (of the positional encoding), ``scan``.
    """

    hidden_size: int
    key_size: int = 16
    max_period: float = 1024.0
    scan: str = "auto"  # auto | associative | sequential (see scan.resolve_strategy)

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Carry:
        d = self.key_size
        return jnp.zeros((batch_size, d, d), jnp.float32), jnp.zeros((batch_size,), jnp.int32)

    @nn.compact
    def __call__(self, carry: Carry, inputs: tuple[Array, Array]) -> tuple[Carry, Array]:
        x, start = inputs
        check_inputs(x, start)
        fast, count = carry
        d = self.key_size
        n = steps_since_start(count, start)  # [T, B]
        strength = jnp.clip(
            self.param("embedding_strength", nn.initializers.constant(0.5), ()), 0, 1
        )
        pe = sinusoidal_encoding(n, x.shape[-1], self.max_period)
        h = nn.LayerNorm(epsilon=LAYER_NORM_EPS, name="norm")((1.0 - strength) * x + strength * pe)
        k = sum_normalise(jax.nn.relu(Dense(d, use_bias=False, name="key")(h)))
        q = sum_normalise(jax.nn.relu(Dense(d, use_bias=False, name="query")(h)))
        v = Dense(d, use_bias=False, name="value")(h)
        writes = v[..., :, None] * k[..., None, :]  # [T, B, d, d]: v_t k_t^T
        states, final = resettable_scan(_add, fast, writes, start, self.scan)
        read = jnp.einsum("tbij,tbi->tbj", states, q)  # F_t^T q_t
        y = Dense(self.hidden_size, name="out")(read)
        return (final, n[-1] + 1), y
