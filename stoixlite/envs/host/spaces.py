"""Gymnasium spaces as stoixlite's specs (:mod:`stoixlite.specs`), and what is refused.

Observations: a ``Box`` of rank 1 or an image ``Box`` ``[H, W, C]`` is kept as it is; every other
supported space is flattened by Gymnasium's ``FlattenObservation`` into a float vector
(``Discrete`` -> one-hot, ``MultiDiscrete`` -> concatenated one-hots, ``MultiBinary`` and ``Box``
of other ranks -> their values, ``Dict`` (keys sorted) and ``Tuple`` -> the concatenation of
their parts). Actions: ``Discrete(n, start)`` (the policy picks ``0..n-1``; ``start`` is added
before the env sees it) and a float ``Box`` (a Gaussian policy; the action is clipped to the
bounds). Anything else is refused with :class:`UnsupportedSpace`, one line.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from stoixlite.specs import Box, Discrete, Space

_FLAT_PARTS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


class UnsupportedSpace(ValueError):
    """A space stoixlite cannot map (one line naming it and what is supported)."""


def _kind(space: Any) -> str:
    return type(space).__name__


def flattenable(space: Any) -> bool:
    """Whether Gymnasium's ``flatten`` gives a fixed-size vector of ``space``."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return all(flattenable(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(flattenable(s) for s in space.spaces)
    return _kind(space) in _FLAT_PARTS


def keeps_observation(space: Any) -> bool:
    """Whether an observation space is used as it is (a ``Box`` of rank 1 or 3), not flattened."""
    import gymnasium as gym

    return isinstance(space, gym.spaces.Box) and len(space.shape) in (1, 3)


def observation_spec(space: Any) -> Box:
    """The :class:`~stoixlite.specs.Box` of an observation space after the flattening (if any).

    Raises :class:`UnsupportedSpace` for spaces without a fixed-size encoding (``Text``,
    ``Graph``, ``Sequence``, ...).
    """
    import gymnasium as gym

    if keeps_observation(space):
        return Box(
            low=_bounds(space.low),
            high=_bounds(space.high),
            shape=tuple(space.shape),
            dtype=jnp.uint8 if space.dtype == np.uint8 else jnp.float32,
        )
    if not flattenable(space):
        raise UnsupportedSpace(
            f"observation space {space} is not supported: use Box, Discrete, MultiDiscrete, "
            "MultiBinary, or a Dict/Tuple of them (flattened)"
        )
    flat = gym.spaces.flatten_space(space)
    return Box(low=_bounds(flat.low), high=_bounds(flat.high), shape=tuple(flat.shape))


def action_spec(space: Any) -> Space:
    """The policy's action space of an env action space (``Discrete`` or a float ``Box``).

    Raises :class:`UnsupportedSpace` for the others (``MultiDiscrete``, ``MultiBinary``,
    ``Dict``, ``Tuple``, ...: the actor-critic has a categorical and a Gaussian head only).
    """
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return Discrete(int(space.n))
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return Box(low=_bounds(space.low), high=_bounds(space.high), shape=tuple(space.shape))
    raise UnsupportedSpace(
        f"action space {space} is not supported: use Discrete or a float Box (the policy "
        "heads are categorical and Gaussian)"
    )


def env_action(space: Any, actions: np.ndarray) -> np.ndarray:
    """The batch of policy ``actions`` as the env takes them: ``+ start`` for ``Discrete``,
    clipped to the bounds for ``Box``."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return (np.asarray(actions, np.int64) + int(space.start)).astype(space.dtype)
    return np.clip(actions, space.low, space.high).astype(space.dtype)


def _bounds(values: np.ndarray) -> float | tuple[float, ...]:
    flat = np.asarray(values, np.float64).reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return float(flat[0])
    return tuple(float(x) for x in flat)
