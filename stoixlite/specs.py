"""Specs shared by environments and networks: the action and observation spaces, and which
observations are images (:func:`image_shape`).

A neutral module so that neither side imports the other: envs declare their spaces with these
classes (re-exported by :mod:`stoixlite.envs.types`), and the actor-critic picks its policy head
from the action space without knowing any environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp


@dataclass(frozen=True)
class Discrete:
    """A discrete action (or observation) space with ``n`` choices ``0..n-1``."""

    n: int
    shape: tuple[int, ...] = ()
    dtype: Any = jnp.int32


@dataclass(frozen=True)
class Box:
    """A box space: an array of ``shape`` with elementwise bounds ``low``/``high`` (floats)."""

    low: float | tuple[float, ...]
    high: float | tuple[float, ...]
    shape: tuple[int, ...]
    dtype: Any = jnp.float32


Space = Discrete | Box


def image_shape(space: Space) -> tuple[int, int, int] | None:
    """``(height, width, channels)`` of an image observation space (a :class:`Box` of rank 3,
    ``[H, W, C]``), ``None`` for any other space (vectors ``[F]``, scalars).

    Image observations are read by the convolutional encoder (``network.encoder=cnn``); their
    dtype may be ``uint8`` (pixel intensities 0..255, scaled to [0, 1] inside the network) or a
    float type (used as given).
    """
    if isinstance(space, Box) and len(space.shape) == 3:
        height, width, channels = (int(n) for n in space.shape)
        return height, width, channels
    return None
