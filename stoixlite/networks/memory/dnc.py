"""Differentiable Neural Computer (DNC).

Graves, Wayne, Reynolds, et al. (2016), "Hybrid computing using a neural network with dynamic
external memory", Nature 538, https://doi.org/10.1038/nature20101 (Methods). Structure and sizes
as POPGym's DNC baseline (Morad et al. 2023): an LSTM controller of ``hidden_size`` units that
reads the input and the previous step's read vectors, ``memory_cells`` cells of ``cell_size``
floats (16 x 16), ``read_heads`` read heads (4) and one write head, and a linear output from the
controller's output and the new read vectors.

One step, with memory ``M [N, W]``, ``R`` read heads (``oneplus(u) = 1 + softplus(u)``,
``C(M, k, beta)[i] = softmax_i(beta cos(k, M[i]))``)::

    (c_t, h_t) = LSTM((c, h)_{t-1}, [x_t, r_{t-1}])                   r_{t-1}: [R * W]
    xi_t = W_xi h_t + b_xi, split into read keys k^r [R, W], read strengths oneplus [R],
           write key k^w [W], write strength oneplus, erase sigmoid [W], write vector v [W],
           free gates f sigmoid [R], allocation gate g^a and write gate g^w sigmoid,
           read modes pi softmax [R, 3] (backward, content, forward)
    u_t   = (u + w^w - u * w^w)_{t-1} * prod_i (1 - f_i w^r_{t-1,i})         usage
    a_t   = allocation(u_t): sorting the cells by usage (phi ascending),
            a[phi_j] = (1 - u[phi_j]) prod_{i<j} u[phi_i]       (u -> 1e-6 + (1 - 1e-6) u)
    w^w_t = g^w (g^a a_t + (1 - g^a) C(M_{t-1}, k^w, beta^w))
    M_t   = M_{t-1} * (1 - w^w_t e^T) + w^w_t v^T
    L_t[i, j] = (1 - w^w_t[i] - w^w_t[j]) L_{t-1}[i, j] + w^w_t[i] p_{t-1}[j],  L_t[i, i] = 0
    p_t   = (1 - sum w^w_t) p_{t-1} + w^w_t                                precedence
    w^r_{t,i} = pi_i[0] L_t^T w^r_{t-1,i} + pi_i[1] C(M_t, k^r_i, beta^r_i)
                + pi_i[2] L_t w^r_{t-1,i}
    r_{t,i} = M_t^T w^r_{t,i}
    y_t   = W_y [h_t, r_t] + b_y                                              [hidden_size]

Cosine similarities use norms ``sqrt(|u|^2 + 1e-6)`` (finite gradients at the all-zero memory
of an episode start). The sort's order carries no gradient (as in the paper); the gradient
flows through the usages it multiplies.

Carry: :class:`DNCState`, every leaf zeros at an episode start (the controller state, the read
vectors, memory, link matrix, precedence, read and write weights, usage). The carry entering a
call is projected onto the states a DNC can reach (:func:`valid_state`: the identity on them),
so that any carry of the right shapes gives finite outputs. Sequences run the
step in one ``jax.lax.scan`` (the input's share of the controller's gates is one matmul before
the loop, the output layer one after it); the rollout (T == 1) is one step, no loop.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from stoixlite.networks.dense import Dense, matmul
from stoixlite.networks.memory import register_memory
from stoixlite.networks.memory._common import (
    bounded_int_errors,
    check_inputs,
    default_kernel_init,
    default_recurrent_init,
    stacked_init,
)

Array = jax.Array

ALLOCATION_EPS = 1e-6  # usage floor of the allocation's products (as the paper's code)
NORM_EPS = 1e-6  # inside the square root of the cosine similarity's norms
MAX_CELLS = 1024  # the link matrix holds memory_cells^2 floats per env


class DNCState(NamedTuple):
    """The DNC's carry; leading batch axis ``B`` on every leaf (``H`` controller units, ``N``
    cells of ``W`` floats, ``R`` read heads)."""

    controller: tuple[Array, Array]  # LSTM (c, h), each [B, H]
    reads: Array  # [B, R, W] read vectors of the last step
    memory: Array  # [B, N, W]
    link: Array  # [B, N, N] temporal link matrix L[i, j]: cell i written after cell j
    precedence: Array  # [B, N]
    read_weights: Array  # [B, R, N]
    write_weights: Array  # [B, N]
    usage: Array  # [B, N]


class Interface(NamedTuple):
    """The controller's instructions to the memory for one step (batch axis first)."""

    read_keys: Array  # [B, R, W]
    read_strengths: Array  # [B, R]
    write_key: Array  # [B, W]
    write_strength: Array  # [B]
    erase: Array  # [B, W]
    write_vector: Array  # [B, W]
    free_gates: Array  # [B, R]
    allocation_gate: Array  # [B]
    write_gate: Array  # [B]
    read_modes: Array  # [B, R, 3]: backward, content, forward


def interface_size(cells: int, width: int, heads: int) -> int:
    """Width of the interface vector: ``R W + 3 W + 5 R + 3``."""
    del cells
    return heads * width + 3 * width + 5 * heads + 3


def oneplus(u: Array) -> Array:
    return 1.0 + jax.nn.softplus(u)


def parse_interface(xi: Array, width: int, heads: int) -> Interface:
    """Split the interface vector ``xi [B, R W + 3 W + 5 R + 3]`` and apply its activations."""
    sizes = [heads * width, heads, width, 1, width, width, heads, 1, 1, 3 * heads]
    parts = jnp.split(xi, [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)], axis=-1)
    keys, r_str, w_key, w_str, erase, vec, free, alloc, gate, modes = parts
    batch = xi.shape[0]
    return Interface(
        read_keys=keys.reshape(batch, heads, width),
        read_strengths=oneplus(r_str),
        write_key=w_key,
        write_strength=oneplus(w_str[:, 0]),
        erase=jax.nn.sigmoid(erase),
        write_vector=vec,
        free_gates=jax.nn.sigmoid(free),
        allocation_gate=jax.nn.sigmoid(alloc[:, 0]),
        write_gate=jax.nn.sigmoid(gate[:, 0]),
        read_modes=jax.nn.softmax(modes.reshape(batch, heads, 3), axis=-1),
    )


def content_weights(memory: Array, keys: Array, strengths: Array) -> Array:
    """``C(M, k, beta)``: ``memory [B, N, W]``, ``keys [B, K, W]``, ``strengths [B, K]`` ->
    ``[B, K, N]``, the softmax over cells of the sharpened cosine similarities."""
    dots = jnp.einsum("bkw,bnw->bkn", keys, memory)
    key_norm = jnp.sqrt(jnp.sum(keys * keys, -1) + NORM_EPS)  # [B, K]
    mem_norm = jnp.sqrt(jnp.sum(memory * memory, -1) + NORM_EPS)  # [B, N]
    cos = dots / (key_norm[:, :, None] * mem_norm[:, None, :])
    return jax.nn.softmax(strengths[..., None] * cos, axis=-1)


def allocation_weights(usage: Array) -> Array:
    """Allocation ``[B, N]`` from ``usage [B, N]``: the least used cells first (stable order)."""
    u = ALLOCATION_EPS + (1.0 - ALLOCATION_EPS) * usage
    order = jnp.argsort(u, axis=-1)  # stable: ties in cell order
    sorted_u = jnp.take_along_axis(u, order, axis=-1)
    exclusive = jnp.concatenate(  # prod_{i<j} of the sorted usages
        [jnp.ones_like(sorted_u[:, :1]), jnp.cumprod(sorted_u[:, :-1], axis=-1)], axis=-1
    )
    sorted_alloc = (1.0 - sorted_u) * exclusive
    return jnp.take_along_axis(sorted_alloc, jnp.argsort(order, axis=-1), axis=-1)


def _weighting(w: Array) -> Array:
    """``w`` made a weighting over the last axis: negatives to 0, scaled down where it sums to
    more than 1 (the identity on a weighting)."""
    w = jnp.maximum(w, 0.0)
    return w / jnp.maximum(1.0, jnp.sum(w, axis=-1, keepdims=True))


def valid_state(state: DNCState) -> DNCState:
    """``state`` projected onto the states a DNC can reach, where it is the identity: read and
    write weightings and precedence non-negative with sums at most 1, usage in ``[0, 1]``, the
    link matrix non-negative with every row and column summing to at most 1.

    A carry that breaks these (an arbitrary pytree of the right shapes) would make the temporal
    links amplify the read weightings at every step (``L w`` with row sums above 1) until they
    overflow; projected, every carry gives finite outputs, and reachable ones are unchanged.
    """
    link = jnp.maximum(state.link, 0.0)
    rows, cols = jnp.sum(link, axis=-1), jnp.sum(link, axis=-2)  # [B, N] each
    scale = jnp.maximum(1.0, jnp.maximum(jnp.max(rows, -1), jnp.max(cols, -1)))
    return state._replace(
        link=link / scale[:, None, None],
        precedence=_weighting(state.precedence),
        read_weights=_weighting(state.read_weights),
        write_weights=_weighting(state.write_weights),
        usage=jnp.clip(state.usage, 0.0, 1.0),
    )


def memory_step(state: DNCState, iface: Interface) -> DNCState:
    """Write, then read: the memory part of one step (the controller state is passed through)."""
    w_w, w_r = state.write_weights, state.read_weights
    retention = jnp.prod(1.0 - iface.free_gates[..., None] * w_r, axis=1)  # [B, N]
    usage = (state.usage + w_w - state.usage * w_w) * retention
    write_content = content_weights(
        state.memory, iface.write_key[:, None], iface.write_strength[:, None]
    )[:, 0]
    g_a, g_w = iface.allocation_gate[:, None], iface.write_gate[:, None]
    w_w = g_w * (g_a * allocation_weights(usage) + (1.0 - g_a) * write_content)
    memory = state.memory * (1.0 - w_w[:, :, None] * iface.erase[:, None, :])
    memory = memory + w_w[:, :, None] * iface.write_vector[:, None, :]
    cells = w_w.shape[-1]
    link = (1.0 - w_w[:, :, None] - w_w[:, None, :]) * state.link
    link = (link + w_w[:, :, None] * state.precedence[:, None, :]) * (1.0 - jnp.eye(cells))
    precedence = (1.0 - jnp.sum(w_w, -1, keepdims=True)) * state.precedence + w_w
    forward = jnp.einsum("bij,brj->bri", link, w_r)  # L w: the cells written after the read ones
    backward = jnp.einsum("bji,brj->bri", link, w_r)  # L^T w: the cells written before
    content = content_weights(memory, iface.read_keys, iface.read_strengths)
    pi = iface.read_modes
    w_r = pi[..., 0:1] * backward + pi[..., 1:2] * content + pi[..., 2:3] * forward
    reads = jnp.einsum("brn,bnw->brw", w_r, memory)
    return DNCState(state.controller, reads, memory, link, precedence, w_r, w_w, usage)


@register_memory("dnc")
class DNC(nn.Module):
    """Differentiable Neural Computer. Carry: :class:`DNCState` (zeros at an episode start).

    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``; where
    ``start[t, b]`` every leaf of the state is zeroed before ``x[t, b]`` is consumed.
    Fields: ``memory_cells`` (N), ``cell_size`` (W), ``read_heads`` (R); the controller has
    ``hidden_size`` units.
    """

    hidden_size: int
    memory_cells: int = 16
    cell_size: int = 16
    read_heads: int = 4

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> DNCState:
        b, h, n, w, r = (
            batch_size,
            self.hidden_size,
            self.memory_cells,
            self.cell_size,
            self.read_heads,
        )
        z = jnp.zeros
        return DNCState(
            controller=(z((b, h)), z((b, h))),
            reads=z((b, r, w)),
            memory=z((b, n, w)),
            link=z((b, n, n)),
            precedence=z((b, n)),
            read_weights=z((b, r, n)),
            write_weights=z((b, n)),
            usage=z((b, n)),
        )

    @classmethod
    def config_errors(cls, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
        why = " (the link matrix holds memory_cells^2 floats per env)"
        return bounded_int_errors(fields, {"memory_cells": cls.memory_cells}, MAX_CELLS, why)

    @nn.compact
    def __call__(self, carry: DNCState, inputs: tuple[Array, Array]) -> tuple[DNCState, Array]:
        x, start = inputs
        check_inputs(x, start)
        h_size, w, r = self.hidden_size, self.cell_size, self.read_heads
        gates = 4 * h_size
        w_x = self.param("input_kernel", stacked_init(default_kernel_init, 4), (x.shape[-1], gates))
        w_read = self.param("read_kernel", stacked_init(default_kernel_init, 4), (r * w, gates))
        w_h = self.param(
            "recurrent_kernel", stacked_init(default_recurrent_init, 4), (h_size, gates)
        )
        bias = self.param("bias", nn.initializers.zeros_init(), (gates,))
        width = interface_size(self.memory_cells, w, r)
        w_xi = self.param("interface_kernel", default_kernel_init, (h_size, width))
        b_xi = self.param("interface_bias", nn.initializers.zeros_init(), (width,))

        xp = matmul(x, w_x) + bias  # [T, B, 4H]: the input's share of the gates, all steps
        carry = valid_state(carry)

        def step(state: DNCState, inp: tuple[Array, Array]) -> tuple[DNCState, tuple[Array, Array]]:
            xp_t, start_t = inp
            state = jax.tree.map(
                lambda a: jnp.where(start_t.reshape((-1,) + (1,) * (a.ndim - 1)), 0.0, a), state
            )
            c, h = state.controller
            g = xp_t + state.reads.reshape(h.shape[0], -1) @ w_read + h @ w_h
            i, f, cand, o = jnp.split(g, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(cand)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            iface = parse_interface(h @ w_xi + b_xi, w, r)
            state = memory_step(state._replace(controller=(c, h)), iface)
            return state, (h, state.reads.reshape(h.shape[0], -1))

        if x.shape[0] == 1:  # rollout path: one step, no loop
            carry, (h, reads) = step(carry, (xp[0], start[0]))
            h, reads = h[None], reads[None]
        else:
            carry, (h, reads) = jax.lax.scan(step, carry, (xp, start))
        y = Dense(self.hidden_size, name="output")(jnp.concatenate([h, reads], axis=-1))
        return carry, y
