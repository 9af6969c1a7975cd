"""Frame stacking: an MLP on the last ``frames`` steps of the episode (a POPGym baseline).

Morad et al. (2023), "POPGym: Benchmarking Partially Observable Reinforcement Learning",
ICLR 2023, https://arxiv.org/abs/2303.01859 (the "Frame Stacking" model)::

    p_t = W_p x_t                                        in R^H  (per-frame projection)
    y_t = act(W_y [p_{t-k+1}, ..., p_t] + b_y)           in R^H  (k = frames)

Frames before the episode start (or before the first step) are zeros. The ``k - 1`` previous
projected frames are the carry (a window with a validity mask, :mod:`._window`), so the model
satisfies the memory contract exactly: a call on ``T`` steps equals ``T`` one-step calls.

Deviation from POPGym, which stacks raw observations: the memory receives the encoder's output
(``network.embed_size``), and frames are projected to ``hidden_size`` before stacking so that the
carry has a fixed size independent of the input width. The two linear maps compose to a linear
map of the stacked inputs, so the model class is the same MLP-on-a-stack.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import _window, register_memory
from stoixlite.networks.memory._common import bounded_int_errors, check_inputs, get_activation

Array = jax.Array
Window = tuple[Array, Array]  # (frames [B, k - 1, H], valid [B, k - 1] bool)


@register_memory("framestack")
class FrameStack(nn.Module):
    """MLP on the last ``frames`` projected inputs. Carry: ``(frames [B, k-1, H], valid [B, k-1])``.

    ``x [T, B, F]`` -> ``y [T, B, hidden_size]``.
    """

    hidden_size: int
    frames: int = 4
    activation: str = "relu"

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        limit, why = _window.MAX_STACKED_STEPS, _window.STACK_LIMIT_WHY
        return bounded_int_errors(fields, {"frames": cls.frames}, limit, why)

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Window:
        past = self.frames - 1
        return (
            jnp.zeros((batch_size, past, self.hidden_size), jnp.float32),
            jnp.zeros((batch_size, past), bool),
        )

    @nn.compact
    def __call__(self, carry: Window, inputs: tuple[Array, Array]) -> tuple[Window, Array]:
        x, start = inputs
        check_inputs(x, start)
        window, valid = carry
        p = Dense(self.hidden_size, use_bias=False, name="frame")(x)  # [T, B, H]
        stack = _window.windows(window, valid, p, start)  # [T, B, k, H]
        stack = stack.reshape(*x.shape[:2], self.frames * self.hidden_size)
        y = get_activation(self.activation)(Dense(self.hidden_size, name="mlp")(stack))
        return _window.append(window, valid, p, start), y
