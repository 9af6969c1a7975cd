"""Memory models, one file each, discovered automatically.

The memory contract (see docs/memory_models.md). Every model is a flax linen module::

    initialize_carry(batch_size) -> carry            # episode-start state, leading batch axis
    __call__(carry, (x, start)) -> (carry, y)        # x [T, B, F], start [T, B] bool -> y [T, B, H]

At every (t, b) with ``start[t, b]`` the state is reset to the initial state *before* ``x[t, b]``
is consumed. The returned carry is the state after step T-1. The carry may be any pytree.

A model whose output at step t depends on ``x[t]`` alone (no state: ``mlp``, ``identity``)
declares the class attribute ``stateless = True``; PPO then trains it on shuffled single
transitions instead of sequences (:func:`is_stateless`). A model without a layer of its own
(``identity``) declares ``passthrough = True``: its output is its input, so ``y`` is
``[T, B, F]`` and it has no parameters (:func:`output_width`).

Adding a model: create ``stoixlite/networks/memory/<name>.py`` defining a module decorated with
``@register_memory("<name>")`` and ``configs/network/<name>.yaml``. Nothing else changes: the
registry (:class:`stoixlite.registry.Registry`) imports every module of this package on first
use. A model may define a classmethod ``config_errors(fields) -> [(key, value, allowed)]`` for
settings its constructor cannot accept (heads that do not divide the width, ...): the config
parser reports them before compiling.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn

from stoixlite.registry import Registry

MEMORIES: Registry[type[nn.Module]] = Registry("memory model", [__name__])


def register_memory(*names: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator registering a memory model under one or more names."""

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        for name in names:
            MEMORIES.add(name, cls)
        return cls

    return wrap


def available_memories() -> list[str]:
    """Sorted names of every registered memory model."""
    return MEMORIES.names()


def memory_class(name: str) -> type[nn.Module]:
    """The module class registered under ``name`` (raises ``KeyError`` listing the choices)."""
    return MEMORIES.get(name)


def output_width(name: str, hidden_size: int, input_width: int) -> int:
    """The width of model ``name``'s output ``y``: ``input_width`` for a model that declares
    ``passthrough = True``, else ``hidden_size``."""
    return input_width if getattr(memory_class(name), "passthrough", False) else hidden_size


def is_stateless(name: str) -> bool:
    """Whether model ``name`` keeps no state (its class sets ``stateless = True``)."""
    return bool(getattr(memory_class(name), "stateless", False))


def memory_fields(name: str) -> set[str]:
    """Constructor keyword names accepted by the model ``name`` (its dataclass fields)."""
    cls = memory_class(name)
    return {f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("parent", "name")}


def memory_defaults(name: str) -> dict[str, Any]:
    """The default of each constructor keyword of model ``name`` that has one: what a config
    without the key builds (``{"bias_max": 1.0, ...}``)."""
    return {
        f.name: f.default
        for f in dataclasses.fields(memory_class(name))
        if f.init and f.name not in ("parent", "name") and f.default is not dataclasses.MISSING
    }


def memory_config_errors(name: str, fields: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Impossible settings of model ``name`` as ``(key, value, what is allowed)`` triples.

    ``fields`` are the constructor keywords from the config (missing ones take the defaults).
    A model declares its checks in an optional classmethod ``config_errors(fields)``; the config
    parser (``stoixlite/config/checks.py``) reports them before anything compiles.
    """
    check = getattr(memory_class(name), "config_errors", None)
    return list(check(fields)) if check is not None else []


def build_memory(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate memory model ``name``, passing only the keywords it accepts.

    Unaccepted keys are ignored here (the config parser reports keys nobody accepts).
    ``parent=None`` may be passed to build a detached module (e.g. for ``initialize_carry``).
    """
    cls = memory_class(name)
    fields = memory_fields(name) | {"parent"}
    return cls(**{k: v for k, v in kwargs.items() if k in fields})
