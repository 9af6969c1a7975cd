"""A run sized for an accelerator: ``arch.scale_to_envs`` (``preset=gpu`` sets 4096).

An env's config intends a number of PPO updates: ``arch.total_timesteps // (arch.num_envs x
system.rollout_length)`` (the shipped 2M-step configs: 244 updates of 64 envs x 128 steps). A GPU
wants thousands of envs, and raising ``arch.num_envs`` alone divides the updates (4096 envs: 3).
``arch.scale_to_envs=M`` multiplies ``arch.num_envs`` and ``arch.total_timesteps`` by one whole
factor ``k = M // arch.num_envs`` (1 when the config already has M envs or more), so the run steps
``k x num_envs <= M`` envs and does exactly the config's updates, each on ``k`` times the data. The
rest stays: rollout length, epochs, learning rate and its schedule, and ``system.num_minibatches``
(the gradient steps per update), each minibatch ``k`` times larger; evaluation envs too.

:func:`scaled` is applied once, by :func:`stoixlite.config.parse.parse`, and is idempotent: the
scaled config has ``k = 1``, so a run's saved config (the scaled one) resumes as it ran.
"""

from __future__ import annotations

import dataclasses

from stoixlite.config.schema import ArchConfig


def scale_factor(arch: ArchConfig) -> int:
    """``k``: ``arch.scale_to_envs // arch.num_envs``, at least 1 (1 when not set)."""
    if arch.scale_to_envs is None:
        return 1
    return max(1, arch.scale_to_envs // arch.num_envs)


def scaled(arch: ArchConfig) -> ArchConfig:
    """``arch`` with ``num_envs`` and ``total_timesteps`` times :func:`scale_factor`."""
    k = scale_factor(arch)
    if k == 1:
        return arch
    return dataclasses.replace(
        arch, num_envs=k * arch.num_envs, total_timesteps=k * arch.total_timesteps
    )
