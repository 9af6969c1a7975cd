"""Memory models, one file each, discovered automatically.

The memory contract (see docs/architecture.md and DESIGN.md). Every model is a flax linen module::

    initialize_carry(batch_size) -> carry            # episode-start state, leading batch axis
    __call__(carry, (x, start)) -> (carry, y)        # x [T, B, F], start [T, B] bool -> y [T, B, H]

At every (t, b) with ``start[t, b]`` the state is reset to the initial state *before* ``x[t, b]``
is consumed. The returned carry is the state after step T-1. The carry may be any pytree.

A model whose output at step t depends on ``x[t]`` alone (no state: ``mlp``, ``identity``)
declares the class attribute ``stateless = True``; PPO then trains it on shuffled single
transitions instead of sequences (:func:`is_stateless`).

Adding a model: create ``stoixlite/networks/memory/<name>.py`` defining a module decorated with
``@register_memory("<name>")`` and ``configs/network/<name>.yaml``. Nothing else changes: the
registry imports every module of this package on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import flax.linen as nn

_REGISTRY: dict[str, type[nn.Module]] = {}
_DISCOVERED = False


def register_memory(*names: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator registering a memory model under one or more names."""

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        for name in names:
            if name in _REGISTRY and _REGISTRY[name] is not cls:
                raise ValueError(f"memory model {name!r} registered twice")
            _REGISTRY[name] = cls
        return cls

    return wrap


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    _DISCOVERED = True


def available_memories() -> list[str]:
    """Sorted names of every registered memory model."""
    _discover()
    return sorted(_REGISTRY)


def memory_class(name: str) -> type[nn.Module]:
    """The module class registered under ``name`` (raises ``KeyError`` listing the choices)."""
    _discover()
    if name not in _REGISTRY:
        raise KeyError(f"unknown memory model {name!r}; choose one of {available_memories()}")
    return _REGISTRY[name]


def is_stateless(name: str) -> bool:
    """Whether model ``name`` keeps no state (its class sets ``stateless = True``)."""
    return bool(getattr(memory_class(name), "stateless", False))


def memory_fields(name: str) -> set[str]:
    """Constructor keyword names accepted by the model ``name`` (its dataclass fields)."""
    cls = memory_class(name)
    return {f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("parent", "name")}


def build_memory(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate memory model ``name``, passing only the keywords it accepts.

    Unaccepted keys are ignored here (the config validator reports keys nobody accepts).
    ``parent=None`` may be passed to build a detached module (e.g. for ``initialize_carry``).
    """
    cls = memory_class(name)
    fields = memory_fields(name) | {"parent"}
    return cls(**{k: v for k, v in kwargs.items() if k in fields})
