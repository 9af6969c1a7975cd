"""Environments: the pure-functional env API, wrappers and the registry.

Create a wrapped, batched env with::

    from stoixlite.envs import make, make_batched_env

    env = make_batched_env(make("gymnax/CartPole-v1"), num_envs=8, obs_augment=False)

(``VmapWrapper(wrap_env(...), num_envs)`` is the same stack, but computes every env's reset on
every step; ``make_batched_env`` only on steps where some env is done.)
"""

from stoixlite.envs.registry import available_envs, make, register_env
from stoixlite.envs.types import (
    FIRST,
    LAST,
    MID,
    Box,
    Discrete,
    Environment,
    TimeStep,
    restart,
    transition,
)
from stoixlite.envs.wrappers import (
    AutoResetWrapper,
    EpisodeStatsWrapper,
    ObsAugmentWrapper,
    VmapWrapper,
    Wrapper,
    make_batched_env,
    wrap_env,
)

__all__ = [
    "FIRST",
    "LAST",
    "MID",
    "AutoResetWrapper",
    "Box",
    "Discrete",
    "Environment",
    "EpisodeStatsWrapper",
    "ObsAugmentWrapper",
    "TimeStep",
    "VmapWrapper",
    "Wrapper",
    "available_envs",
    "make",
    "make_batched_env",
    "register_env",
    "restart",
    "transition",
    "wrap_env",
]
