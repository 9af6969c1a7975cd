"""Temporal convolution over the last frames of the episode: POPGym's "frame convolution".

The "Temporal Convolution Network" baseline of Morad et al. (2023), "POPGym", ICLR 2023,
https://arxiv.org/abs/2303.01859, after Bai, Kolter, Koltun (2018), "An Empirical Evaluation of
Generic Convolutional and Recurrent Networks for Sequence Modeling", arXiv:1803.01271: one causal
convolution with a kernel of ``k = frames`` steps over the embedded frames, which carry a
sinusoidal encoding of the step's position in the episode::

    n_t = steps since the episode start (0 on the first step)
    f_t = (1 - s) W_p x_t + s PE(n_t)                      in R^H, s = clip(strength, 0, 1)
    y_t = b + sum_{i=0}^{k-1} W_i f_{t-i}                 in R^H (no activation, as POPGym)

Frames before the episode start (or before the first step) are zeros. ``PE`` is the sinusoidal
encoding of :mod:`.positional_mlp` with POPGym's wavelength base ``max_period`` = 1024;
``strength`` is POPGym's learned embedding scale (init 0.5, kept in ``[0, 1]``:
:func:`~stoixlite.networks.memory._common.bounded`). The convolution kernel has PyTorch's default
initialisation (POPGym's ``nn.Conv1d``), POPGym's kernel is 4 steps.

The carry is the window of the ``k - 1`` previous frames ``f`` (with a validity mask,
:mod:`._window`, cleared at an episode start) and the step counter ``n``, so a call on ``T`` steps
equals ``T`` one-step calls.

Deviations from POPGym: the embedding is added inside the memory, to the frame's projection
``W_p x_t`` (POPGym adds it to the observation's embedding before its pre-processing layer), and
frames are projected to ``hidden_size`` first so that the carry has a fixed size independent of the
input width (as :mod:`.framestack`); POPGym's convolution maps its 128-wide inputs to the memory
width directly. The window is cleared at an episode start; POPGym trained on zero-padded episodes.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import _window, register_memory
from stoixlite.networks.memory._common import (
    bounded,
    bounded_int_errors,
    check_inputs,
    torch_default_init,
)
from stoixlite.networks.memory.positional_mlp import sinusoidal_encoding, steps_since_start

Array = jax.Array
Window = tuple[Array, Array]  # (frames [B, k - 1, H], valid [B, k - 1] bool)
State = tuple[Window, Array]  # (window, steps taken in the running episode [B] int32)


@register_memory("tcn")
class TCN(nn.Module):
    """Causal convolution over the last ``frames`` embedded frames.

    Carry: ``((frames [B, k-1, H], valid [B, k-1]), n [B] int32)``.
    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``.
    """

    hidden_size: int
    frames: int = 4
    max_period: float = 1024.0

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        limit, why = _window.MAX_STACKED_STEPS, _window.STACK_LIMIT_WHY
        return bounded_int_errors(fields, {"frames": cls.frames}, limit, why)

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> State:
        past = self.frames - 1
        return (
            (
                jnp.zeros((batch_size, past, self.hidden_size), jnp.float32),
                jnp.zeros((batch_size, past), bool),
            ),
            jnp.zeros((batch_size,), jnp.int32),
        )

    @nn.compact
    def __call__(self, carry: State, inputs: tuple[Array, Array]) -> tuple[State, Array]:
        x, start = inputs
        check_inputs(x, start)
        (window, valid), count = carry
        H = self.hidden_size
        n = steps_since_start(count, start)  # [T, B]
        strength = self.param("embedding_strength", nn.initializers.constant(0.5), ())
        s = bounded(strength, 0.0, 1.0)
        p = Dense(H, use_bias=False, name="frame")(x)  # [T, B, H]
        f = (1.0 - s) * p + s * sinusoidal_encoding(n, H, self.max_period)
        stack = _window.windows(window, valid, f, start)  # [T, B, k, H], oldest first
        stack = stack.reshape(*x.shape[:2], self.frames * H)
        y = Dense(H, kernel_init=torch_default_init, name="conv")(stack)
        return (_window.append(window, valid, f, start), n[-1] + 1), y
