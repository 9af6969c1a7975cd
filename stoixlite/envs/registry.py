"""Environment registry: create any registered environment by name, e.g. ``gymnax/CartPole-v1``.

A registration declares everything the rest of stoixlite reads about an env::

    @register_env("<suite>/<name>", difficulties=TABLE, reference=REFERENCE, requires=("pkg",))
    def make_my_env(difficulty: str = "easy", **kwargs) -> Environment: ...

* the name's prefix is the env's *suite* (``popgym``, ``gymnax``, ...);
* ``difficulties``: the difficulty table (its keys are the allowed ``env.difficulty`` values and
  the factory takes ``difficulty=``), or nothing for an env without levels (``env.difficulty``
  must then be null);
* ``reference``: for ports, the original implementation the port reproduces (for popgym ports a
  :class:`~stoixlite.envs.popgym.reference.PopgymReference`), read by ``evaluate --reference``;
* ``requires``: the modules of optional dependencies the factory imports (e.g. ``("craftax",)``,
  installed by an extra such as ``.[craftax]``). The env is listed either way; the config check
  refuses it in one line when a module is missing (:func:`missing_modules`), and tests skip it;
* ``install``: the command that installs them, named by that line (default
  ``pip install 'stoixlite[<suite>]'``: the extra named after the suite).

A suite that wraps another library's envs by their ids may refuse some of them with a reason
(:func:`refuse_env`, e.g. a gymnax env that downloads data when it is made): the command line
names the reason instead of the closest names (:func:`refusal`).

Every module under ``stoixlite/envs`` is imported on first use (:class:`stoixlite.registry.
Registry`), so a new env, or a whole new suite folder, needs only its own files and
``configs/env/<suite>/<name>.yaml``.
"""

from __future__ import annotations

import importlib.util
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
    requires: tuple[str, ...] = ()  # modules of optional dependencies the factory imports
    install: str = ""  # the command installing them (default: the extra named after the suite)

    @property
    def suite(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def install_command(self) -> str:
        """The command that installs the modules this env requires."""
        return self.install or f"pip install 'stoixlite[{self.suite}]'"


ENVS: Registry[EnvSpec] = Registry("env", ["stoixlite.envs"])
_REFUSED: dict[str, str] = {}  # "<suite>/<env>" -> why stoixlite does not register it


def register_env(
    *names: str,
    difficulties: Iterable[str] = (),
    reference: Any = None,
    requires: Iterable[str] = (),
    install: str = "",
) -> Callable[[EnvFactory], EnvFactory]:
    """Decorator registering an env factory (a class or function returning an Environment)
    under ``names``, with its difficulty levels (any iterable of names, e.g. the difficulty
    table), its reference, the optional modules it requires and the command installing them
    (see the module docstring)."""

    def wrap(factory: EnvFactory) -> EnvFactory:
        for name in names:
            spec = EnvSpec(name, factory, tuple(difficulties), reference, tuple(requires), install)
            ENVS.add(name, spec)
        return factory

    return wrap


def refuse_env(name: str, reason: str) -> None:
    """Declare ``name`` (``<suite>/<env>``: an id of the wrapped library) not registered, and
    why (a phrase, e.g. ``"it downloads MNIST when it is made"``)."""
    _REFUSED[name] = reason


def refusal(name: str) -> str | None:
    """Why env ``name`` is not registered, if its suite refused it (:func:`refuse_env`)."""
    ENVS.names()  # discovery imports the suites, which declare their refusals
    return _REFUSED.get(name)


def refused_envs() -> dict[str, str]:
    """Every refused env name with its reason."""
    ENVS.names()
    return dict(_REFUSED)


def available_envs() -> list[str]:
    """Sorted names of every registered environment."""
    return ENVS.names()


def env_spec(name: str) -> EnvSpec:
    """The declaration of env ``name`` (``KeyError`` listing the choices if unknown)."""
    return ENVS.get(name)


def missing_modules(name: str) -> list[str]:
    """The modules env ``name`` requires that are not installed (found without importing them)."""
    return [
        module for module in env_spec(name).requires if importlib.util.find_spec(module) is None
    ]


def make(name: str, **kwargs: Any) -> Environment:
    """Create the raw (unwrapped, unbatched) environment ``name``."""
    env = env_spec(name).factory(**kwargs)
    arguments = ", ".join(f"{key}={value!r}" for key, value in kwargs.items() if value is not None)
    env.registered_label = f"{name}({arguments})" if arguments else name
    return env
