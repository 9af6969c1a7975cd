"""PositionOnlyPendulum: gymnasium Pendulum observing only ``(cos theta, sin theta)``.

Port of ``popgym.envs.position_only_pendulum`` (popgym 1.0.7 on gymnasium's ``PendulumEnv``). This
module also holds the pendulum physics shared with ``noisy_position_only_pendulum``.

Dynamics (gymnasium Pendulum, same operation order): ``theta ~ U(-pi, pi)``,
``theta_dot ~ U(-1, 1)`` at reset. A step with torque ``u = clip(action[0], -2, 2)`` (float32):

* cost ``= angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2`` (the ``u`` term in float32, as
  numpy computes it), in ``[0, 16.2736044]``;
* ``theta_dot <- clip(theta_dot + (15 sin(theta) + 3 u) 0.05, -8, 8)``,
  ``theta <- theta + 0.05 theta_dot``;
* reward (popgym's scaling): ``(-cost + 8.1368022) / 8.1368022 / L`` in ``[-1/L, 1/L]``, so the
  return lies in ``[-1, 1]`` (1 only for a pendulum upright and still from the first step);
* never terminated; truncated after ``L`` steps (time limit, discount 1).

Actions: ``Box(-2, 2, (1,))`` float32. **The env clips** the torque to ``[-2, 2]`` exactly as the
reference does, so a policy may emit unbounded actions (the Gaussian head samples unbounded
actions; see :class:`stoixlite.networks.distributions.Gaussian`). A NaN torque is an invalid move:
no torque is applied and the step is charged the cost of the largest valid torque (``|u| = 2``),
the worst valid reward at that state.

Observation: float32 ``[2] = (cos theta, sin theta)`` computed in ``physics_dtype`` and cast.

Precision: popgym integrates in float64; the port uses ``physics_dtype`` (float32 by default,
float64 under ``jax.enable_x64``). See ``position_only_cartpole`` for why the tests prove equality
one step at a time from the reference's state along whole episodes, and open loop over bounded
horizons.

Difficulties (popgym ``PositionOnlyPendulum{Easy,Medium,Hard}``): ``L`` = 200, 150, 100.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.control import PhysicsEnv, PhysicsState
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
M = 1.0
L_POLE = 1.0
RESET_HIGH = (math.pi, 1.0)
REWARD_LOW, REWARD_HIGH = -16.2736044, 0.0
REWARD_HALF_RANGE = (REWARD_HIGH - REWARD_LOW) / 2

DIFFICULTY_PARAMS = {
    "easy": {"max_episode_length": 200},
    "medium": {"max_episode_length": 150},
    "hard": {"max_episode_length": 100},
}
# physics: ``[2]`` (theta, theta_dot) in ``physics_dtype``.
PendulumState = PhysicsState


def angle_normalize(x: jax.Array) -> jax.Array:
    """``((x + pi) % (2 pi)) - pi`` (gymnasium's ``angle_normalize``)."""
    return ((x + math.pi) % (2 * math.pi)) - math.pi


def pendulum_physics_step(physics: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One gymnasium Pendulum step: ``(physics [2], action [1]) -> (physics [2], cost)``."""
    dtype = physics.dtype
    c = lambda v: jnp.asarray(v, dtype)
    th, thdot = physics[0], physics[1]
    raw = jnp.asarray(action, jnp.float32).reshape(-1)[0]
    # An invalid (NaN) torque applies none but is charged as the costliest valid torque.
    valid = ~jnp.isnan(raw)
    u = jnp.clip(jnp.where(valid, raw, 0.0), -MAX_TORQUE, MAX_TORQUE)
    # numpy: ``0.001 * (u**2)`` and ``3.0 / (m * l**2) * u`` stay float32 (u is a float32 scalar).
    u_squared = jnp.where(valid, u * u, jnp.float32(MAX_TORQUE**2))
    u_cost = (jnp.float32(0.001) * u_squared).astype(dtype)
    u_acc = (jnp.float32(3.0 / (M * L_POLE**2)) * u).astype(dtype)
    costs = jnp.square(angle_normalize(th)) + c(0.1) * jnp.square(thdot) + u_cost
    newthdot = thdot + (c(3 * G / (2 * L_POLE)) * jnp.sin(th) + u_acc) * c(DT)
    newthdot = jnp.clip(newthdot, c(-MAX_SPEED), c(MAX_SPEED))
    newth = th + newthdot * c(DT)
    return jnp.stack([newth, newthdot]), costs


class PositionOnlyPendulum(PhysicsEnv):
    """JAX port of ``popgym.envs.position_only_pendulum.PositionOnlyPendulum`` (see module doc)."""

    def __init__(self, max_episode_length: int = 200, physics_dtype=jnp.float32):
        super().__init__(max_episode_length, physics_dtype)
        self.observation_space = Box(-1.0, 1.0, (2,), jnp.float32)
        self.action_space = Box(-MAX_TORQUE, MAX_TORQUE, (1,), jnp.float32)

    def _obs_after_step(self, physics: jax.Array) -> jax.Array:
        th = physics[0]
        return jnp.stack([jnp.cos(th), jnp.sin(th)]).astype(jnp.float32)

    def reward_transform(self, costs: jax.Array) -> jax.Array:
        """popgym's scaling of gymnasium's reward ``-costs`` to ``[-1/L, 1/L]``."""
        return (-costs + REWARD_HALF_RANGE) / REWARD_HALF_RANGE / self.max_episode_length

    def initial_physics(self, key: jax.Array) -> jax.Array:
        """``theta ~ U(-pi, pi)``, ``theta_dot ~ U(-1, 1)``."""
        high = jnp.asarray(RESET_HIGH, self.physics_dtype)
        return jax.random.uniform(key, (2,), self.physics_dtype, minval=-high, maxval=high)

    def physics_step(self, physics: jax.Array, action: jax.Array):
        """gymnasium's step with popgym's reward scaling; never terminated."""
        physics, costs = pendulum_physics_step(physics, action)
        return physics, self.reward_transform(costs), False


@register_env(
    "popgym/position_only_pendulum",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("position_only_pendulum", "PositionOnlyPendulum"),
)
def make_position_only_pendulum(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> PositionOnlyPendulum:
    """PositionOnlyPendulum at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return PositionOnlyPendulum(**params, physics_dtype=physics_dtype)
