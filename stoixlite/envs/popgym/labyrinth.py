"""Mazes of the labyrinth envs (popgym's ``labyrinth_escape`` / ``labyrinth_explore``), in JAX.

**Maze generation: Hunt-and-Kill**, written from the algorithm's published description (Walter
D. Pullen, "Think Labyrinth: Maze Algorithms"; Jamis Buck, "Mazes for Programmers", 2015): a
maze of ``h x w`` cells is carved as a spanning tree by

1. *kill*: from the current cell, a random walk that knocks down the wall to a uniformly
   chosen neighbour not yet visited and moves there, until the cell has no unvisited neighbour;
2. *hunt*: look for a visited cell that has an unvisited neighbour and walk on from it;
3. stop when the hunt finds none.

popgym draws its mazes with mazelib's Hunt-and-Kill in its random-hunt mode, and these are the
choices that fix which maze comes out, all of them observable behaviour that the tests pin down
against mazelib (never imported here): the hunt looks at uniformly random cells, one at a
time, ``H * W`` looks in all (``H x W = (2h + 1) x (2w + 1)`` is the grid below), and gives up
after them, so a cell can (rarely) stay unvisited; a walk step lists the unvisited neighbours in
the order up, down, left, right and takes one uniformly; the first walk starts at a uniformly
random cell. The entrances then go on the outer wall: a side drawn uniformly (north, south,
west, east), the start at a random cell position along it, the end at one along the opposite
side.

The maze is drawn as a grid of ``(2h + 1) x (2w + 1)`` squares (1 wall, 0 free): cell ``(r, c)``
is the square ``(2r + 1, 2c + 1)``, and the square between two neighbouring cells is free where
the walk knocked that wall down. :func:`hunt_and_kill` computes the maze from its random
decisions (:class:`MazeDraws`: the first cell, the ``H * W`` hunt looks and one uniform number
per knocked-down wall), so that ``tests/test_popgym_labyrinth.py`` can feed the same decisions
to mazelib and compare the grids square for square. It carves one wall per loop iteration:
the walk's next wall, or, when the walk is stuck, the first wall of the walk that the next
successful hunt look starts (the looks in between change nothing). The loop runs ``h w - 1``
iterations, as many as a maze can have walls knocked down, and leaves the maze unchanged after
the last carve: a fixed trip count, so an auto-reset inside the training loop holds no
data-dependent loop.

**Cells and moves** (popgym's ``Cell`` and ``Actions``): FREE 0, OBSTACLE 1, START 2, GOAL 3
(HIDDEN 4 is never observed); actions LEFT 0, RIGHT 1, UP 2, DOWN 3 (NONE 4 is the "previous
action" after a reset). The start cell, on the outer wall, is marked START and is walkable.
A move is clipped to the grid and blocked by walls.

**Observation** (popgym ``MultiDiscrete([5] * 10)``): the 3x3 local view of the grid around the
agent, row-major, then the previous action; each of the 10 entries one-hot over 5 values (50
float32). popgym pads the view with walls *after* the cells it slices: at the top row or left
column the view is not centred on the agent (the agent is in its first row or column, followed
by the next one, then a wall padding), and this module does the same.
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

DIFFICULTY_PARAMS = {
    "easy": {"maze_dims": (10, 10), "episode_length": 1024},
    "medium": {"maze_dims": (14, 14), "episode_length": 1024},
    "hard": {"maze_dims": (18, 18), "episode_length": 1024},
}


@struct.dataclass
class MazeDraws:
    """The random decisions of one maze of ``h x w`` cells (grid ``H x W``), as grid squares.

    start: int32 ``[2]`` the square of the first cell; hunts: int32 ``[H * W, 2]`` the squares of
    the hunt looks; walk: float32 ``[h * w]`` uniforms in [0, 1), the k-th picks the k-th wall
    knocked down among the listed unvisited neighbours; side: int32 entrance side (0 north,
    1 south, 2 west, 3 east); entrances: int32 ``[2]`` the odd offsets along that side of the
    start and the end.
    """

    start: jax.Array
    hunts: jax.Array
    walk: jax.Array
    side: jax.Array
    entrances: jax.Array


def sample_draws(key: jax.Array, blocks: tuple[int, int]) -> MazeDraws:
    """i.i.d. uniform decisions (the distribution of popgym's random draws)."""
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


# (d_row, d_col) of the neighbours of a cell in the order a walk step lists them.
_STEPS = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)], np.int32)


def _unvisited_neighbours(visited: jax.Array) -> jax.Array:
    """bool ``[h, w, 4]``: which neighbours (in :data:`_STEPS` order) of each cell exist and are
    still unvisited."""
    fresh = jnp.pad(~visited, 1, constant_values=False)
    h, w = visited.shape
    return jnp.stack([fresh[1 + dr : 1 + dr + h, 1 + dc : 1 + dc + w] for dr, dc in _STEPS], -1)


def _render(visited: jax.Array, down: jax.Array, right: jax.Array) -> jax.Array:
    """The int32 grid ``[2h + 1, 2w + 1]`` of a maze given by its visited cells and its open
    walls (``down[r, c]``: between cells ``(r, c)`` and ``(r + 1, c)``; ``right[r, c]``: between
    ``(r, c)`` and ``(r, c + 1)``)."""
    h, w = visited.shape
    grid = jnp.ones((2 * h + 1, 2 * w + 1), jnp.int32)
    grid = grid.at[1::2, 1::2].set(jnp.where(visited, FREE, OBSTACLE))
    grid = grid.at[2:-1:2, 1::2].set(jnp.where(down[:-1], FREE, OBSTACLE))
    return grid.at[1::2, 2:-1:2].set(jnp.where(right[:, :-1], FREE, OBSTACLE))


def hunt_and_kill(draws: MazeDraws, blocks: tuple[int, int]) -> jax.Array:
    """The Hunt-and-Kill maze of ``blocks = (h, w)`` cells for the decisions ``draws``.

    Returns the int32 grid ``[2h + 1, 2w + 1]``: 1 wall, 0 free (no entrances yet).
    """
    h, w = blocks
    first = draws.start // 2  # grid square -> cell
    looks = draws.hunts // 2
    look_index = jnp.arange(looks.shape[0])

    def next_origin(visited, cell, next_look):
        """Where the next wall is knocked down from: the walk's cell while it can go on, else
        the next hunt look at a visited cell with an unvisited neighbour. Returns ``(found,
        cell, next_look)``; ``found`` is False when no look is left."""
        open_cells = visited & _unvisited_neighbours(visited).any(-1)
        hits = open_cells[looks[:, 0], looks[:, 1]] & (look_index >= next_look)
        look = jnp.argmax(hits)
        walking = open_cells[cell[0], cell[1]]
        return (
            walking | hits[look],
            jnp.where(walking, cell, looks[look]),
            jnp.where(walking, next_look, look + 1),
        )

    def carve(carry):
        visited, down, right, found, cell, next_look, walls = carry
        options = _unvisited_neighbours(visited)[cell[0], cell[1]]
        count = options.sum()
        pick = jnp.minimum(jnp.floor(draws.walk[walls] * count).astype(jnp.int32), count - 1)
        step = jnp.argmax(jnp.cumsum(options) > pick)  # the pick-th listed option
        target = cell + jnp.asarray(_STEPS)[step]
        # the wall between cell and target, stored at the upper / left cell of the two
        low = jnp.minimum(cell, target)
        down = down.at[low[0], low[1]].set(down[low[0], low[1]] | (step < 2))
        right = right.at[low[0], low[1]].set(right[low[0], low[1]] | (step >= 2))
        visited = visited.at[target[0], target[1]].set(True)
        carved = (visited, down, right, *next_origin(visited, target, next_look), walls + 1)
        return jax.tree.map(lambda new, old: jnp.where(found, new, old), carved, carry)

    # Each carve visits a new cell, so at most h w - 1 carves: a loop of that static trip count
    # (a scan, without a data-dependent predicate) whose iterations after the last carve keep
    # the maze as it is.
    closed = jnp.zeros((h, w), bool)
    visited = closed.at[first[0], first[1]].set(True)
    start = (visited, closed, closed, *next_origin(visited, first, jnp.int32(0)), jnp.int32(0))
    visited, down, right, *_ = jax.lax.fori_loop(0, h * w - 1, lambda _, c: carve(c), start)
    return _render(visited, down, right)


def entrances(draws: MazeDraws, grid_shape: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """``(start, end)``, int32 ``[2]`` each: the entrances on opposite outer walls.

    North: start ``(0, a)``, end ``(H - 1, b)``; south the reverse; west: start ``(a, 0)``, end
    ``(b, W - 1)``; east the reverse (``a, b`` = ``draws.entrances``). On opposite walls the two
    are never adjacent.
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
        """Start an episode in the maze built from the decisions ``draws`` (the maze popgym
        builds when its random draws are these)."""
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
