"""PositionOnlyCartPole port vs popgym.envs.position_only_cartpole, replayed step for step.

Open-loop replays (harness) run the port in float64 (``jax.enable_x64``) and float32 over whole
random-action episodes and the first 200 steps of balancing (oracle) episodes; whole oracle
episodes up to the time limit are checked one step at a time from the reference's exact state
(see ``popgym_physics``). The time limit is a truncation (discount 1), never a termination. The
tests are those of :class:`popgym_physics.CartPoleTests`, shared with VelocityOnlyCartPole.
"""

from __future__ import annotations

from popgym.envs import position_only_cartpole as ref_module
from popgym_harness import reference_classes
from popgym_physics import CartPoleTests

from stoixlite.envs.popgym import position_only_cartpole as port


class TestPositionOnlyCartPole(CartPoleTests):
    name = "position_only_cartpole"
    make_port = port.make_position_only_cartpole
    port_class = port.PositionOnlyCartPole
    reference = reference_classes(ref_module, "PositionOnlyCartPole")
    step_obs = [0, 2]  # (x, theta)
