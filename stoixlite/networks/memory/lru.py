"""Linear Recurrent Unit (LRU) memoroid.

Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu, De (2023), "Resurrecting Recurrent Neural
Networks for Long Sequences", ICML 2023, https://arxiv.org/abs/2303.06349.

Per layer, with state size N (default ``hidden_size``)::

    lambda = exp(-exp(nu_log) + i exp(theta_log))          stable exponential parameterisation
    gamma  = exp(gamma_log), initialised to sqrt(1 - |lambda|^2)        (gamma normalisation)
    h_t    = lambda * h_{t-1} + gamma * (B x_t)            h in C^N, B complex [N, F]
    y_t    = gelu(Re(C h_t) + D x_t)                       C complex [H, N]

``|lambda|`` is initialised uniformly on the ring ``[r_min, r_max]`` and its phase uniformly in
``[0, max_phase]``; ``B`` and ``C`` use the paper's scaled normal inits. ``D`` is diagonal when
F == H (the paper) and a Dense projection otherwise. The GELU stands in for the paper's
nonlinear block after the recurrence (a GLU/MLP in the LRU block).

Monoid: the diagonal linear recurrence (:func:`~stoixlite.networks.memory.scan.
linear_recurrence_combine`), elements ``(lambda, gamma * B x_t)``, identity ``(1, 0)``.
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
from stoixlite.networks.memory.scan import linear_recurrence_combine, linear_recurrence_identity

Array = jax.Array
LinState = tuple[Array, Array]  # (cumulative lambda, h), both [..., N] complex64


def lru_lambda_init(r_min: float, r_max: float, max_phase: float):
    """Init of the stacked ``[nu_log, theta_log, gamma_log]`` parameters, shape ``[3, N]``."""

    def init(key: Array, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
        n = shape[1]
        k1, k2 = jax.random.split(key)
        u1 = jax.random.uniform(k1, (n,))
        u2 = jax.random.uniform(k2, (n,))
        nu_log = jnp.log(-0.5 * jnp.log(u1 * (r_max**2 - r_min**2) + r_min**2))
        theta_log = jnp.log(max_phase * u2 + 1e-8)
        mod = jnp.exp(-jnp.exp(nu_log))
        gamma_log = jnp.log(jnp.sqrt(1.0 - mod**2))
        return jnp.stack([nu_log, theta_log, gamma_log]).astype(dtype)

    return init


class ComplexDense(nn.Module):
    """``x -> (W_re + i W_im) x``, no bias; each part normal, ``std = scale / sqrt(fan_in)``."""

    features: int
    scale: float = 1.0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        init = nn.initializers.variance_scaling(self.scale**2, "fan_in", "normal")
        re = Dense(self.features, use_bias=False, kernel_init=init, name="re")(x)
        im = Dense(self.features, use_bias=False, kernel_init=init, name="im")(x)
        return jax.lax.complex(re, im)


class RealPart(nn.Module):
    """``h -> Re(C h) + bias`` for complex ``h``, ``C`` (one real matmul on ``[Re h, -Im h]``)."""

    features: int

    @nn.compact
    def __call__(self, h: Array) -> Array:
        init = nn.initializers.variance_scaling(2.0, "fan_in", "normal")  # std 1/sqrt(N) per part
        return Dense(self.features, kernel_init=init)(jnp.concatenate([h.real, -h.imag], -1))


class Feedthrough(nn.Module):
    """``D x``: diagonal when F == H (as in LRU/S5), a Dense projection otherwise."""

    features: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        if x.shape[-1] == self.features:
            d = self.param("diag", nn.initializers.normal(1.0), (self.features,))
            return x * d
        return Dense(self.features, use_bias=False, name="proj")(x)


class DiagonalCell(MemoroidCell):
    """A complex diagonal linear recurrence ``h_t = lambda_t * h_{t-1} + u_t`` of N states, read
    out as ``gelu(Re(C h_t) + D x_t)``: the part LRU and S5 share (they differ in how they
    parameterise ``lambda_t`` and ``u_t``). Subclasses create ``self.C`` (:class:`RealPart`) and
    ``self.D`` (:class:`Feedthrough`) in ``setup`` and define :meth:`elements`."""

    hidden_size: int
    state_size: int | None = None  # N (None: hidden_size)

    @property
    def n(self) -> int:
        """The complex state size N."""
        return self.state_size or self.hidden_size

    @nn.nowrap
    def identity(self, batch_size: int) -> LinState:
        return linear_recurrence_identity((batch_size, self.n), jnp.complex64)

    def operator(self) -> Callable[[LinState, LinState], LinState]:
        return linear_recurrence_combine

    def decay(self) -> Array:
        """``lambda [N]`` complex, the same at every step (:meth:`elements` broadcasts it)."""
        raise NotImplementedError

    def __call__(
        self, carry: LinState, x: Array, start: Array, strategy: str
    ) -> tuple[LinState, Array]:
        """The memoroid call; the sequential strategy (T > 1) runs ``h_t = lambda h_{t-1} + u_t``
        as a :func:`~stoixlite.networks.memory.decay_scan.decay_scan` with its own gradient, and
        forms the carry's cumulative ``lambda`` (``lambda^k`` after ``k`` steps of an episode,
        times the carry's own where no episode starts) after the loop; same outputs, final carry
        and gradients as the monoid scan."""
        if strategy != "sequential" or x.shape[0] == 1:
            return super().__call__(carry, x, start, strategy)
        acc0, h0 = carry
        lam = self.decay()
        _, u = self.elements(x)
        h = decay_scan(lam, u, start, h0)
        steps = steps_since_start(jnp.zeros(start.shape[1:], jnp.int32), start)
        power = jnp.exp(steps[:, None].astype(jnp.float32) * jnp.log(lam))
        acc = jnp.where(jnp.any(start, axis=0)[:, None], power, acc0 * power)
        return (acc, h[-1]), self.readout((None, h), x)

    def readout(self, states: LinState, x: Array) -> Array:
        return jax.nn.gelu(self.C(states[1]) + self.D(x))


class LRUCell(DiagonalCell):
    """One LRU layer; its fields are the model's keys (``state_size`` N: ``None`` -> H)."""

    r_min: float = 0.5
    r_max: float = 0.99
    max_phase: float = 6.283185307179586

    def setup(self) -> None:
        self.lam = self.param(
            "nu_theta_gamma_log",
            lru_lambda_init(self.r_min, self.r_max, self.max_phase),
            (3, self.n),
        )
        self.B = ComplexDense(self.n, scale=2**-0.5)  # std 1/sqrt(2F) per part
        self.C = RealPart(self.hidden_size)
        self.D = Feedthrough(self.hidden_size)

    def decay(self) -> Array:
        nu_log, theta_log, _ = self.lam
        return jnp.exp(jax.lax.complex(-jnp.exp(nu_log), jnp.exp(theta_log)))

    def elements(self, x: Array) -> LinState:
        u = self.B(x) * jnp.exp(self.lam[2])  # [T, B, N]
        return jnp.broadcast_to(self.decay(), u.shape), u


@register_memory("lru")
class LRU(MemoroidStack):
    """Linear Recurrent Unit. Carry per layer: ``(prod lambda, h)``, each ``[B, N]`` complex64.

    Fields: ``state_size`` (N; ``None`` -> ``hidden_size``), ``r_min``, ``r_max``,
    ``max_phase`` (eigenvalue init), plus ``num_layers`` and ``scan``.
    """

    cell = LRUCell
