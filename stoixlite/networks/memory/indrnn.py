"""Independently recurrent neural network (Li et al. 2018), a POPGym baseline.

Li, Li, Cook, Zhu, Gao (2018), "Independently Recurrent Neural Network (IndRNN): Building a Longer
and Deeper RNN", CVPR 2018; the "IndRNN" model of Morad et al. (2023), "POPGym", ICLR 2023,
https://arxiv.org/abs/2303.01859. Each layer's units recur on themselves only (an elementwise
recurrent weight ``u``), layers are stacked (POPGym: two)::

    h^0_t = x_t
    h^l_t = relu(W_l h^{l-1}_t + b_l + u_l * h^l_{t-1})      in R^H,  l = 1 .. num_layers
    y_t   = h^L_t

As in POPGym's baseline, the recurrent weights are kept in ``[-c, c]`` with
``c = 2^(1 / max_len)`` (Li et al.'s bound for a signal that may grow at most 2x over
``max_len`` steps; POPGym's ``max_len`` is its 1024-step BPTT length), and initialised
``u ~ U(recurrent_init_min, 1)`` (POPGym: ``U(0, 1)``), ``b ~ U(0, bias_max)`` (POPGym:
``bias_max`` 1; 0 gives Li et al.'s zeros), the input kernels with PyTorch's default (uniform
in ``+-1/sqrt(fan_in)``). A positive bias makes each ReLU unit accumulate towards
``b / (1 - u)``: with POPGym's U(0, 1) the state at initialisation grows with the episode (on
higher_lower, about 300 after 100 steps), which ``bias_max: 0`` avoids
(configs/env_network/popgym/, docs/popgym_baselines.md). A unit keeps a fraction ``u^k`` of
what it took in ``k`` steps earlier: from ``U(0, 1)`` almost no unit holds an input for
hundreds of steps at the start, while ``recurrent_init_min`` close to 1 starts every unit as a
long memory (``0.99``: at least ``0.99^100 = 0.37`` after 100 steps).

POPGym clamps the stored weights in place before each forward pass; here the
forward pass uses the clamped weights and their gradient is projected into the bounds
(:func:`~stoixlite.networks.memory._common.bounded`), so an update never pushes a weight at the
bound further out. POPGym's two biases per layer (the input layer's and ``b``) are one here.

The carry is one ``h [B, H]`` per layer, zeros at an episode start. Layer by layer, the input
projection of all T steps is one matmul and the recurrence an elementwise ``jax.lax.scan``; with
T == 1 (the rollout) no loop is built.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import bounded, check_inputs, torch_default_init

Array = jax.Array


def recurrent_bound(max_len: int) -> float:
    """The largest magnitude ``2^(1 / max_len)`` of an IndRNN recurrent weight."""
    return 2.0 ** (1.0 / max_len)


def recurrent_init(low: float) -> nn.initializers.Initializer:
    """``U(low, 1)``; at ``low == 0`` the same draws as flax's ``uniform(1.0)`` (POPGym's
    ``U(0, 1)``, this model's initialiser before ``recurrent_init_min`` existed; tested)."""

    def init(key: Array, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, dtype, minval=low, maxval=1.0)

    return init


@register_memory("indrnn")
class IndRNN(nn.Module):
    """IndRNN stack. Carry: tuple of ``num_layers`` states ``h [B, hidden_size]``.

    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``, ``y`` the
    last layer's state after every step; where ``start[t, b]`` every layer's state is reset to
    zeros before ``x[t, b]`` is consumed.
    """

    hidden_size: int
    num_layers: int = 2
    max_len: int = 1024
    bias_max: float = 1.0  # biases initialised U(0, bias_max)
    recurrent_init_min: float = 0.0  # recurrent weights initialised U(recurrent_init_min, 1)
    unroll: int = 1

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> tuple[Array, ...]:
        return tuple(
            jnp.zeros((batch_size, self.hidden_size), jnp.float32) for _ in range(self.num_layers)
        )

    @nn.compact
    def __call__(
        self, carry: tuple[Array, ...], inputs: tuple[Array, Array]
    ) -> tuple[tuple[Array, ...], Array]:
        x, start = inputs
        check_inputs(x, start)
        if len(carry) != self.num_layers:
            raise ValueError(f"carry has {len(carry)} layers, model has {self.num_layers}")
        H, c = self.hidden_size, recurrent_bound(self.max_len)
        u_init = recurrent_init(self.recurrent_init_min)

        def step(u: Array, h: Array, inp: tuple[Array, Array]) -> tuple[Array, Array]:
            at, st = inp
            h = jax.nn.relu(at + u * jnp.where(st[:, None], 0.0, h))
            return h, h

        y, new_carry = x, []
        for layer in range(self.num_layers):
            w = Dense(H, use_bias=False, kernel_init=torch_default_init, name=f"input_{layer}")
            b = self.param(f"bias_{layer}", nn.initializers.uniform(self.bias_max), (H,))
            u = bounded(self.param(f"recurrent_{layer}", u_init, (H,)), -c, c)
            a = w(y) + b  # [T, B, H]
            if x.shape[0] == 1:  # rollout path: one step, no loop
                h, y0 = step(u, carry[layer], (a[0], start[0]))
                y = y0[None]
            else:
                layer_step = functools.partial(step, u)
                h, y = jax.lax.scan(layer_step, carry[layer], (a, start), unroll=self.unroll)
            new_carry.append(h)
        return tuple(new_carry), y
