"""Mamba: a selective diagonal state space memory (S6) evaluated as a memoroid.

Gu and Dao (2023), "Mamba: Linear-Time Sequence Modeling with Selective State Spaces",
https://arxiv.org/abs/2312.00752 (the Mamba block, Section 3.4 and Algorithm 2).

Per layer, with inner width ``E = expand * hidden_size`` and state size ``N``::

    [x_in, z] = W_in x_t                                        each in R^E
    u_t       = silu(causal_conv(x_in)_t)                       depthwise, kernel conv_size
    Delta_t   = softplus(W_dt (W_r u_t) + b_dt)                 in R^E   (W_r: rank dt_rank)
    B_t, C_t  = W_B u_t, W_C u_t                                in R^N   (selective)
    A         = -exp(A_log)                                     [E, N], init A[e, n] = -(n + 1)
    h_t       = exp(Delta_t A) * h_{t-1} + (Delta_t u_t) B_t^T  [E, N]   (A_bar by ZOH, B_bar by
                                                                           Euler, as in the paper)
    y_t       = W_out ((h_t C_t + D * u_t) * silu(z_t))         in R^H

The decay ``exp(Delta_t A)`` and input ``Delta_t u_t B_t`` depend on the input (selectivity), and
the recurrence is the diagonal linear recurrence, so the SSM is the memoroid of
:func:`~stoixlite.networks.memory.scan.linear_recurrence_combine` with elements
``(exp(Delta_t A), Delta_t u_t B_t^T)``, evaluated by the resettable scan (associative or
sequential, ``scan``).

The causal convolution looks at the last ``conv_size`` steps of ``x_in``. Its ``conv_size - 1``
past steps are part of the carry (a window with a validity mask, :mod:`._window`), and steps of an
earlier episode read as zeros, so a call on ``T`` steps equals ``T`` one-step calls and the
rollout/replay identity holds exactly. ``conv_size = 1`` is a pointwise (no-context) convolution.

With the sequential strategy (the default on CPU) the selection and the readout run inside the
loop (:func:`selective_scan`), so the ``[T, B, E, N]`` elements are never materialised, and the
gradient is a hand-written reverse loop; the associative strategy materialises them.

Deviations from the paper: no hardware-aware fused GPU kernel; ``expand`` defaults to 1 (the
paper uses 2) and ``N`` to 16; the Mamba block's own residual/normalisation is the stack's
(``_stack.CellStack``: pre-LayerNorm residual blocks from the second layer on; the paper uses
RMSNorm).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import _window, register_memory
from stoixlite.networks.memory._common import bounded_int_errors
from stoixlite.networks.memory._stack import ScannedStack
from stoixlite.networks.memory.scan import (
    linear_recurrence_combine,
    linear_recurrence_identity,
    resettable_scan,
    resolve_strategy,
)

Array = jax.Array
ConvState = tuple[Array, Array]  # (window [B, conv_size - 1, E], valid [B, conv_size - 1] bool)
SSMState = tuple[Array, Array]  # (prod exp(Delta A), h), each [B, E, N] float32
MambaState = tuple[ConvState, SSMState]


def mamba_identity(batch_size: int, inner: int, state_size: int, conv_size: int) -> MambaState:
    """Episode-start state of one layer: an empty conv window and the SSM identity ``(1, 0)``."""
    window = jnp.zeros((batch_size, conv_size - 1, inner), jnp.float32)
    valid = jnp.zeros((batch_size, conv_size - 1), bool)
    ssm = linear_recurrence_identity((batch_size, inner, state_size), jnp.float32)
    return (window, valid), ssm


def dt_bias_init(dt_min: float, dt_max: float):
    """``b_dt = softplus^{-1}(dt)`` with ``dt`` log-uniform in ``[dt_min, dt_max]`` (the paper)."""

    def init(key: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        lo, hi = math.log(dt_min), math.log(dt_max)
        dt = jnp.exp(jax.random.uniform(key, shape, dtype, lo, hi))
        return dt + jnp.log(-jnp.expm1(-dt))

    return init


class MambaCell(nn.Module):
    """One Mamba block: ``(carry, x [T, B, F], start [T, B], strategy) -> (carry, y [T, B, H])``."""

    hidden_size: int
    inner_size: int
    state_size: int = 16
    conv_size: int = 4
    dt_rank: int = 8
    dt_min: float = 0.001
    dt_max: float = 0.1

    def setup(self) -> None:
        e, n = self.inner_size, self.state_size
        self.in_proj = Dense(2 * e, name="in_proj")
        # uniform(+-1/sqrt(conv_size)), PyTorch's Conv1d default used by the reference code
        conv_init = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform", 0, 1)
        self.conv_kernel = self.param("conv_kernel", conv_init, (self.conv_size, e))
        self.conv_bias = self.param("conv_bias", nn.initializers.zeros_init(), (e,))
        self.dt_low = Dense(self.dt_rank, use_bias=False, name="dt_low")
        self.dt_proj = Dense(e, bias_init=dt_bias_init(self.dt_min, self.dt_max), name="dt")
        self.bc_proj = Dense(2 * n, use_bias=False, name="bc")
        self.a_log = self.param(
            "A_log", lambda k, s: jnp.log(jnp.broadcast_to(jnp.arange(1, s[1] + 1.0), s)), (e, n)
        )
        self.d = self.param("D", nn.initializers.ones_init(), (e,))
        self.out_proj = Dense(self.hidden_size, name="out_proj")

    @nn.nowrap
    def identity(self, batch_size: int) -> MambaState:
        return mamba_identity(batch_size, self.inner_size, self.state_size, self.conv_size)

    def conv(self, state: ConvState, x_in: Array, start: Array) -> tuple[ConvState, Array]:
        """Causal depthwise convolution over the episode's last ``conv_size`` steps + SiLU."""
        window, valid = state
        seen = _window.windows(window, valid, x_in, start)  # [T, B, k, E]
        u = jax.nn.silu(jnp.einsum("tbke,ke->tbe", seen, self.conv_kernel) + self.conv_bias)
        return _window.append(window, valid, x_in, start), u

    def selection(self, u: Array) -> tuple[Array, Array, Array]:
        """The input-dependent parameters ``(Delta [T, B, E], B_t [T, B, N], C_t [T, B, N])``."""
        dt = jax.nn.softplus(self.dt_proj(self.dt_low(u)))
        b, c = jnp.split(self.bc_proj(u), 2, axis=-1)
        return dt, b, c

    def __call__(
        self, carry: MambaState, x: Array, start: Array, strategy: str
    ) -> tuple[MambaState, Array]:
        conv_state, ssm_state = carry
        x_in, z = jnp.split(self.in_proj(x), 2, axis=-1)
        conv_state, u = self.conv(conv_state, x_in, start)
        dt, b, c = self.selection(u)
        a = -jnp.exp(self.a_log)
        if start.shape[0] > 1 and resolve_strategy(strategy, start.shape[0]) == "sequential":
            ssm_state, y = selective_scan(a, ssm_state, dt, dt * u, b, c, start)
        else:  # the memoroid: elements [T, B, E, N], prefix states, then the readout
            elems = (jnp.exp(dt[..., None] * a), (dt * u)[..., None] * b[..., None, :])
            states, ssm_state = resettable_scan(
                linear_recurrence_combine, ssm_state, elems, start, strategy
            )
            y = jnp.einsum("tben,tbn->tbe", states[1], c)
        y = y + self.d * u
        return (conv_state, ssm_state), self.out_proj(y * jax.nn.silu(z))


def selective_scan(
    a: Array, state: SSMState, dt: Array, du: Array, b: Array, c: Array, start: Array
) -> tuple[SSMState, Array]:
    """The sequential strategy with the selection and the readout inside the loop body.

    Per step: ``decay = exp(Delta_t A)`` and the input ``(Delta_t u_t) B_t^T`` (each ``[B, E, N]``)
    are formed, the memoroid step of
    :func:`~stoixlite.networks.memory.scan.linear_recurrence_combine` with its reset applied
    (``h_t = u_t`` at an episode start, else ``decay * h_{t-1} + u_t``: the values of
    :func:`~stoixlite.networks.memory.scan.resettable_scan`), and only ``y_t = h_t C_t``
    ``[B, E]`` leaves the loop, so no ``[T, B, E, N]`` tensor of elements is materialised (the
    paper's "do not materialise the expanded state", Section 3.3.2, as a CPU loop instead of a
    fused GPU kernel). The gradient is the hand-written reverse recurrence of
    :func:`_ssm_backward` (one reverse loop over the saved states; JAX's own transpose of the loop
    was 1.6x slower, docs/benchmarks.md).

    Args: ``a [E, N]``, ``state = (prod decay, h)`` each ``[B, E, N]``, ``dt`` and ``du``
    (``Delta * u``) ``[T, B, E]``, ``b`` and ``c`` ``[T, B, N]``, ``start [T, B]`` bool.
    Returns ``(final state, y [T, B, E])``.
    """
    prod, h = state
    keep = jnp.logical_not(start).astype(dt.dtype)
    h, y = _ssm(a, h, dt, du, b, c, keep)

    def prod_step(p: Array, inp: tuple[Array, Array]) -> tuple[Array, None]:
        dt_t, s_t = inp  # the monoid's first component; dropped by jit when the carry is unused
        decay = jnp.exp(dt_t[..., None] * a)
        return jnp.where(s_t[:, None, None], decay, p * decay), None

    prod, _ = jax.lax.scan(prod_step, prod, (dt, start))
    return (prod, h), y


def _ssm_loop(
    a: Array, h: Array, dt: Array, du: Array, b: Array, c: Array, keep: Array
) -> tuple[Array, tuple[Array, Array]]:
    """Forward loop: ``h_t = keep_t exp(dt_t A) h_{t-1} + du_t b_t^T``; per step ``(h_t, y_t)``."""

    def body(h: Array, inp: tuple[Array, ...]) -> tuple[Array, tuple[Array, Array]]:
        dt_t, du_t, b_t, c_t, k_t = inp
        decay = jnp.exp(dt_t[..., None] * a) * k_t[:, None, None]
        h = decay * h + du_t[..., None] * b_t[:, None, :]
        return h, (h, jnp.einsum("ben,bn->be", h, c_t))

    return jax.lax.scan(body, h, (dt, du, b, c, keep))


@jax.custom_vjp
def _ssm(
    a: Array, h0: Array, dt: Array, du: Array, b: Array, c: Array, keep: Array
) -> tuple[Array, Array]:
    """``(h_T [B, E, N], y [T, B, E])`` of the selective recurrence (``keep`` = not a start)."""
    h, (_, y) = _ssm_loop(a, h0, dt, du, b, c, keep)
    return h, y


def _ssm_forward(
    a: Array, h0: Array, dt: Array, du: Array, b: Array, c: Array, keep: Array
) -> tuple[tuple[Array, Array], tuple[Array, ...]]:
    h, (hs, y) = _ssm_loop(a, h0, dt, du, b, c, keep)
    return (h, y), (a, h0, dt, du, b, c, keep, hs)


def _ssm_backward(res: tuple[Array, ...], cotangents: tuple[Array, Array]) -> tuple[Array, ...]:
    """Reverse recurrence: ``dh_t = dy_t c_t + keep_{t+1} lambda_{t+1} dh_{t+1}`` with
    ``lambda_t = exp(dt_t A)``; from it ``dc_t = h_t^T dy_t``, ``d du_t = dh_t b_t``,
    ``d b_t = dh_t^T du_t`` and, through ``lambda_t``, ``d dt_t`` and ``dA``."""
    a, h0, dt, du, b, c, keep, hs = res
    g_h, g_y = cotangents

    def body(carry, inp):
        dh_next, da = carry
        dt_t, du_t, b_t, c_t, k_t, gy_t, t = inp
        # h_{t-1} read from the saved states in place (a shifted copy would be [T, B, E, N])
        hp_t = jnp.where(
            t == 0, h0, jax.lax.dynamic_index_in_dim(hs, jnp.maximum(t - 1, 0), 0, False)
        )
        lam = jnp.exp(dt_t[..., None] * a) * k_t[:, None, None]
        dh = dh_next + gy_t[..., None] * c_t[:, None, :]
        g_exp = dh * hp_t * lam  # d loss / d (dt_t A), [B, E, N]
        da = da + jnp.einsum("ben,be->en", g_exp, dt_t)
        grads = (
            jnp.einsum("ben,en->be", g_exp, a),
            jnp.einsum("ben,bn->be", dh, b_t),
            jnp.einsum("ben,be->bn", dh, du_t),
        )
        return (dh * lam, da), grads

    inputs = (dt, du, b, c, keep, g_y, jnp.arange(dt.shape[0]))
    (g_h0, g_a), (g_dt, g_du, g_b) = jax.lax.scan(
        body, (g_h, jnp.zeros_like(a)), inputs, reverse=True
    )
    g_c = jnp.einsum("tben,tbe->tbn", hs, g_y)  # needs no reverse state: one product over all T
    return g_a, g_h0, g_dt, g_du, g_b, g_c, jnp.zeros_like(keep)


_ssm.defvjp(_ssm_forward, _ssm_backward)


@register_memory("mamba")
class Mamba(ScannedStack):
    """Selective SSM (Mamba). Carry per layer: ``((window, valid), (prod decay, h))`` with
    ``window [B, conv_size - 1, E]``, ``valid [B, conv_size - 1]`` bool and ``h [B, E, N]``.

    Fields: ``state_size`` (N), ``expand`` (E = expand * hidden_size), ``conv_size``,
    ``dt_rank`` (``None``: ceil(hidden_size / 16)), ``dt_min``, ``dt_max`` (step-size init),
    plus ``num_layers`` and ``scan``.
    """

    state_size: int = 16
    expand: int = 1
    conv_size: int = 4
    dt_rank: int | None = None
    dt_min: float = 0.001
    dt_max: float = 0.1

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        """Impossible settings as ``(key, value, what is allowed)``, checked before compiling."""
        limit, why = _window.MAX_STACKED_STEPS, _window.STACK_LIMIT_WHY
        return bounded_int_errors(fields, {"conv_size": cls.conv_size}, limit, why)

    @nn.nowrap
    def _inner(self) -> int:
        return self.expand * self.hidden_size

    @nn.nowrap
    def make_cell(self, layer: int) -> MambaCell:
        return MambaCell(
            hidden_size=self.hidden_size,
            inner_size=self._inner(),
            state_size=self.state_size,
            conv_size=self.conv_size,
            dt_rank=self.dt_rank or math.ceil(self.hidden_size / 16),
            dt_min=self.dt_min,
            dt_max=self.dt_max,
        )

    @nn.nowrap
    def cell_identity(self, batch_size: int) -> MambaState:
        return mamba_identity(batch_size, self._inner(), self.state_size, self.conv_size)
