"""LabyrinthExplore: visit every cell of a random maze (``popgym.envs.labyrinth_explore``).

Dynamics (identical to popgym 1.0.7, whose mazes come from mazelib 0.9.16; maze generation, moves
and the observation in :mod:`stoixlite.envs.popgym.labyrinth`): the agent starts on the START cell
of the outer wall (there is no exit: the other entrance stays a wall). A step onto a cell not
visited before earns ``1/F`` (``F`` = the number of FREE cells, the START cell excluded); any other
step, including a blocked move, costs ``-1/L`` (``L`` = 1024). The episode terminates once every
walkable cell has been visited (maximum return 1 minus ``1/L`` per revisit) and is truncated when
popgym's step counter reaches ``L - 1`` (at most 1023 steps). Returns lie in ``[-1023/1024, 1]``.

Action: ``Discrete(4)`` (left, right, up, down); the observation (50 float32) already holds the
previous action. Difficulties as in :mod:`stoixlite.envs.popgym.labyrinth_escape`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.labyrinth import DIFFICULTY_PARAMS, OBSTACLE, MazeEnv, MazeState
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env


class LabyrinthExplore(MazeEnv):
    """JAX port of ``popgym.envs.labyrinth_explore.LabyrinthExplore`` (see module docstring)."""

    def outcome(self, new_state: MazeState, new_square: jax.Array) -> tuple[jax.Array, jax.Array]:
        reward = jnp.where(new_square, 1.0 / new_state.free_cells, self.neg_reward_scale)
        explored_all = jnp.all((new_state.grid != OBSTACLE) == new_state.explored)
        return reward, explored_all


@register_env(
    "popgym/labyrinth_explore",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("labyrinth_explore", "LabyrinthExplore"),
)
def make_labyrinth_explore(difficulty: str = "easy") -> LabyrinthExplore:
    """LabyrinthExplore at ``difficulty`` (easy | medium | hard)."""
    return LabyrinthExplore(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
