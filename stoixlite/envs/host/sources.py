"""What a host env name makes: one Gymnasium env per vector slot, and its specs.

``gymnasium/<id>``: ``gymnasium.make(id, **env.kwargs)`` (its registered ``TimeLimit`` included).
``popgym_ref/<name>``: popgym's own class of the port ``popgym/<name>`` at ``env.difficulty``
(:class:`~stoixlite.envs.popgym.reference.PopgymReference`), its observations encoded as the
port encodes them and its actions the port's (a flat cell index for the grid games), so the host
env and the port have the same specs and a policy trained on one plays the other.

Both factories are module-level functions bound with :func:`functools.partial`, so
Gymnasium's asynchronous vector can send them to its worker processes.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoixlite.envs.host import INSTALL_HINT
from stoixlite.envs.host.kwargs import kwargs_error
from stoixlite.envs.host.spaces import (
    UnsupportedSpace,
    action_spec,
    keeps_observation,
    observation_spec,
)
from stoixlite.specs import Box, Space


class HostEnvError(RuntimeError):
    """A host env that cannot be made or stepped; the message is one line."""


def require_gymnasium() -> Any:
    """The ``gymnasium`` module, or :class:`HostEnvError` with the install line."""
    try:
        import gymnasium
    except ModuleNotFoundError as err:
        raise HostEnvError(
            f"host envs need gymnasium, which is not installed: {INSTALL_HINT}"
        ) from err
    return gymnasium


@dataclass(frozen=True)
class HostSource:
    """A host env: ``make()`` builds one flattened, spec-mapped Gymnasium env; ``observation_space``
    and ``action_space`` are its stoixlite specs, ``max_episode_steps`` its time limit (if any)."""

    label: str
    make: Callable[[], Any]
    observation_space: Box
    action_space: Space
    max_episode_steps: int | None


def _gymnasium_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    gym = require_gymnasium()
    env = gym.make(env_id, **kwargs)
    return _flattened(env)


def _flattened(env: Any) -> Any:
    """``env`` with its observations flattened where :mod:`~stoixlite.envs.host.spaces` says so,
    and its action space checked."""
    import gymnasium as gym

    action_spec(env.action_space)
    if keeps_observation(env.observation_space):
        return env
    observation_spec(env.observation_space)  # refuses what cannot be flattened
    return gym.wrappers.FlattenObservation(env)


def _popgym_env(name: str, difficulty: str) -> Any:
    """popgym's original at ``difficulty``, speaking the port's observations and actions."""
    import gymnasium as gym

    from stoixlite.envs.registry import env_spec, make

    reference = env_spec(f"popgym/{name}").reference
    port = make(f"popgym/{name}", difficulty=difficulty)
    original = reference.make(difficulty)
    encode = reference.encoder(port, original)
    space = port.observation_space

    class PortSpeaking(gym.Wrapper):
        def __init__(self, env: Any):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(
                np.broadcast_to(np.asarray(space.low, np.float32), space.shape),
                np.broadcast_to(np.asarray(space.high, np.float32), space.shape),
                dtype=np.float32,
            )
            self.action_space = gym.spaces.Discrete(port.action_space.n)

        def reset(self, **kwargs: Any) -> tuple[Any, dict]:
            obs, info = self.env.reset(**kwargs)
            return encode(obs), info

        def step(self, action: Any) -> tuple[Any, ...]:
            obs, reward, terminated, truncated, info = self.env.step(
                reference.action(port, np.asarray(action))
            )
            return encode(obs), reward, terminated, truncated, info

    return PortSpeaking(original)


def host_source(name: str, difficulty: Any, kwargs: dict[str, Any]) -> HostSource:
    """The :class:`HostSource` of ``name`` (``gymnasium/<id>`` or ``popgym_ref/<name>``).

    Raises :class:`HostEnvError` (one line) for an unknown id or name, a missing package, and
    spaces that :mod:`~stoixlite.envs.host.spaces` does not support. Makes one env to read its
    spaces.
    """
    suite, _, rest = name.partition("/")
    gym = require_gymnasium()
    if suite == "gymnasium":
        module, colon, env_id = rest.rpartition(":")
        if colon and not (module and env_id):
            missing = "module before" if not module else "id after"
            raise HostEnvError(
                f"env.name={name!r} is invalid: the {missing} ':' is missing "
                "(gymnasium/<id>, or gymnasium/<module>:<id> to import the module registering it)"
            )
        if module:  # "<module>:<id>": the module registers the id (imported in each worker too)
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise HostEnvError(f"env.name={name!r}: cannot import {module}: {err}") from None
        if env_id not in gym.registry:
            raise HostEnvError(
                f"env.name={name!r} is invalid: {env_id!r} is not a registered Gymnasium id "
                "(gymnasium/<module>:<id> imports the module that registers it)"
            )
        if error := kwargs_error(env_id, kwargs):
            raise HostEnvError(error)
        factory = functools.partial(_gymnasium_env, rest, dict(kwargs))
    else:
        from stoixlite.envs.registry import available_envs, env_spec

        ports = [n.split("/", 1)[1] for n in available_envs() if n.startswith("popgym/")]
        if rest not in ports:
            raise HostEnvError(f"env.name={name!r} is invalid: choose popgym_ref/<one of {ports}>")
        if kwargs:
            raise HostEnvError(
                f"env.kwargs={dict(kwargs)!r}: popgym_ref envs take env.difficulty only"
            )
        levels = env_spec(f"popgym/{rest}").difficulties
        if difficulty not in levels:
            raise HostEnvError(
                f"env.difficulty={difficulty!r} is invalid: choose one of {list(levels)}"
            )
        factory = functools.partial(_popgym_env, rest, str(difficulty))
    try:
        env = factory()
    except UnsupportedSpace as err:
        raise HostEnvError(f"env.name={name!r}: {err}") from None
    except ModuleNotFoundError as err:
        extra = INSTALL_HINT if suite == "gymnasium" else "pip install 'stoixlite[reference]'"
        raise HostEnvError(f"env.name={name!r} needs {err.name}, not installed: {extra}") from None
    except Exception as err:  # the env's own refusal of its kwargs
        only = str(err).strip().splitlines()
        raise HostEnvError(
            f"env.name={name!r} cannot be made: {only[0] if only else type(err).__name__}"
        ) from None
    try:
        spec = getattr(env, "spec", None)
        limit = getattr(spec, "max_episode_steps", None)
        if suite == "popgym_ref":
            from stoixlite.envs.registry import make

            limit = make(f"popgym/{rest}", difficulty=difficulty).max_episode_steps
        label = name if suite == "gymnasium" else f"{name}(difficulty={difficulty!r})"
        return HostSource(
            label=label,
            make=factory,
            observation_space=observation_spec(env.observation_space),
            action_space=action_spec(env.action_space),
            max_episode_steps=limit,
        )
    finally:
        env.close()
