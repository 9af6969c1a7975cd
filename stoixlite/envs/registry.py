"""Environment registry: create any shipped environment by name, e.g. ``gymnax/CartPole-v1``.

Factories register with ``@register_env("suite/name")`` and take keyword arguments (for POPGym,
``difficulty``). Modules under ``stoixlite/envs/popgym`` and the gymnax adapter are imported on
first use, so a new env only needs its own file and ``configs/env/<suite>/<name>.yaml``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from stoixlite.envs.types import Environment

EnvFactory = Callable[..., Environment]
_REGISTRY: dict[str, EnvFactory] = {}
_DISCOVERED = False
_PACKAGES = ("stoixlite.envs.popgym", "stoixlite.envs.sets")
_MODULES = ("stoixlite.envs.gymnax_adapter",)


def register_env(*names: str) -> Callable[[EnvFactory], EnvFactory]:
    """Decorator registering an env factory (a class or function returning an Environment)."""

    def wrap(factory: EnvFactory) -> EnvFactory:
        for name in names:
            if name in _REGISTRY and _REGISTRY[name] is not factory:
                raise ValueError(f"environment {name!r} registered twice")
            _REGISTRY[name] = factory
        return factory

    return wrap


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for module in _MODULES:
        importlib.import_module(module)
    for package_name in _PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package_name}.{info.name}")


def available_envs() -> list[str]:
    """Sorted names of every registered environment."""
    _discover()
    return sorted(_REGISTRY)


def make(name: str, **kwargs: Any) -> Environment:
    """Create the raw (unwrapped, unbatched) environment ``name``."""
    _discover()
    if name not in _REGISTRY:
        raise KeyError(f"unknown env {name!r}; choose one of {available_envs()}")
    env = _REGISTRY[name](**kwargs)
    arguments = ", ".join(f"{key}={value!r}" for key, value in kwargs.items() if value is not None)
    env.registered_label = f"{name}({arguments})" if arguments else name
    return env
