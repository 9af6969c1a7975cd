"""MineSweeper on a hidden board (``popgym.envs.minesweeper``).

Dynamics (identical to popgym 1.0.7): ``M`` mines are placed on distinct cells of an ``H x W``
board, uniformly at random. Let ``L = H*W - M`` (the number of free cells, the time limit). Each
step the agent clicks a cell:

* a mine: reward ``-0.5 - 1/L`` and the episode terminates (a loss);
* a free cell clicked before: reward ``-0.5 / (L - 2)``;
* a new free cell: reward ``+1/L``; the cell becomes viewed;
* terminated (a win) once every free cell is viewed; truncated after ``L`` steps when not
  terminated. The maximum return is 1 (click the ``L`` free cells).

Observation: the *neighbour count* of the clicked cell, i.e. the number of mines in the 3x3 window
centred on it, **including the cell itself** (popgym sums the 9 shifts of the zero-padded mine
grid), so clicking a mine shows at least 1. 0 after reset. Encoded as a float32 one-hot of width
``min(M + 1, 10)`` (popgym: ``Discrete(min(M + 1, 10))``).

Action: ``Discrete(H*W)``, cell ``a`` = row ``a // W``, column ``a % W`` (popgym:
``MultiDiscrete([H, W])``). The observation does not say which cell was clicked, so the previous
action must be part of the agent's input (``obs_augment: true`` in the config).

Difficulties (popgym ``MineSweeper{Easy,Medium,Hard}``): ``(H, W, M)`` = (4, 4, 2), (6, 6, 6),
(8, 8, 10); episode limits 14, 30, 54.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.envs.actions import is_valid_action
from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

DIFFICULTY_PARAMS = {
    "easy": {"dims": (4, 4), "num_mines": 2},
    "medium": {"dims": (6, 6), "num_mines": 6},
    "hard": {"dims": (8, 8), "num_mines": 10},
}


@struct.dataclass
class MineSweeperState:
    """mines: bool ``[H, W]``; viewed: bool ``[H, W]`` free cells clicked; neighbours: int32
    ``[H, W]`` mines in each 3x3 window; timestep: int32."""

    mines: jax.Array
    viewed: jax.Array
    neighbours: jax.Array
    timestep: jax.Array


def neighbour_counts(mines: jax.Array) -> jax.Array:
    """Mines in the 3x3 window around each cell, the cell included (int32 ``[H, W]``)."""
    h, w = mines.shape
    padded = jnp.pad(mines.astype(jnp.int32), 1)
    return sum(padded[i : i + h, j : j + w] for i in range(3) for j in range(3))


class MineSweeper(Environment[MineSweeperState]):
    """JAX port of ``popgym.envs.minesweeper.MineSweeper`` (see module docstring)."""

    def __init__(self, dims: tuple[int, int] = (4, 4), num_mines: int = 2):
        self.dims = (int(dims[0]), int(dims[1]))
        self.num_mines = int(num_mines)
        self.num_cells = self.dims[0] * self.dims[1]
        self.max_episode_length = self.num_cells - self.num_mines
        self.max_episode_steps = self.max_episode_length
        self.success_reward = 1.0 / self.max_episode_length
        self.fail_reward = -0.5 - self.success_reward
        self.bad_action_reward = -0.5 / (self.max_episode_length - 2)
        self.num_obs = min(self.num_mines + 1, 10)
        self.observation_space = Box(0.0, 1.0, (self.num_obs,), jnp.float32)
        self.action_space = Discrete(self.num_cells)

    def reset_from_mines(self, mines: jax.Array) -> tuple[MineSweeperState, TimeStep]:
        """Start an episode with the given mine grid (bool/int ``[H, W]``, nonzero = mine)."""
        mines = jnp.asarray(mines).astype(bool).reshape(self.dims)
        state = MineSweeperState(
            mines=mines,
            viewed=jnp.zeros(self.dims, bool),
            neighbours=neighbour_counts(mines),
            timestep=jnp.asarray(0, jnp.int32),
        )
        return state, restart(jax.nn.one_hot(0, self.num_obs, dtype=jnp.float32))

    def reset(self, key: jax.Array) -> tuple[MineSweeperState, TimeStep]:
        cells = jax.random.permutation(key, self.num_cells)[: self.num_mines]
        mines = jnp.zeros(self.num_cells, bool).at[cells].set(True)
        return self.reset_from_mines(mines)

    def step(self, state: MineSweeperState, action: jax.Array) -> tuple[MineSweeperState, TimeStep]:
        # An invalid action clicks no cell: it pays the mine reward (the worst) but ends nothing.
        valid = is_valid_action(self.action_space, action)
        cell = jnp.where(valid, action, 0)
        row, col = cell // self.dims[1], cell % self.dims[1]
        mine = valid & state.mines[row, col]
        seen = state.viewed[row, col]
        reward = jnp.where(
            mine | ~valid,
            self.fail_reward,
            jnp.where(seen, self.bad_action_reward, self.success_reward),
        )
        viewed = state.viewed.at[row, col].set(seen | (valid & ~mine))
        timestep = state.timestep + 1
        terminated = mine | jnp.all(state.mines | viewed)
        truncated = (timestep == self.max_episode_length) & ~terminated
        state = state.replace(viewed=viewed, timestep=timestep)
        count = jnp.where(valid, state.neighbours[row, col], 0)
        obs = jax.nn.one_hot(count, self.num_obs, dtype=jnp.float32)
        return state, transition(obs, reward, terminated, truncated)

    def oracle_action(self, state: MineSweeperState) -> jax.Array:
        """The first free cell not clicked yet (wins with return 1)."""
        return jnp.argmax((~state.mines & ~state.viewed).reshape(-1)).astype(jnp.int32)


@register_env(
    "popgym/minesweeper",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("minesweeper", "MineSweeper", grid_width=lambda env: env.dims[1]),
)
def make_minesweeper(difficulty: str = "easy") -> MineSweeper:
    """MineSweeper at ``difficulty`` (easy | medium | hard)."""
    return MineSweeper(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
