"""Layer stacks shared by the multi-layer memory models (no model is registered here).

:class:`CellStack` holds ``num_layers`` *cells*, each a module
``cell(carry, x [T, B, F], start [T, B], **extra) -> (carry, y [T, B, hidden_size])``. Layer 0
maps ``F -> H``; layers ``i >= 1`` are pre-norm residual blocks ``h + cell(LayerNorm(h))`` (as in
the LRU/S5 stacks). The carry is a tuple with one cell state per layer.

A model declares its cell once by naming its class (``cell = FFMCell``): the cell's fields, with
their types and defaults, become the model's fields (so the config parser and ``build_memory``
see them), every layer's cell is built from the model's values of them, and a layer's
episode-start state is the cell's ``identity(batch_size)``. A model whose layers differ (or whose
cells take other arguments) defines :meth:`CellStack.make_cell` and :meth:`CellStack.cell_identity`
instead.

:class:`ScannedStack` adds the ``scan`` option (``auto | associative | sequential``) for cells
that evaluate a resettable monoid scan (:mod:`~stoixlite.networks.memory.scan`); the resolved
strategy is passed to every cell as ``strategy=``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import flax.linen as nn
import jax

from stoixlite.networks.memory._common import check_inputs
from stoixlite.networks.memory.scan import STRATEGIES, resolve_strategy

Array = jax.Array
State = Any


class CellStack(nn.Module):
    """``num_layers`` cells with residual connections and layer norm.

    Subclasses set ``cell`` (see the module docstring), or define :meth:`make_cell` (build layer
    ``i``'s cell) and :meth:`cell_identity` (one layer's episode-start state). Contract:
    ``initialize_carry(B)`` -> tuple of per-layer states;
    ``__call__(carry, (x [T, B, F], start [T, B])) -> (carry, y [T, B, hidden_size])``.
    """

    hidden_size: int
    num_layers: int = 1
    cell: ClassVar[type[nn.Module] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        cell = cls.__dict__.get("cell")
        if cell is not None:  # the cell's fields become the model's (declared once, on the cell)
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
        """Keyword arguments of every layer's ``cell``: this model's values of its fields."""
        assert self.cell is not None
        return {f.name: getattr(self, f.name) for f in _cell_fields(self.cell)}

    @nn.nowrap
    def make_cell(self, layer: int) -> nn.Module:
        """Layer ``layer``'s cell (default: ``cell`` built from :meth:`cell_config`)."""
        if self.cell is None:
            raise NotImplementedError(f"{type(self).__name__} sets no cell and no make_cell")
        return self.cell(**self.cell_config())

    @nn.nowrap
    def cell_identity(self, batch_size: int) -> State:
        """One layer's episode-start state (default: the ``cell``'s ``identity``)."""
        if self.cell is None:
            raise NotImplementedError(f"{type(self).__name__} sets no cell and no cell_identity")
        return self.cell(**self.cell_config(), parent=None).identity(batch_size)

    @nn.nowrap
    def cell_kwargs(self, length: int) -> dict[str, Any]:
        """Extra keyword arguments of every cell call for a sequence of ``length`` steps."""
        return {}

    def setup(self) -> None:
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        self.cells = [self.make_cell(i) for i in range(self.num_layers)]
        self.norms = [nn.LayerNorm() for _ in range(self.num_layers - 1)]

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> tuple[State, ...]:
        return tuple(self.cell_identity(batch_size) for _ in range(self.num_layers))

    def __call__(
        self, carry: tuple[State, ...], inputs: tuple[Array, Array]
    ) -> tuple[tuple[State, ...], Array]:
        x, start = inputs
        check_inputs(x, start)
        if len(carry) != self.num_layers:
            raise ValueError(f"carry has {len(carry)} layers, model has {self.num_layers}")
        extra = self.cell_kwargs(x.shape[0])
        h, new_carry = x, []
        for i, cell in enumerate(self.cells):
            c, y = cell(carry[i], h if i == 0 else self.norms[i - 1](h), start, **extra)
            h = y if i == 0 else h + y
            new_carry.append(c)
        return tuple(new_carry), h


class ScannedStack(CellStack):
    """A :class:`CellStack` whose cells run a resettable scan; ``scan`` picks the strategy."""

    scan: str = "auto"  # auto | associative | sequential (see scan.resolve_strategy)
    # Class constant: True for models whose sequential strategy is a chunkwise-parallel form
    # (linear attention, mLSTM), faster than their associative scan on the CPU and on an H100
    # (docs/benchmarks.md, "GPU: one NVIDIA H100"): "auto" picks it on every backend.
    auto_sequential = False

    def setup(self) -> None:
        if self.scan not in STRATEGIES:
            raise ValueError(f"unknown scan strategy {self.scan!r}; choose one of {STRATEGIES}")
        super().setup()

    @nn.nowrap
    def cell_kwargs(self, length: int) -> dict[str, Any]:
        if self.scan == "auto" and self.auto_sequential:
            return {"strategy": "sequential"}
        return {"strategy": resolve_strategy(self.scan, length)}


def _cell_fields(cell: type[nn.Module]) -> list[dataclasses.Field]:
    """The constructor fields of a cell class (flax's ``parent`` and ``name`` excluded)."""
    return [f for f in dataclasses.fields(cell) if f.init and f.name not in ("parent", "name")]
