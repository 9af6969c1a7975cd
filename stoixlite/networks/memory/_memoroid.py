"""Shared base classes of the memoroid models (FFM, LRU, S5, linear attention, minGRU).

A memoroid model is a stack of ``num_layers`` *cells*. A cell maps inputs ``x [T, B, F]`` to
monoid elements (:meth:`MemoroidCell.elements`), evaluates the resettable scan of its operator
(:func:`~stoixlite.networks.memory.scan.resettable_scan`) from the incoming carry, and reads the
outputs ``[T, B, hidden_size]`` out of the prefix states and the inputs
(:meth:`MemoroidCell.readout`). The stack (residual blocks, layer norm, ``scan`` option) is
:class:`~stoixlite.networks.memory._stack.ScannedStack`. The carry is a tuple with one monoid
state per layer; at an episode start each is the monoid identity.

A model declares its cell once: the cell class holds the fields (with defaults) and the identity,
and the registered stack only names it (``cell = FFMCell``, see
:class:`~stoixlite.networks.memory._stack.CellStack`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax

from stoixlite.networks.memory._stack import ScannedStack
from stoixlite.networks.memory.scan import resettable_scan

Array = jax.Array
State = Any


class MemoroidCell(nn.Module):
    """One memoroid layer (setup-style, so the operator is reachable for tests).

    Subclasses define ``setup`` (parameters), :meth:`identity`, :meth:`operator`,
    :meth:`elements` and :meth:`readout` (optionally :meth:`step_operator`).
    """

    unroll = 1  # class constant: loop unrolling of the sequential scan

    @nn.nowrap
    def identity(self, batch_size: int) -> State:
        """The monoid identity with leading batch axis (the state at an episode start)."""
        raise NotImplementedError

    def operator(self) -> Callable[[State, State], State]:
        """The monoid operator as a pure function (closed over this cell's parameters)."""
        raise NotImplementedError

    def step_operator(self) -> Callable[[State, State], State]:
        """``operator()`` specialised to a right operand that is one step's element (as produced
        by :meth:`elements`); defaults to the operator. Used by the sequential scan and T == 1."""
        return self.operator()

    def elements(self, x: Array) -> State:
        """Per-step monoid elements, leaves ``[T, B, ...]``, from inputs ``x [T, B, F]``."""
        raise NotImplementedError

    def readout(self, states: State, x: Array) -> Array:
        """Outputs ``[T, B, H]`` from the prefix states (leaves ``[T, B, ...]``) and inputs."""
        raise NotImplementedError

    def __call__(self, carry: State, x: Array, start: Array, strategy: str) -> tuple[State, Array]:
        states, final = resettable_scan(
            self.operator(),
            carry,
            self.elements(x),
            start,
            strategy,
            unroll=self.unroll,
            step=self.step_operator(),
        )
        return final, self.readout(states, x)


class MemoroidStack(ScannedStack):
    """Base of every registered memoroid: ``num_layers`` :class:`MemoroidCell` layers.

    A subclass sets only ``cell`` (its :class:`MemoroidCell` class); the per-layer carry is
    exactly the cell's monoid state, starting from its :meth:`MemoroidCell.identity`
    (``tests/test_memoroid_scan.py`` checks the operator of every subclass). Contract:
    ``initialize_carry(B)`` -> tuple of per-layer identities;
    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``.
    """
