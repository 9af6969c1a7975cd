"""LabyrinthEscape: find the exit of a random maze (``popgym.envs.labyrinth_escape``).

Dynamics (identical to popgym 1.0.7, whose mazes come from mazelib 0.9.16; maze generation, moves
and the observation in :mod:`stoixlite.envs.popgym.labyrinth`): the agent starts on the START cell
of the outer wall; the exit (GOAL) is on the opposite outer wall. Each step costs ``-1/L`` (``L`` =
1024, popgym's ``episode_length``); reaching the GOAL adds ``+1`` and terminates. popgym truncates
when its step counter reaches ``L - 1``, so an episode lasts at most 1023 steps. Returns lie in
``[-1023/1024, 1 - 1/1024]``.

Action: ``Discrete(4)`` (left, right, up, down). The observation (50 float32) already holds the
previous action, so ``obs_augment`` is not needed. popgym warns that its mazes are solvable
without memory; they are here for completeness of the suite.

Difficulties (popgym ``LabyrinthEscape{Easy,Medium,Hard}``): maze_dims (10, 10), (14, 14),
(18, 18), i.e. 5x5, 7x7 and 9x9 blocks on 11x11, 15x15 and 19x19 grids.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.labyrinth import DIFFICULTY_PARAMS, GOAL, MazeEnv, MazeState
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env


class LabyrinthEscape(MazeEnv):
    """JAX port of ``popgym.envs.labyrinth_escape.LabyrinthEscape`` (see module docstring)."""

    mark_goal = True

    def outcome(self, new_state: MazeState, new_square: jax.Array) -> tuple[jax.Array, jax.Array]:
        at_goal = new_state.grid[new_state.position[0], new_state.position[1]] == GOAL
        reward = self.neg_reward_scale + jnp.where(at_goal, 1.0, 0.0)
        return reward, at_goal


@register_env(
    "popgym/labyrinth_escape",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("labyrinth_escape", "LabyrinthEscape"),
)
def make_labyrinth_escape(difficulty: str = "easy") -> LabyrinthEscape:
    """LabyrinthEscape at ``difficulty`` (easy | medium | hard)."""
    return LabyrinthEscape(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
