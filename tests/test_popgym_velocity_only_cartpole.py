"""VelocityOnlyCartPole port vs popgym.envs.velocity_only_cartpole, replayed step for step.

popgym's quirk is reproduced: the first observation of an episode is (x, theta) (its reset is the
position-only one), every later one is (x_dot, theta_dot).

Open-loop replays (harness) run the port in float64 (``jax.enable_x64``) and float32 over whole
random-action episodes and the first 200 steps of balancing (oracle) episodes; whole oracle
episodes up to the time limit are checked one step at a time from the reference's exact state
(see ``popgym_physics``). The time limit is a truncation (discount 1), never a termination. The
tests are those of :class:`popgym_physics.CartPoleTests`, shared with PositionOnlyCartPole.
"""

from __future__ import annotations

from popgym.envs import velocity_only_cartpole as ref_module
from popgym_harness import reference_classes
from popgym_physics import CartPoleTests

from stoixlite.envs.popgym import velocity_only_cartpole as port


class TestVelocityOnlyCartPole(CartPoleTests):
    name = "velocity_only_cartpole"
    make_port = port.make_velocity_only_cartpole
    port_class = port.VelocityOnlyCartPole
    reference = reference_classes(ref_module, "VelocityOnlyCartPole")
    step_obs = [1, 3]  # (x_dot, theta_dot); the reset observation is (x, theta)
