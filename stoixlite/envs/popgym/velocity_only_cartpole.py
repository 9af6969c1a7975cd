"""VelocityOnlyCartPole: CartPole observing only the cart and pole velocities.

Port of ``popgym.envs.velocity_only_cartpole`` (popgym 1.0.7). Physics, rewards (``1/L`` per step,
return in ``[0, 1]``), termination and the time-limit truncation are those of
:mod:`stoixlite.envs.popgym.position_only_cartpole`.

Observation: float32 ``[2]``. After a step it is ``(x_dot, theta_dot)``. After a reset popgym
returns ``(x, theta)`` (its ``reset`` is copied from the position-only env); the port reproduces
this quirk exactly, so the first observation of every episode holds positions, not velocities.
Bounds: ``Box(-inf, inf, (2,))``.

Difficulties (popgym ``VelocityOnlyCartPole{Easy,Medium,Hard}``): ``L`` = 200, 400, 600.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.position_only_cartpole import DIFFICULTY_PARAMS, PositionOnlyCartPole
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env


class VelocityOnlyCartPole(PositionOnlyCartPole):
    """JAX port of ``popgym.envs.velocity_only_cartpole.VelocityOnlyCartPole``."""

    obs_high = (float("inf"), float("inf"))

    def _obs_after_step(self, physics: jax.Array) -> jax.Array:
        return physics[jnp.array([1, 3])].astype(jnp.float32)


@register_env(
    "popgym/velocity_only_cartpole",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("velocity_only_cartpole", "VelocityOnlyCartPole"),
)
def make_velocity_only_cartpole(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> VelocityOnlyCartPole:
    """VelocityOnlyCartPole at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return VelocityOnlyCartPole(**params, physics_dtype=physics_dtype)
