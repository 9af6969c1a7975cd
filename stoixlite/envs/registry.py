"""Environment registry: create any registered environment by name, e.g. ``gymnax/CartPole-v1``.

A registration declares everything the rest of stoixlite reads about an env::

    @register_env("<suite>/<name>", difficulties=TABLE, reference=REFERENCE)
    def make_my_env(difficulty: str = "easy", **kwargs) -> Environment: ...

* the name's prefix is the env's *suite* (``popgym``, ``gymnax``, ...);
* ``difficulties``: the difficulty table (its keys are the allowed ``env.difficulty`` values and
  the factory takes ``difficulty=``), or nothing for an env without levels (``env.difficulty``
  must then be null);
* ``reference``: for ports, the original implementation the port reproduces (for popgym ports a
  :class:`~stoixlite.envs.popgym.reference.PopgymReference`), read by ``evaluate --reference``.

Every module under ``stoixlite/envs`` is imported on first use (:class:`stoixlite.registry.
Registry`), so a new env, or a whole new suite folder, needs only its own files and
``configs/env/<suite>/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from stoixlite.envs.types import Environment
from stoixlite.registry import Registry

EnvFactory = Callable[..., Environment]


@dataclass(frozen=True)
class EnvSpec:
    """The declaration of one registered env."""

    name: str  # "<suite>/<env>"
    factory: EnvFactory
    difficulties: tuple[str, ...] = ()  # allowed difficulty levels (empty: none)
    reference: Any = None  # the original the env ports (suite-specific), if any

    @property
    def suite(self) -> str:
        return self.name.split("/", 1)[0]


ENVS: Registry[EnvSpec] = Registry("env", ["stoixlite.envs"])


def register_env(
    *names: str, difficulties: Iterable[str] = (), reference: Any = None
) -> Callable[[EnvFactory], EnvFactory]:
    """Decorator registering an env factory (a class or function returning an Environment)
    under ``names``, with its difficulty levels (any iterable of names, e.g. the difficulty
    table) and its reference (see the module docstring)."""

    def wrap(factory: EnvFactory) -> EnvFactory:
        for name in names:
            ENVS.add(name, EnvSpec(name, factory, tuple(difficulties), reference))
        return factory

    return wrap


def available_envs() -> list[str]:
    """Sorted names of every registered environment."""
    return ENVS.names()


def env_spec(name: str) -> EnvSpec:
    """The declaration of env ``name`` (``KeyError`` listing the choices if unknown)."""
    return ENVS.get(name)


def make(name: str, **kwargs: Any) -> Environment:
    """Create the raw (unwrapped, unbatched) environment ``name``."""
    env = env_spec(name).factory(**kwargs)
    arguments = ", ".join(f"{key}={value!r}" for key, value in kwargs.items() if value is not None)
    env.registered_label = f"{name}({arguments})" if arguments else name
    return env
