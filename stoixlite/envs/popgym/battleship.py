"""Battleship on a hidden board (``popgym.envs.battleship``).

Dynamics (identical to popgym 1.0.7): ships of sizes ``(2, 3, 3, 4)`` (12 cells) are placed on a
``B x B`` board, one after the other, each uniformly among the placements (cells in a straight
horizontal or vertical line, inside the board) that do not overlap the ships already placed. Each
step the agent fires at a cell:

* a *hit* is a ship cell not fired at before (firing again at a hit cell is a miss);
* observation: 1 on a hit, 0 otherwise (0 after reset);
* reward: ``+1/12`` on a hit, ``-1/(B^2 - 12)`` otherwise, so the return lies in
  ``[-B^2/(B^2 - 12), 1]``; 1 exactly when the first 12 shots are the 12 ship cells;
* terminated when all 12 ship cells are hit; truncated after ``B^2`` steps (terminated wins when
  both happen on the same step).

The observation does not say where the shot went: the previous action must be part of the agent's
input (popgym's ``obs_requires_prev_action``), hence ``obs_augment: true`` in the config.

Encoding: observation = one-hot of the hit bit, float32 ``[2]`` (popgym: ``Discrete(2)``).
Action: ``Discrete(B*B)``, cell ``a`` = row ``a // B``, column ``a % B`` (popgym:
``MultiDiscrete([B, B])`` = ``(row, column)``); flattening keeps the previous-action one-hot of the
observation augmentation a plain one-hot over cells.

Ship placement: popgym draws (start cell, axis, sign) uniformly and rejects invalid placements;
every valid line of cells is reached by the same number of accepted draws (its two ends, for
either size), so the accepted placement is uniform over valid lines. The port samples that
distribution directly, one uniform draw per ship mapped onto the valid placements (no rejection
loop). The tests
inject the reference's board.

Difficulties (popgym ``Battleship{Easy,Medium,Hard}``): ``B`` = 8, 10, 12.
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

SHIP_SIZES = (2, 3, 3, 4)
DIFFICULTY_PARAMS = {
    "easy": {"board_size": 8},
    "medium": {"board_size": 10},
    "hard": {"board_size": 12},
}


@struct.dataclass
class BattleshipState:
    """board: bool ``[B, B]`` ship cells; guesses: bool ``[B, B]`` cells fired at; hits: int32;
    num_steps: int32."""

    board: jax.Array
    guesses: jax.Array
    hits: jax.Array
    num_steps: jax.Array


def _free_lines(board: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    """Valid placements of a ship of ``size`` on ``board`` (bool ``[B, B]``).

    Returns ``(vertical, horizontal)``, bool ``[B, B]``: ``vertical[r, c]`` when cells
    ``(r..r+size-1, c)`` are inside the board and free, ``horizontal[r, c]`` likewise for
    ``(r, c..c+size-1)``.
    """
    b = board.shape[0]
    padded = jnp.pad(board, ((0, size), (0, size)), constant_values=True)
    vertical = jnp.zeros((b, b), bool)
    horizontal = jnp.zeros((b, b), bool)
    for k in range(size):
        vertical = vertical | padded[k : k + b, :b]
        horizontal = horizontal | padded[:b, k : k + b]
    return ~vertical, ~horizontal


def place_ships(key: jax.Array, board_size: int, ship_sizes=SHIP_SIZES) -> jax.Array:
    """A board (bool ``[B, B]``) with ships placed as popgym does (see module docstring)."""
    b = board_size
    board = jnp.zeros((b, b), bool)
    rows = jnp.arange(b)[:, None]
    cols = jnp.arange(b)[None, :]
    for size, sub in zip(ship_sizes, jax.random.split(key, len(ship_sizes)), strict=True):
        vertical, horizontal = _free_lines(board, size)
        valid = jnp.concatenate([vertical.reshape(-1), horizontal.reshape(-1)])
        # Uniform over the valid placements with one uniform draw (inverse CDF of the mask).
        rank = jnp.floor(jax.random.uniform(sub) * valid.sum()).astype(jnp.int32)
        choice = jnp.argmax(jnp.cumsum(valid) > rank)
        is_vertical = choice < b * b
        r, c = (choice % (b * b)) // b, (choice % (b * b)) % b
        in_v = (cols == c) & (rows >= r) & (rows < r + size)
        in_h = (rows == r) & (cols >= c) & (cols < c + size)
        board = board | jnp.where(is_vertical, in_v, in_h)
    return board


class Battleship(Environment[BattleshipState]):
    """JAX port of ``popgym.envs.battleship.Battleship`` (see module docstring)."""

    def __init__(self, board_size: int = 10, ship_sizes: tuple[int, ...] = SHIP_SIZES):
        self.board_size = int(board_size)
        self.ship_sizes = tuple(int(s) for s in ship_sizes)
        self.needed_hits = sum(self.ship_sizes)
        self.max_episode_length = self.board_size**2
        self.max_episode_steps = self.max_episode_length
        self.hit_reward = 1.0 / self.needed_hits
        self.miss_reward = -1.0 / (self.max_episode_length - self.needed_hits)
        self.observation_space = Box(0.0, 1.0, (2,), jnp.float32)
        self.action_space = Discrete(self.board_size**2)

    def reset_from_board(self, board: jax.Array) -> tuple[BattleshipState, TimeStep]:
        """Start an episode on a given board (bool/int ``[B, B]``, nonzero = ship)."""
        b = self.board_size
        state = BattleshipState(
            board=jnp.asarray(board).astype(bool).reshape(b, b),
            guesses=jnp.zeros((b, b), bool),
            hits=jnp.asarray(0, jnp.int32),
            num_steps=jnp.asarray(0, jnp.int32),
        )
        return state, restart(jax.nn.one_hot(0, 2, dtype=jnp.float32))

    def reset(self, key: jax.Array) -> tuple[BattleshipState, TimeStep]:
        return self.reset_from_board(place_ships(key, self.board_size, self.ship_sizes))

    def step(self, state: BattleshipState, action: jax.Array) -> tuple[BattleshipState, TimeStep]:
        # An invalid action fires at no cell: a miss that marks nothing.
        valid = is_valid_action(self.action_space, action)
        cell = jnp.where(valid, action, 0)
        row, col = cell // self.board_size, cell % self.board_size
        hit = valid & state.board[row, col] & ~state.guesses[row, col]
        hits = state.hits + hit.astype(jnp.int32)
        num_steps = state.num_steps + 1
        guesses = state.guesses.at[row, col].set(state.guesses[row, col] | valid)
        state = state.replace(guesses=guesses, hits=hits, num_steps=num_steps)
        reward = jnp.where(hit, self.hit_reward, self.miss_reward)
        terminated = hits == self.needed_hits
        truncated = num_steps >= self.max_episode_length
        obs = jax.nn.one_hot(hit.astype(jnp.int32), 2, dtype=jnp.float32)
        return state, transition(obs, reward, terminated, truncated)

    def oracle_action(self, state: BattleshipState) -> jax.Array:
        """The first ship cell not fired at yet (hits every ship in 12 steps: return 1)."""
        return jnp.argmax((state.board & ~state.guesses).reshape(-1)).astype(jnp.int32)


@register_env(
    "popgym/battleship",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("battleship", "Battleship", grid_width=lambda env: env.board_size),
)
def make_battleship(difficulty: str = "easy") -> Battleship:
    """Battleship at ``difficulty`` (easy | medium | hard)."""
    return Battleship(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
