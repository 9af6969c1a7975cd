"""Legendre Memory Unit (Voelker, Kajic and Eliasmith 2019), a POPGym baseline.

Voelker, Kajic, Eliasmith (2019), "Legendre Memory Units: Continuous-Time Representation in
Recurrent Neural Networks", NeurIPS 2019; the "LMU" model of Morad et al. (2023), "POPGym",
ICLR 2023, https://arxiv.org/abs/2303.01859. Per step, with hidden state ``h`` in R^H and
Legendre memory ``m`` in R^M (paper eqs. 4, 6, 7)::

    u_t = e_x . x_t + e_h . h_{t-1} + e_m . m_{t-1}            in R   (the memory's one input)
    m_t = A m_{t-1} + B u_t                                   in R^M
    h_t = tanh(W_x x_t + W_h h_{t-1} + W_m m_t),   y_t = h_t   in R^H

``A`` and ``B`` are fixed (not learned): the delay system of paper eq. 2, whose memory holds the
last ``theta`` steps of ``u`` as the coefficients of ``M`` shifted Legendre polynomials::

    A[i, j] = (2i + 1) / theta * (-1 if i < j else (-1)^(i - j + 1))
    B[i]    = (2i + 1) / theta * (-1)^i

discretised by zero-order hold with a step of 1 (:func:`legendre_delay`, computed once in float64
with ``scipy.linalg.expm``). Initialisers as POPGym's baseline: ``e_x``, ``e_h`` LeCun-uniform,
``e_m`` zeros, the kernels Glorot-normal, no biases. POPGym's defaults: ``theta`` = 64 and a
memory as wide as the hidden state (256 in the paper's runs), here ``memory_size`` = 256.

The carry is ``(h [B, H], m [B, M])``, zeros at an episode start. The input projections of all T
steps are one matmul outside ``jax.lax.scan``; with T == 1 (the rollout) no loop is built.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from stoixlite.networks.dense import matmul
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import check_inputs

Array = jax.Array
State = tuple[Array, Array]  # (h [B, hidden_size], m [B, memory_size])

_encoder_init = nn.initializers.lecun_uniform()
_kernel_init = nn.initializers.variance_scaling(1.0, "fan_avg", "normal")  # Glorot normal


@functools.cache
def legendre_delay(memory_size: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """The LMU's discrete ``A [M, M]`` and ``B [M]`` (float32): paper eq. 2 discretised by
    zero-order hold with a step of 1, ``expm([[A, B], [0, 0]]) = [[A_d, B_d], [0, 1]]``."""
    m = memory_size
    q = np.arange(m, dtype=np.float64)
    r = (2.0 * q + 1.0) / theta
    i, j = np.meshgrid(q, q, indexing="ij")
    system = np.zeros((m + 1, m + 1))
    system[:m, :m] = r[:, None] * np.where(i < j, -1.0, (-1.0) ** (i - j + 1))
    system[:m, m] = r * (-1.0) ** q
    discrete = scipy.linalg.expm(system)
    return discrete[:m, :m].astype(np.float32), discrete[:m, m].astype(np.float32)


@register_memory("lmu")
class LMU(nn.Module):
    """Legendre Memory Unit. Carry: ``(h [B, hidden_size], m [B, memory_size])``, zeros at an
    episode start.

    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``, ``y`` the
    hidden state after every step; where ``start[t, b]`` the state is reset to zeros before
    ``x[t, b]`` is consumed. ``theta``: the window, in steps, that the memory represents;
    ``memory_size``: the number of Legendre coefficients ``M``.
    """

    hidden_size: int
    memory_size: int = 256
    theta: float = 64.0
    unroll: int = 1

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> State:
        return (
            jnp.zeros((batch_size, self.hidden_size), jnp.float32),
            jnp.zeros((batch_size, self.memory_size), jnp.float32),
        )

    @nn.compact
    def __call__(self, carry: State, inputs: tuple[Array, Array]) -> tuple[State, Array]:
        x, start = inputs
        check_inputs(x, start)
        H, M, F = self.hidden_size, self.memory_size, x.shape[-1]
        e_x = self.param("input_encoder", _encoder_init, (F, 1))
        e_h = self.param("hidden_encoder", _encoder_init, (H, 1))
        e_m = self.param("memory_encoder", nn.initializers.zeros_init(), (M, 1))
        w_x = self.param("input_kernel", _kernel_init, (F, H))
        w_h = self.param("hidden_kernel", _kernel_init, (H, H))
        w_m = self.param("memory_kernel", _kernel_init, (M, H))
        a, b = (jnp.asarray(v) for v in legendre_delay(M, float(self.theta)))
        # h_{t-1} and m_{t-1} each feed two products: one matmul each inside the loop.
        hk = jnp.concatenate([w_h, e_h], axis=1)  # [H, H + 1]
        mk = jnp.concatenate([a.T, e_m], axis=1)  # [M, M + 1]
        xp = matmul(x, jnp.concatenate([w_x, e_x], axis=1))  # [T, B, H + 1], all steps at once

        def step(state: State, inp: tuple[Array, Array]) -> tuple[State, Array]:
            xt, st = inp
            h, m = (jnp.where(st[:, None], 0.0, v) for v in state)
            hh, mm = h @ hk, m @ mk
            u = xt[:, H:] + hh[:, H:] + mm[:, M:]  # [B, 1]
            m = mm[:, :M] + u * b
            h = jnp.tanh(xt[:, :H] + hh[:, :H] + m @ w_m)
            return (h, m), h

        if x.shape[0] == 1:  # rollout path: one step, no loop
            state, h = step(carry, (xp[0], start[0]))
            return state, h[None]
        return jax.lax.scan(step, carry, (xp, start), unroll=self.unroll)
