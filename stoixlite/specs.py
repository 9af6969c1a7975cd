"""Specs shared by environments and networks: the action and observation spaces.

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
