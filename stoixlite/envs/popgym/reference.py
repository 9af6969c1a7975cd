"""The popgym originals of the ports, as declared at registration (``reference=``).

A :class:`PopgymReference` says which ``popgym`` class a port reproduces at each difficulty and
how the two talk: the port's observation is popgym's observation encoded as a float32 vector
(:func:`encode_space`, or the port's own ``encode_obs``), and the port's action is popgym's, or
for grid games a flat cell index ``row * width + col`` where popgym takes ``[row, col]``.
``python -m stoixlite.evaluate --reference`` plays a trained policy on the original through it.
``popgym`` is imported only when a reference class is asked for; it comes with the optional
extra ``stoixlite[reference]`` (with gymnasium, and mazelib for the labyrinths).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoixlite.envs.types import Environment


def encode_space(space: Any, obs: Any) -> np.ndarray:
    """Generic float32 encoding of a popgym observation from its gymnasium ``space``.

    Discrete(n) -> one-hot [n]; MultiDiscrete(nvec) -> concatenated one-hots (row-major);
    MultiBinary/Box -> flattened values; Tuple -> concatenation of the encoded parts.
    """
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros(int(space.n), np.float32)
        out[int(obs) - int(space.start)] = 1.0
        return out
    if isinstance(space, gym.spaces.MultiDiscrete):
        values = np.asarray(obs).reshape(-1) - np.asarray(space.start).reshape(-1)
        return np.concatenate(
            [
                np.eye(int(n), dtype=np.float32)[v]
                for n, v in zip(space.nvec.reshape(-1), values, strict=True)
            ]
        )
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return np.asarray(obs, np.float32).reshape(-1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate(
            [encode_space(sub, o) for sub, o in zip(space.spaces, obs, strict=True)]
        )
    raise TypeError(f"unsupported observation space {space}")


@dataclass(frozen=True)
class PopgymReference:
    """``popgym.envs.<module>.<name><Difficulty>`` and the encodings between it and the port.

    ``encode_obs(popgym_obs, **attrs) -> [D]``: the port's encoding when it is not the generic
    :func:`encode_space` (its extra parameters are read from the port env's attributes of the
    same names). ``grid_width(port) -> int``: for grid games, the width of the grid whose cells
    the port's flat actions index (popgym takes ``[row, col]``).
    """

    module: str
    name: str
    encode_obs: Callable[..., np.ndarray] | None = None
    grid_width: Callable[[Any], int] | None = None

    def popgym_class(self, difficulty: str) -> type:
        try:
            module = importlib.import_module(f"popgym.envs.{self.module}")
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] not in ("popgym", "gymnasium", "mazelib"):
                raise
            raise ModuleNotFoundError(
                f"the original popgym envs are an optional extra ({err}): "
                "pip install 'stoixlite[reference]'",
                name=err.name,
            ) from err
        return getattr(module, f"{self.name}{difficulty.capitalize()}")

    def make(self, difficulty: str) -> Any:
        """A fresh popgym env at ``difficulty``."""
        return self.popgym_class(difficulty)()

    def encoder(self, port: Environment, original: Any) -> Callable[[Any], np.ndarray]:
        """``encode(popgym_obs) -> float32 [D]``, the port's observation of it."""
        if self.encode_obs is None:
            space = original.observation_space
            return lambda obs: encode_space(space, obs)
        params = list(inspect.signature(self.encode_obs).parameters)[1:]
        kwargs = {p: getattr(port, p) for p in params}
        encode = self.encode_obs
        return lambda obs: np.asarray(encode(obs, **kwargs), np.float32).reshape(-1)

    def action(self, port: Environment, action: np.ndarray) -> Any:
        """popgym's action for the port's ``action`` (an int, a ``[row, col]`` or a vector)."""
        if self.grid_width is not None:
            width = int(self.grid_width(port))
            return np.array([int(action) // width, int(action) % width])
        if np.ndim(action) == 0 and np.issubdtype(np.asarray(action).dtype, np.integer):
            return int(action)
        return np.asarray(action)
