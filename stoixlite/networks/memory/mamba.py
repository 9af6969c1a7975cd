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

Deviations from the paper: no hardware-aware fused kernel (the prefix states ``[T, B, E, N]``
are materialised); ``expand`` defaults to 1 (the paper uses 2) and ``N`` to 16; the Mamba
block's own residual/normalisation is the stack's (``_stack.CellStack``: pre-LayerNorm residual
blocks from the second layer on; the paper uses RMSNorm).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.memory import _window, register_memory
from stoixlite.networks.memory._common import positive_int_errors
from stoixlite.networks.memory._stack import ScannedStack
from stoixlite.networks.memory.scan import (
    linear_recurrence_combine,
    linear_recurrence_identity,
    resettable_scan,
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
        self.in_proj = nn.Dense(2 * e, name="in_proj")
        # uniform(+-1/sqrt(conv_size)), PyTorch's Conv1d default used by the reference code
        conv_init = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform", 0, 1)
        self.conv_kernel = self.param("conv_kernel", conv_init, (self.conv_size, e))
        self.conv_bias = self.param("conv_bias", nn.initializers.zeros_init(), (e,))
        self.dt_low = nn.Dense(self.dt_rank, use_bias=False, name="dt_low")
        self.dt_proj = nn.Dense(e, bias_init=dt_bias_init(self.dt_min, self.dt_max), name="dt")
        self.bc_proj = nn.Dense(2 * n, use_bias=False, name="bc")
        self.a_log = self.param(
            "A_log", lambda k, s: jnp.log(jnp.broadcast_to(jnp.arange(1, s[1] + 1.0), s)), (e, n)
        )
        self.d = self.param("D", nn.initializers.ones_init(), (e,))
        self.out_proj = nn.Dense(self.hidden_size, name="out_proj")

    @nn.nowrap
    def identity(self, batch_size: int) -> MambaState:
        return mamba_identity(batch_size, self.inner_size, self.state_size, self.conv_size)

    def conv(self, state: ConvState, x_in: Array, start: Array) -> tuple[ConvState, Array]:
        """Causal depthwise convolution over the episode's last ``conv_size`` steps + SiLU."""
        window, valid = state
        seen = _window.windows(window, valid, x_in, start)  # [T, B, k, E]
        u = jax.nn.silu(jnp.einsum("tbke,ke->tbe", seen, self.conv_kernel) + self.conv_bias)
        return _window.append(window, valid, x_in, start), u

    def elements(self, u: Array) -> tuple[tuple[Array, Array], Array]:
        """SSM elements ``(exp(Delta A), Delta u B^T)`` ``[T, B, E, N]`` and ``C_t [T, B, N]``."""
        dt = jax.nn.softplus(self.dt_proj(self.dt_low(u)))  # [T, B, E]
        b, c = jnp.split(self.bc_proj(u), 2, axis=-1)
        decay = jnp.exp(dt[..., None] * -jnp.exp(self.a_log))
        return (decay, (dt * u)[..., None] * b[..., None, :]), c

    def __call__(
        self, carry: MambaState, x: Array, start: Array, strategy: str
    ) -> tuple[MambaState, Array]:
        conv_state, ssm_state = carry
        x_in, z = jnp.split(self.in_proj(x), 2, axis=-1)
        conv_state, u = self.conv(conv_state, x_in, start)
        elems, c = self.elements(u)
        states, ssm_state = resettable_scan(
            linear_recurrence_combine, ssm_state, elems, start, strategy
        )
        y = jnp.einsum("tben,tbn->tbe", states[1], c) + self.d * u
        return (conv_state, ssm_state), self.out_proj(y * jax.nn.silu(z))


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
        keys = ("state_size", "expand")
        errors = positive_int_errors(fields, {k: getattr(cls, k) for k in keys})
        limit, why = _window.MAX_STACKED_STEPS, _window.STACK_LIMIT_WHY
        errors += positive_int_errors(fields, {"conv_size": cls.conv_size}, limit, why)
        rank = fields.get("dt_rank")
        if rank is not None and not (isinstance(rank, int) and rank >= 1):
            errors.append(("dt_rank", rank, "must be a positive integer or null"))
        return errors

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
