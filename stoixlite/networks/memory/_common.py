"""Small helpers shared by the memory models (no model is registered here)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen import initializers

Array = jax.Array
Initializer = Callable[..., Array]

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "elu": jax.nn.elu,
    "leaky_relu": jax.nn.leaky_relu,
    "identity": lambda x: x,
}


def get_activation(name: str) -> Callable[[Array], Array]:
    """Activation function by name (raises ``KeyError`` listing the choices)."""
    if name not in ACTIVATIONS:
        raise KeyError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def stacked_init(base: Initializer, num_blocks: int) -> Initializer:
    """Initialiser for a ``[in, num_blocks * out]`` kernel made of independently initialised blocks.

    A fused recurrent kernel ``[H, k*H]`` initialised with ``orthogonal()`` as a whole would only
    have orthogonal rows; per-gate blocks initialised separately match ``flax.linen.GRUCell``
    (one orthogonal ``[H, H]`` matrix per gate).
    """

    def init(key: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        *lead, cols = shape
        if cols % num_blocks:
            raise ValueError(f"{cols} columns do not split into {num_blocks} blocks")
        keys = jax.random.split(key, num_blocks)
        block = (*lead, cols // num_blocks)
        return jnp.concatenate([base(k, block, dtype) for k in keys], axis=-1)

    return init


def gate_bias_init(blocks: tuple[str, ...], chrono_period: float) -> Initializer:
    """Bias ``[k * H]`` of ``k`` fused gates named ``blocks``: zeros, or chrono init.

    Chrono initialisation (Tallec and Ollivier 2018, "Can recurrent neural networks warp
    time?", ICLR): with ``chrono_period = T > 1`` the keep gate's bias (block ``"keep"``) is
    ``log(u)``, ``u ~ U(1, T - 1)``, so unit j starts with a retention time of about ``u_j``
    steps instead of ~2, and the write gate (block ``"write"``, if any) gets ``-log(u)``.
    ``chrono_period = 0`` gives zeros (the ``flax.linen`` cells' init).
    """

    def init(key: Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Array:
        bias = jnp.zeros(shape, dtype)
        if chrono_period <= 0:
            return bias
        h = shape[0] // len(blocks)
        u = jax.random.uniform(key, (h,), dtype, 1.0, max(chrono_period - 1.0, 1.0 + 1e-6))
        for name, sign in (("keep", 1.0), ("write", -1.0)):
            if name in blocks:
                i = blocks.index(name)
                bias = bias.at[i * h : (i + 1) * h].set(sign * jnp.log(u))
        return bias

    return init


default_kernel_init = initializers.lecun_normal()
default_recurrent_init = initializers.orthogonal()
# PyTorch's default initialisation of ``nn.Linear`` / ``nn.Conv1d`` weights (uniform in
# ``+-1/sqrt(fan_in)``), which POPGym's baseline memory cores keep.
torch_default_init = initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def bounded(w: Array, low: float, high: float) -> Array:
    """``clip(w, low, high)`` with the gradient of a parameter projected back into the bounds.

    POPGym clamps some parameters in place before every forward pass (IndRNN's recurrent weights,
    the positional embedding's strength), outside autograd: the gradient is taken at the clamped
    value and the stored parameter never leaves the bounds by more than one update. A pure module
    cannot change its parameters, so it uses the clamped value, and the gradient passes where
    ``w`` is inside ``[low, high]`` or where a descent step moves it back inside; it is zero where
    it would push an out-of-bounds ``w`` further out. Inside the bounds this is plain ``clip``.
    """
    return jnp.clip(w, low, high)


def _bounded_fwd(w: Array, low: float, high: float) -> tuple[Array, Array]:
    return jnp.clip(w, low, high), w


def _bounded_bwd(low: float, high: float, w: Array, g: Array) -> tuple[Array]:
    inside = (w >= low) & (w <= high)
    inward = ((w > high) & (g > 0)) | ((w < low) & (g < 0))  # descent moves w by -g
    return (jnp.where(inside | inward, g, jnp.zeros_like(g)),)


bounded.defvjp(_bounded_fwd, _bounded_bwd)


def check_inputs(x: Array, start: Array) -> None:
    """Shape checks for the time-major contract ``x [T, B, F]``, ``start [T, B]``."""
    if x.ndim != 3:
        raise ValueError(f"memory input x must be time-major [T, B, F], got shape {x.shape}")
    if start.shape != x.shape[:2]:
        raise ValueError(f"start flags must have shape [T, B] = {x.shape[:2]}, got {start.shape}")


def heads_errors(fields: dict[str, Any], default_heads: int) -> list[tuple[str, Any, str]]:
    """Config check of multi-head models: ``num_heads`` a positive divisor of ``hidden_size``
    (as ``(key, value, allowed)`` triples for ``config_errors``)."""
    heads, width = fields.get("num_heads", default_heads), fields.get("hidden_size")
    if not (isinstance(heads, int) and not isinstance(heads, bool) and heads >= 1):
        return [("num_heads", heads, "must be a positive integer")]
    if isinstance(width, int) and width % heads:
        return [("num_heads", heads, f"must divide network.hidden_size={width}")]
    return []


def bounded_int_errors(
    fields: dict[str, Any], defaults: dict[str, Any], high: int, why: str = ""
) -> list[tuple[str, Any, str]]:
    """Config check of a model's own upper bounds: each key of ``defaults`` (value from
    ``fields`` if given) is an int in ``[1, high]`` (``why`` explains the bound in the message).
    Positivity alone is the config parser's generic rule for every memory key
    (``stoixlite/networks/memory/rules.py``), not repeated by the models."""
    errors = []
    for key, default in defaults.items():
        value = fields.get(key, default)
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high
        if not ok:
            errors.append((key, value, f"must be an integer in [1, {high}]{why}"))
    return errors


class ZeroStateRNN(nn.Module):
    """Base of the single-vector RNNs (GRU, Elman): carry ``h [B, hidden_size]``, zeros at an
    episode start; ``unroll`` is the ``lax.scan`` unroll of the recurrence."""

    hidden_size: int
    unroll: int = 1

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Array:
        return jnp.zeros((batch_size, self.hidden_size), jnp.float32)
