"""Shared base classes of the memoroid models (FFM, LRU, S5, linear attention, minGRU).

A memoroid model is a stack of ``num_layers`` *cells*. A cell maps inputs ``x [T, B, F]`` to
monoid elements (:meth:`MemoroidCell.elements`), evaluates the resettable scan of its operator
(:func:`~stoixlite.networks.memory.scan.resettable_scan`) from the incoming carry, and reads the
outputs ``[T, B, hidden_size]`` out of the prefix states and the inputs
(:meth:`MemoroidCell.readout`). Layer 0 maps ``F -> H``; layers ``i >= 1`` are pre-norm residual
blocks ``h + cell(LayerNorm(h))`` (as in the LRU/S5 papers' stacks). The carry is a tuple with one
monoid state per layer; at an episode start each is the monoid identity.

A model declares its cell once: the cell class holds the fields (with defaults) and the identity,
and the registered stack only names it (``cell = FFMCell``). The stack takes the cell's fields as
its own (so the config and ``build_memory`` see them), passes them to every layer's cell and asks
the cell for the identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import flax.linen as nn
import jax

from stoixlite.networks.memory._common import check_inputs
from stoixlite.networks.memory.scan import STRATEGIES, resettable_scan, resolve_strategy

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


class MemoroidStack(nn.Module):
    """Base of every registered memoroid: ``num_layers`` cells of class :attr:`cell`, residual +
    layer norm.

    A subclass sets only ``cell``; the cell's fields (other than ``hidden_size``) become fields of
    the subclass, with the cell's types and defaults. Contract: ``initialize_carry(B)`` -> tuple
    of per-layer identities; ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry,
    y [T, B, hidden_size])``.
    """

    hidden_size: int
    num_layers: int = 1
    scan: str = "auto"  # auto | associative | sequential (see scan.resolve_strategy)
    cell: ClassVar[type[MemoroidCell]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        cell = cls.__dict__.get("cell")
        if cell is not None:
            own = dict(cls.__dict__.get("__annotations__", {}))
            for f in _cell_fields(cell):
                if f.name == "hidden_size" or f.name in own:
                    continue
                if f.default is dataclasses.MISSING:
                    raise TypeError(f"{cell.__name__}.{f.name} needs a default")
                own[f.name] = f.type
                setattr(cls, f.name, f.default)
            cls.__annotations__ = own
        super().__init_subclass__(**kwargs)

    @nn.nowrap
    def cell_config(self) -> dict[str, Any]:
        """Keyword arguments of every layer's cell: this stack's values of the cell's fields."""
        return {f.name: getattr(self, f.name) for f in _cell_fields(self.cell)}

    def setup(self) -> None:
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.scan not in STRATEGIES:
            raise ValueError(f"unknown scan strategy {self.scan!r}; choose one of {STRATEGIES}")
        self.cells = [self.cell(**self.cell_config()) for _ in range(self.num_layers)]
        self.norms = [nn.LayerNorm() for _ in range(self.num_layers - 1)]

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> tuple[State, ...]:
        identity = self.cell(**self.cell_config(), parent=None).identity(batch_size)
        return tuple(identity for _ in range(self.num_layers))

    def __call__(
        self, carry: tuple[State, ...], inputs: tuple[Array, Array]
    ) -> tuple[tuple[State, ...], Array]:
        x, start = inputs
        check_inputs(x, start)
        if len(carry) != self.num_layers:
            raise ValueError(f"carry has {len(carry)} layers, model has {self.num_layers}")
        strategy = resolve_strategy(self.scan, x.shape[0])
        h, new_carry = x, []
        for i, cell in enumerate(self.cells):
            c, y = cell(carry[i], h if i == 0 else self.norms[i - 1](h), start, strategy)
            h = y if i == 0 else h + y
            new_carry.append(c)
        return tuple(new_carry), h


def _cell_fields(cell: type[MemoroidCell]) -> list[dataclasses.Field]:
    """The constructor fields of a cell class (flax's ``parent`` and ``name`` excluded)."""
    return [f for f in dataclasses.fields(cell) if f.init and f.name not in ("parent", "name")]
