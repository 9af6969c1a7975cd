"""Environments: the pure-functional env API, wrappers and the registry.

Create a wrapped, batched env with::

    from stoixlite.envs import VmapWrapper, make, wrap_env

    env = VmapWrapper(wrap_env(make("gymnax/CartPole-v1"), obs_augment=False), num_envs=8)
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
    "register_env",
    "restart",
    "transition",
    "wrap_env",
]
