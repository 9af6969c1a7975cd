"""Mazes of the labyrinth envs (``popgym.core.maze`` with mazelib's ``HuntAndKill``), in JAX.

**Maze generation.** popgym builds each maze with ``mazelib.generate.HuntAndKill`` (random hunt
order) and ``Maze.generate_entrances(start_outer=True)``. For a maze of ``h x w`` blocks the grid
is ``H x W = (2h + 1) x (2w + 1)`` (1 = wall, 0 = free); blocks sit at odd coordinates. mazelib:

1. walls everywhere; a random block ``(randrange(1, H, 2), randrange(1, W, 2))`` is carved;
2. a random walk from the current block: while it has neighbouring blocks (2 cells away, in the
   order up, down, left, right) that are still walls, carve a uniformly chosen one and the wall
   between, and move there;
3. hunt: the next start is another random block; a walk only proceeds from a carved block with
   uncarved neighbours. There are ``H * W`` hunts in all, then generation stops, even if a few
   blocks are still uncarved (mazelib accepts that small risk, and so does popgym);
4. the entrances: a side ``randrange(4)`` (north, south, west, east); the start is a random odd
   cell on that outer wall, the end one on the opposite wall.

:func:`hunt_and_kill` is that algorithm as a function of its random decisions (the start block,
the ``H * W`` hunt blocks and one uniform number per carve), so the test drives mazelib and this
port with the same decisions and compares the grids cell for cell. Hunts that land on an
uncarved block, or on a block without uncarved neighbours, change nothing in mazelib; the port
jumps over them in one vectorised search, so a maze takes at most ``2 h w`` loop iterations
instead of ``H W + h w``.

**Cells and moves** (popgym's ``Cell`` and ``Actions``): FREE 0, OBSTACLE 1, START 2, GOAL 3
(HIDDEN 4 is never observed); actions LEFT 0, RIGHT 1, UP 2, DOWN 3 (NONE 4 is the "previous
action" after a reset). The start cell, on the outer wall, is marked START and is walkable.
A move is clipped to the grid and blocked by walls.

**Observation** (popgym ``MultiDiscrete([5] * 10)``): the 3x3 local view of the grid around the
agent, row-major, then the previous action; each of the 10 entries one-hot over 5 values (50
float32). popgym pads the view with walls *after* the cells it slices: at the top row or left
column the view is not centred on the agent (the agent is in its first row or column, followed
by the next one, then a wall padding), and the port reproduces that.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.actions import is_valid_action
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

FREE, OBSTACLE, START, GOAL = 0, 1, 2, 3
NUM_CELL_TYPES = 5  # popgym's Cell has HIDDEN = 4 too
NUM_ACTIONS = 4
NO_ACTION = 4  # popgym's Actions.NONE, the "previous action" of the reset observation
VIEW_SIZE = 9
OBS_DIM = (VIEW_SIZE + 1) * NUM_CELL_TYPES

# (d_row, d_col) of LEFT, RIGHT, UP, DOWN. numpy constants, so that importing this module does
# not start JAX's backend (a later XLA_FLAGS or device choice would be ignored).
MOVES = np.array([(0, -1), (0, 1), (-1, 0), (1, 0)], np.int32)
# mazelib's neighbour order in ``_find_neighbors``: up, down, left, right (two cells away).
_NEIGHBOURS = np.array([(-2, 0), (2, 0), (0, -2), (0, 2)], np.int32)

DIFFICULTY_PARAMS = {
    "easy": {"maze_dims": (10, 10), "episode_length": 1024},
    "medium": {"maze_dims": (14, 14), "episode_length": 1024},
    "hard": {"maze_dims": (18, 18), "episode_length": 1024},
}


@struct.dataclass
class MazeDraws:
    """The random decisions of one maze, for ``h x w`` blocks (grid ``H x W``).

    start: int32 ``[2]`` first block; hunts: int32 ``[H * W, 2]`` hunt blocks; walk: float32
    ``[h * w]`` uniforms in [0, 1), the k-th picks the k-th carve among the uncarved neighbours;
    side: int32 entrance side (0 north, 1 south, 2 west, 3 east); entrances: int32 ``[2]`` the odd
    offsets along that side of the start and the end.
    """

    start: jax.Array
    hunts: jax.Array
    walk: jax.Array
    side: jax.Array
    entrances: jax.Array


def sample_draws(key: jax.Array, blocks: tuple[int, int]) -> MazeDraws:
    """i.i.d. uniform decisions, distributed as mazelib's ``randrange``/``choice`` calls."""
    h, w = blocks
    grid_h, grid_w = 2 * h + 1, 2 * w + 1
    k_start, k_hunt, k_walk, k_side, k_ent = jax.random.split(key, 5)
    high = jnp.array([h, w], jnp.int32)
    start = 1 + 2 * jax.random.randint(k_start, (2,), 0, high)
    hunts = 1 + 2 * jax.random.randint(k_hunt, (grid_h * grid_w, 2), 0, high)
    side = jax.random.randint(k_side, (), 0, 4)
    along = jnp.where(side < 2, w, h)  # north/south entrances are columns, west/east rows
    entrances = 1 + 2 * jax.random.randint(k_ent, (2,), 0, along)
    walk = jax.random.uniform(k_walk, (h * w,))
    return MazeDraws(start, hunts, walk, side, entrances)


def _open_neighbours(grid: jax.Array, row: jax.Array, col: jax.Array) -> jax.Array:
    """bool ``[4]``: which of the 4 blocks two cells away (mazelib's order) are still walls."""
    grid_h, grid_w = grid.shape
    rows, cols = row + _NEIGHBOURS[:, 0], col + _NEIGHBOURS[:, 1]
    inside = (rows >= 1) & (rows <= grid_h - 2) & (cols >= 1) & (cols <= grid_w - 2)
    walls = grid[jnp.clip(rows, 0, grid_h - 1), jnp.clip(cols, 0, grid_w - 1)] == OBSTACLE
    return inside & walls


def _walk_origins(grid: jax.Array) -> jax.Array:
    """bool ``[H, W]``: carved cells with an uncarved block two cells away (a walk goes on)."""
    wall = jnp.pad(grid == OBSTACLE, 2, constant_values=False)
    grid_h, grid_w = grid.shape
    near = sum(
        wall[2 + dr : 2 + dr + grid_h, 2 + dc : 2 + dc + grid_w] for dr, dc in _NEIGHBOURS.tolist()
    )
    # Only odd (block) cells are queried; their neighbours two cells away lie inside the grid
    # or in the padding, which is not a wall, as mazelib's bounds checks require.
    return (grid == FREE) & (near > 0)


def hunt_and_kill(draws: MazeDraws, blocks: tuple[int, int]) -> jax.Array:
    """mazelib's ``HuntAndKill(..., hunt_order="random").generate()`` for these decisions.

    Returns the int32 grid ``[2h + 1, 2w + 1]``: 1 wall, 0 free (no entrances yet).
    """
    h, w = blocks
    grid = jnp.ones((2 * h + 1, 2 * w + 1), jnp.int32).at[draws.start[0], draws.start[1]].set(FREE)
    num_hunts = draws.hunts.shape[0]

    def walk_step(carry):
        grid, pos, next_hunt, carves, _ = carry
        options = _open_neighbours(grid, pos[0], pos[1])
        count = options.sum()
        pick = jnp.minimum((draws.walk[carves] * count).astype(jnp.int32), count - 1)
        choice = jnp.argmax(jnp.cumsum(options) == pick + 1)
        target = pos + jnp.asarray(_NEIGHBOURS)[choice]
        between = (pos + target) // 2
        carved = grid.at[target[0], target[1]].set(FREE).at[between[0], between[1]].set(FREE)
        # Stuck: jump to the next hunt that starts a walk (the others change nothing).
        origins = _walk_origins(grid)[draws.hunts[:, 0], draws.hunts[:, 1]]
        origins &= jnp.arange(num_hunts) >= next_hunt
        found = origins.any()
        hunt = jnp.argmax(origins)
        stuck = count == 0
        return (
            jnp.where(stuck, grid, carved),
            jnp.where(stuck, draws.hunts[hunt], target),
            jnp.where(stuck, hunt + 1, next_hunt),
            jnp.where(stuck, carves, carves + 1),
            stuck & ~found,
        )

    init = (grid, draws.start, jnp.int32(0), jnp.int32(0), jnp.bool_(False))
    return jax.lax.while_loop(lambda c: ~c[4], walk_step, init)[0]


def entrances(draws: MazeDraws, grid_shape: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """``(start, end)``, int32 ``[2]`` each: mazelib's ``_generate_outer_entrances``.

    North: start ``(0, a)``, end ``(H - 1, b)``; south the reverse; west: start ``(a, 0)``, end
    ``(b, W - 1)``; east the reverse. (The start and end can never be adjacent, so mazelib's retry
    never happens.)
    """
    grid_h, grid_w = grid_shape
    a, b = draws.entrances[0], draws.entrances[1]
    starts = jnp.array([(0, a), (grid_h - 1, a), (a, 0), (a, grid_w - 1)], jnp.int32)
    ends = jnp.array([(grid_h - 1, b), (0, b), (b, grid_w - 1), (b, 0)], jnp.int32)
    return starts[draws.side], ends[draws.side]


def local_view(grid: jax.Array, pos: jax.Array) -> jax.Array:
    """popgym's ``MazeEnv.local_view``: int32 ``[9]``, the 3x3 window, walls padded after it."""
    grid_h, grid_w = grid.shape
    offsets = jnp.arange(3)
    rows = jnp.maximum(pos[0] - 1, 0) + offsets
    cols = jnp.maximum(pos[1] - 1, 0) + offsets
    row_ok = rows <= jnp.minimum(pos[0] + 1, grid_h - 1)
    col_ok = cols <= jnp.minimum(pos[1] + 1, grid_w - 1)
    cells = grid[jnp.clip(rows, 0, grid_h - 1)[:, None], jnp.clip(cols, 0, grid_w - 1)[None, :]]
    return jnp.where(row_ok[:, None] & col_ok[None, :], cells, OBSTACLE).reshape(VIEW_SIZE)


@struct.dataclass
class MazeState:
    """grid: int32 ``[H, W]`` (FREE/OBSTACLE/START/GOAL); explored: bool ``[H, W]`` cells visited;
    position: int32 ``[2]`` (row, col); timestep: int32; free_cells: float32, the number of FREE
    cells (START excluded), popgym's exploration reward denominator."""

    grid: jax.Array
    explored: jax.Array
    position: jax.Array
    timestep: jax.Array
    free_cells: jax.Array


class MazeEnv(Environment[MazeState]):
    """Base of the labyrinth ports: maze generation, moves and observations (module docstring).

    ``maze_dims`` is popgym's (even) size in cells; the maze has ``maze_dims // 2`` blocks per
    side and a ``(maze_dims + 1)`` square grid. Subclasses define ``mark_goal`` and ``outcome``.
    """

    mark_goal = False

    def __init__(self, maze_dims: tuple[int, int] = (10, 10), episode_length: int = 1024):
        if maze_dims[0] % 2 or maze_dims[1] % 2 or maze_dims[0] != maze_dims[1]:
            raise ValueError(f"maze_dims must be square and even (as popgym's), got {maze_dims}")
        self.maze_dims = (int(maze_dims[0]), int(maze_dims[1]))
        self.blocks = (self.maze_dims[0] // 2, self.maze_dims[1] // 2)
        self.grid_shape = (self.maze_dims[0] + 1, self.maze_dims[1] + 1)
        self.max_episode_length = int(episode_length)
        # popgym truncates when the step counter reaches episode_length - 1.
        self.max_episode_steps = self.max_episode_length - 1
        self.neg_reward_scale = -1.0 / self.max_episode_length
        self.observation_space = Box(0.0, 1.0, (OBS_DIM,), jnp.float32)
        self.action_space = Discrete(NUM_ACTIONS)

    def observation(self, grid: jax.Array, position: jax.Array, action: jax.Array) -> jax.Array:
        """float32 ``[50]``: one-hot local view (9 x 5) then one-hot previous action (5)."""
        codes = jnp.concatenate([local_view(grid, position), jnp.reshape(action, (1,))])
        return jax.nn.one_hot(codes, NUM_CELL_TYPES, dtype=jnp.float32).reshape(OBS_DIM)

    def reset_from_maze(
        self, maze: jax.Array, start: jax.Array, end: jax.Array
    ) -> tuple[MazeState, TimeStep]:
        """Start an episode in ``maze`` (int ``[H, W]``, 1 wall / 0 free) from the outer-wall
        cell ``start`` (row, col); ``end`` is the exit, marked GOAL when the env has one."""
        start = jnp.asarray(start, jnp.int32)
        end = jnp.asarray(end, jnp.int32)
        grid = jnp.asarray(maze, jnp.int32).at[start[0], start[1]].set(START)
        if self.mark_goal:
            grid = grid.at[end[0], end[1]].set(GOAL)
        state = MazeState(
            grid=grid,
            explored=jnp.zeros(self.grid_shape, bool).at[start[0], start[1]].set(True),
            position=start,
            timestep=jnp.asarray(0, jnp.int32),
            free_cells=(grid == FREE).sum().astype(jnp.float32),
        )
        return state, restart(self.observation(grid, start, jnp.int32(NO_ACTION)))

    def reset_from_draws(self, draws: MazeDraws) -> tuple[MazeState, TimeStep]:
        """Start an episode in the maze that mazelib builds from the decisions ``draws``."""
        start, end = entrances(draws, self.grid_shape)
        return self.reset_from_maze(hunt_and_kill(draws, self.blocks), start, end)

    def reset(self, key: jax.Array) -> tuple[MazeState, TimeStep]:
        return self.reset_from_draws(sample_draws(key, self.blocks))

    def move(self, state: MazeState, action: jax.Array) -> jax.Array:
        """popgym's ``MazeEnv.move``: the new position, clipped to the grid, unchanged at a wall.

        An invalid action does not move (a blocked move)."""
        high = jnp.array(self.grid_shape, jnp.int32) - 1
        valid = is_valid_action(self.action_space, action)
        delta = jnp.where(valid, jnp.asarray(MOVES)[jnp.where(valid, action, 0)], 0)
        target = jnp.clip(state.position + delta, 0, high)
        blocked = state.grid[target[0], target[1]] == OBSTACLE
        return jnp.where(blocked, state.position, target)

    def outcome(self, new_state: MazeState, new_square: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(reward, terminated)`` of the step that led to ``new_state`` (``new_square``: the
        cell it entered had not been visited before)."""
        raise NotImplementedError

    def step(self, state: MazeState, action: jax.Array) -> tuple[MazeState, TimeStep]:
        position = self.move(state, action)
        new_square = ~state.explored[position[0], position[1]]
        new_state = state.replace(
            explored=state.explored.at[position[0], position[1]].set(True),
            position=position,
            timestep=state.timestep + 1,
        )
        reward, terminated = self.outcome(new_state, new_square)
        truncated = (new_state.timestep == self.max_episode_length - 1) & ~terminated
        # The observation's previous-action entry of an invalid action is popgym's NONE.
        shown = jnp.where(is_valid_action(self.action_space, action), action, NO_ACTION)
        obs = self.observation(new_state.grid, position, shown)
        return new_state, transition(obs, reward, terminated, truncated)
