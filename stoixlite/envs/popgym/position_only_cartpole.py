"""PositionOnlyCartPole: CartPole observing only cart position and pole angle.

Port of ``popgym.envs.position_only_cartpole`` (popgym 1.0.7 on gymnasium's ``CartPoleEnv``). This
module also holds the shared CartPole physics used by ``velocity_only_cartpole`` and
``noisy_position_only_cartpole``.

Dynamics (gymnasium CartPole, Euler integrator, identical operation order): state
``(x, x_dot, theta, theta_dot)`` drawn uniformly from ``[-0.05, 0.05]^4`` at reset; action 1 pushes
right (+10 N), 0 pushes left (an invalid action pushes neither way and earns 0). After each step:

* reward: ``1 / L`` on every step, including the step that terminates (gymnasium returns 1.0 there
  and popgym maps any non-zero reward to ``1/L``), so the return lies in ``[0, 1]`` and equals 1
  exactly when the pole is balanced for all ``L`` steps;
* terminated: ``|x| > 2.4`` or ``|theta| > 12 deg`` (discount 0);
* truncated: after ``L`` steps (``max_episode_length``): a time limit, discount 1 (bootstrap).
  When both happen on step ``L`` the step counts as terminated.

Observation: float32 ``[2] = (x, theta)`` (popgym: ``Box(2,)``), the float64 state cast to float32.

Precision: popgym integrates in float64. The port integrates in ``physics_dtype``: float32 by
default (fast; the same MDP up to rounding), or float64 under ``jax.enable_x64``. One step agrees
with the reference to float rounding (XLA contracts ``a*b - c*d`` into fused multiply-adds and
folds divisions by constants, so even float64 differs by an ulp now and then). The upright pole is
unstable (a perturbation grows like ``exp(4 t)``, t in seconds, 50 steps per second), so replaying a
*fixed action sequence* open loop drifts from the reference after a few seconds of balanced play
in float32 (after ~6 s in float64). The tests therefore prove equality (a) one step at a time from
the reference's exact state along whole oracle episodes (every step up to the time limit) and
(b) open loop over whole random-action episodes and bounded oracle horizons.

Difficulties (popgym ``PositionOnlyCartPole{Easy,Medium,Hard}``): ``L`` = 200, 400, 600.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs.actions import is_valid_action
from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.control import PhysicsEnv, PhysicsState
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete

# gymnasium CartPoleEnv constants (computed in Python float64 exactly as gymnasium does).
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_BOUND = 0.05

DIFFICULTY_PARAMS = {
    "easy": {"max_episode_length": 200},
    "medium": {"max_episode_length": 400},
    "hard": {"max_episode_length": 600},
}
# physics: ``[4]`` (x, x_dot, theta, theta_dot) in ``physics_dtype``.
CartPoleState = PhysicsState


def cartpole_physics_step(physics: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One gymnasium CartPole Euler step: ``(physics [4], action) -> (physics [4], terminated)``.

    Same operation order as ``gymnasium.envs.classic_control.CartPoleEnv.step``, in the dtype of
    ``physics``.
    """
    dtype = physics.dtype
    c = lambda v: jnp.asarray(v, dtype)
    total_mass = c(TOTAL_MASS)
    x, x_dot, theta, theta_dot = physics[0], physics[1], physics[2], physics[3]
    # 1 pushes right, 0 left; any other (invalid) action applies no force.
    force = jnp.where(action == 1, c(FORCE_MAG), jnp.where(action == 0, c(-FORCE_MAG), c(0.0)))
    costheta = jnp.cos(theta)
    sintheta = jnp.sin(theta)
    temp = (force + c(POLEMASS_LENGTH) * jnp.square(theta_dot) * sintheta) / total_mass
    thetaacc = (c(GRAVITY) * sintheta - costheta * temp) / (
        c(LENGTH) * (c(4.0 / 3.0) - c(MASSPOLE) * jnp.square(costheta) / total_mass)
    )
    xacc = temp - c(POLEMASS_LENGTH) * thetaacc * costheta / total_mass
    x = x + c(TAU) * x_dot
    x_dot = x_dot + c(TAU) * xacc
    theta = theta + c(TAU) * theta_dot
    theta_dot = theta_dot + c(TAU) * thetaacc
    terminated = (
        (x < c(-X_THRESHOLD))
        | (x > c(X_THRESHOLD))
        | (theta < c(-THETA_THRESHOLD))
        | (theta > c(THETA_THRESHOLD))
    )
    return jnp.stack([x, x_dot, theta, theta_dot]), terminated


class PositionOnlyCartPole(PhysicsEnv):
    """JAX port of ``popgym.envs.position_only_cartpole.PositionOnlyCartPole`` (module docstring).

    Subclasses choose what is observed by overriding :meth:`_obs_after_reset` and
    :meth:`_obs_after_step` (float32 ``[2]`` from the physics state).
    """

    obs_high = (X_THRESHOLD * 2, THETA_THRESHOLD * 2)

    def __init__(self, max_episode_length: int = 200, physics_dtype=jnp.float32):
        super().__init__(max_episode_length, physics_dtype)
        self.reward_scale = 1.0 / self.max_episode_length
        high = np.asarray(self.obs_high, np.float32)
        self.observation_space = Box(
            tuple(float(v) for v in -high), tuple(float(v) for v in high), (2,), jnp.float32
        )
        self.action_space = Discrete(2)

    def _obs_after_reset(self, physics: jax.Array) -> jax.Array:
        return physics[jnp.array([0, 2])].astype(jnp.float32)

    def _obs_after_step(self, physics: jax.Array) -> jax.Array:
        return physics[jnp.array([0, 2])].astype(jnp.float32)

    def initial_physics(self, key: jax.Array) -> jax.Array:
        """``(x, x_dot, theta, theta_dot)`` uniform in ``[-0.05, 0.05]^4``."""
        return jax.random.uniform(
            key, (4,), self.physics_dtype, minval=-RESET_BOUND, maxval=RESET_BOUND
        )

    def physics_step(self, physics: jax.Array, action: jax.Array):
        """gymnasium's step; every step, the terminating one included, is rewarded ``1/L``, except
        a step with an invalid action, which pushes neither way and earns 0."""
        physics, terminated = cartpole_physics_step(physics, action)
        reward = jnp.where(is_valid_action(self.action_space, action), self.reward_scale, 0.0)
        return physics, reward, terminated

    def oracle_action(self, state: CartPoleState) -> jax.Array:
        """A balancing controller (push towards the side the pole falls to, with x feedback)."""
        return balancing_action(state.physics)


def balancing_action(physics) -> jax.Array:
    """Linear state-feedback controller that balances CartPole for 600+ steps from any reset.

    ``1`` (push right) when ``theta + 0.5 theta_dot + 0.05 x + 0.1 x_dot > 0``. Works on numpy
    (the reference's state) and JAX arrays alike.
    """
    x, x_dot, theta, theta_dot = (physics[i] for i in range(4))
    return (theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0) * 1


@register_env(
    "popgym/position_only_cartpole",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("position_only_cartpole", "PositionOnlyCartPole"),
)
def make_position_only_cartpole(
    difficulty: str = "easy", physics_dtype=jnp.float32
) -> PositionOnlyCartPole:
    """PositionOnlyCartPole at ``difficulty`` (easy | medium | hard)."""
    params = select_difficulty(difficulty, DIFFICULTY_PARAMS)
    return PositionOnlyCartPole(**params, physics_dtype=physics_dtype)
