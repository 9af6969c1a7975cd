"""Labyrinth ports vs popgym.envs.labyrinth_escape / labyrinth_explore (with mazelib).

Two ways of putting the same maze into both:

* ``DrivenReference``: mazelib's random sources (``randrange``, ``choice`` and numpy's
  ``shuffle`` of the neighbour list) are replaced by one shared set of decisions
  (:class:`~stoixlite.envs.popgym.labyrinth.MazeDraws`), so popgym's own ``reset`` builds the
  maze and the port generates it independently with ``reset_from_draws``. This proves the maze
  generation (HuntAndKill with random hunts, then the outer entrances) identical cell for cell.
* popgym's unmodified ``reset(seed=...)``: its maze (START/GOAL marks removed) and entrances are
  put into the port with ``reset_from_maze``.

Both are replayed step for step with random, scripted (runs into walls and along the border, where
popgym's local view is padded off-centre) and oracle (shortest path / nearest unexplored cell)
actions.
"""

from __future__ import annotations

import collections
import functools
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import labyrinth_escape, labyrinth_explore
from popgym_harness import (
    DIFFICULTIES,
    assert_equivalent,
    assert_last_only_at_end,
    encode_space,
    env_config,
    random_actions,
    reference_classes,
    replay,
)

from stoixlite.envs.popgym import labyrinth as maze
from stoixlite.envs.popgym.labyrinth_escape import make_labyrinth_escape
from stoixlite.envs.popgym.labyrinth_explore import make_labyrinth_explore
from stoixlite.envs.registry import make

pytestmark = pytest.mark.filterwarnings("ignore:Maze environments:DeprecationWarning")

GAMES = {
    "labyrinth_escape": (
        make_labyrinth_escape,
        reference_classes(labyrinth_escape, "LabyrinthEscape"),
    ),
    "labyrinth_explore": (
        make_labyrinth_explore,
        reference_classes(labyrinth_explore, "LabyrinthExplore"),
    ),
}
# Step for step at the smallest mazes by default; medium and hard (larger sizes, the same code)
# under `pytest -m slow`: 5-9 s each. Maze generation is compared with mazelib at every
# difficulty by default (test_maze_generation_matches_mazelib), and random play on the largest
# mazes checks walls and time limits (test_native_mazes_are_perfect_and_random_play_truncates).
CASES = [
    (game, d) if d == "easy" else pytest.param(game, d, marks=pytest.mark.slow)
    for game in GAMES
    for d in DIFFICULTIES
]


def numpy_draws(rng: np.random.Generator, blocks: tuple[int, int]) -> maze.MazeDraws:
    """Decisions with the distribution of :func:`maze.sample_draws`, drawn by numpy."""
    h, w = blocks
    side = int(rng.integers(4))
    along = w if side < 2 else h
    odd = lambda n, size: 1 + 2 * rng.integers(0, n, size)
    return maze.MazeDraws(
        start=np.array([odd(h, None), odd(w, None)], np.int32),
        hunts=np.stack(
            [odd(h, (2 * h + 1) * (2 * w + 1)), odd(w, (2 * h + 1) * (2 * w + 1))], 1
        ).astype(np.int32),
        walk=rng.random(h * w).astype(np.float32),
        side=np.int32(side),
        entrances=odd(along, 2).astype(np.int32),
    )


class DrivenReference:
    """popgym's env whose ``reset(seed)`` builds its maze from numpy-drawn :class:`MazeDraws`."""

    def __init__(self, ref, blocks: tuple[int, int]):
        self.ref, self.blocks, self.draws = ref, blocks, None

    def reset(self, seed=None):
        self.draws = draws = numpy_draws(np.random.default_rng(seed), self.blocks)
        generator_draws = iter(
            [int(v) for v in draws.start] + [int(v) for v in draws.hunts.reshape(-1)]
        )
        entrance_draws = iter([int(draws.side), *map(int, draws.entrances)])
        walks = iter(draws.walk)

        def drawn(values):
            def randrange(start, stop=None, step=1):
                value = next(values)
                allowed = range(start, stop, step) if stop is not None else range(start)
                assert value in allowed, (value, allowed)
                return value

            return randrange

        def choice(seq):  # the port picks floor(u * n) in float32 among the neighbours in order
            n = len(seq)
            return seq[min(int(np.float32(next(walks)) * np.float32(n)), n - 1)]

        with (
            mock.patch("mazelib.generate.HuntAndKill.randrange", drawn(generator_draws)),
            mock.patch("mazelib.generate.HuntAndKill.choice", choice),
            mock.patch("mazelib.generate.MazeGenAlgo.shuffle", lambda seq: None),
            mock.patch("mazelib.mazelib.randrange", drawn(entrance_draws)),
        ):
            out = self.ref.reset(seed=seed)
        assert next(generator_draws, None) is None, "mazelib must draw every hunt"
        return out

    def __getattr__(self, name):
        return getattr(self.ref, name)


@functools.cache
def envs(game: str, difficulty: str):
    factory, refs = GAMES[game]
    env = factory(difficulty)
    return env, refs[difficulty]()


def from_draws(env, ref):
    return env.reset_from_draws(jax.tree.map(jnp.asarray, ref.draws))


def from_maze(env, ref):
    grid = np.where(ref.maze.grid > maze.OBSTACLE, maze.OBSTACLE, ref.maze.grid)
    return env.reset_from_maze(grid, ref.maze.start, ref.maze.end)


def _bfs(grid: np.ndarray, position) -> dict[tuple[int, int], int | None]:
    """Walkable cells reachable from ``position``, in BFS order, each with the first action of a
    shortest path to it (None for ``position`` itself)."""
    start = (int(position[0]), int(position[1]))
    first = {start: None}
    queue = collections.deque([start])
    while queue:
        cell = queue.popleft()
        for action, (dr, dc) in enumerate(np.asarray(maze.MOVES).tolist()):
            nxt = (cell[0] + dr, cell[1] + dc)
            inside = 0 <= nxt[0] < grid.shape[0] and 0 <= nxt[1] < grid.shape[1]
            if inside and grid[nxt] != maze.OBSTACLE and nxt not in first:
                first[nxt] = action if first[cell] is None else first[cell]
                queue.append(nxt)
    return first


def _towards(grid: np.ndarray, position, targets: np.ndarray) -> int:
    """The first action of a shortest path to the nearest ``targets`` cell."""
    return next(a for cell, a in _bfs(grid, position).items() if a is not None and targets[cell])


def oracle(ref, obs, rng):
    """Escape: a shortest path to the exit. Explore: to the nearest cell not visited yet."""
    grid = ref.maze.grid
    if (grid == maze.GOAL).any():  # escape
        targets = grid == maze.GOAL
    else:
        targets = (grid != maze.OBSTACLE) & (ref.explored == 0)
    return _towards(grid, ref.position, targets)


def scripted(ref, obs, rng):
    """Each direction 6 times in turn: runs into walls and along the outer border."""
    return [0, 2, 1, 3][(ref.curr_step // 6) % 4]


def test_view_encoding_and_specs_match_reference():
    env, ref = envs("labyrinth_escape", "easy")
    assert env.observation_space.shape == (int(ref.observation_space.nvec.sum()),)
    assert env.action_space.n == ref.action_space.n
    for name in GAMES:
        assert not env_config(name)["env"]["obs_augment"]  # the obs holds the previous action
    grid = np.arange(121).reshape(11, 11) % 4
    for pos in [(0, 0), (0, 5), (5, 0), (10, 10), (10, 3), (4, 7), (0, 10)]:
        ref.maze = mock.Mock(grid=grid)
        ref.position = pos
        view = np.asarray(maze.local_view(jnp.asarray(grid), jnp.asarray(pos)))
        np.testing.assert_array_equal(view, ref.local_view(grid).reshape(9), err_msg=str(pos))
        obs = env.observation(jnp.asarray(grid), jnp.asarray(pos), jnp.int32(3))
        want = encode_space(ref.observation_space, np.concatenate([view, [3]]))
        np.testing.assert_array_equal(np.asarray(obs), want)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_maze_generation_matches_mazelib(difficulty):
    env, ref = envs("labyrinth_escape", difficulty)
    driven = DrivenReference(ref, env.blocks)
    reset = jax.jit(env.reset_from_draws)
    for seed in range(25):
        driven.reset(seed=seed)
        state, _ = reset(jax.tree.map(jnp.asarray, driven.draws))
        np.testing.assert_array_equal(np.asarray(state.grid), ref.maze.grid, err_msg=f"{seed}")
        assert tuple(np.asarray(state.position)) == tuple(ref.maze.start)


@pytest.mark.parametrize("game,difficulty", CASES)
def test_equivalence_random_scripted_and_oracle(game, difficulty):
    env, ref = envs(game, difficulty)
    driven = DrivenReference(ref, env.blocks)
    runs = {
        "random": replay(env, driven, from_draws, random_actions(4), 3, seed=7),
        "scripted": replay(env, driven, from_draws, scripted, 2, seed=17),
        "oracle": replay(env, driven, from_draws, oracle, 4, seed=27),
        "popgym_reset_random": replay(env, ref, from_maze, random_actions(4), 2, seed=37),
        "popgym_reset_oracle": replay(env, ref, from_maze, oracle, 3, seed=47),
    }
    low, high = -env.max_episode_steps / env.max_episode_length, 1.0
    for records in runs.values():
        assert_equivalent(records)
        for r in records:
            assert low - 1e-6 <= r.jax_return <= high + 1e-6
    for r in runs["oracle"] + runs["popgym_reset_oracle"]:
        assert r.ref_terminated[-1] and r.jax_terminated[-1]
        if game == "labyrinth_escape":  # a shortest path: 1 for the exit, -1/L per step
            assert r.jax_return == pytest.approx(1.0 - r.length / env.max_episode_length, abs=1e-5)
    for r in runs["scripted"]:
        assert r.ref_truncated[-1] and r.length == env.max_episode_steps


@pytest.mark.parametrize("game", GAMES)
def test_native_mazes_are_perfect_and_random_play_truncates(game):
    env, _ = envs(game, "hard")
    states, first = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(3), 64))
    grids = np.asarray(states.grid)
    h, w = env.blocks
    blocks = grids[:, 1::2, 1::2] != maze.OBSTACLE
    assert blocks.mean() > 0.99  # HuntAndKill's random hunts rarely miss a block
    starts = np.asarray(states.position)
    on_border = (starts == 0) | (starts == env.grid_shape[0] - 1)
    assert np.all(on_border.any(1))
    for grid, carved, start in zip(grids, blocks, starts, strict=True):
        interior = grid[1:-1, 1:-1] == maze.FREE
        # A tree: every carved block is joined by exactly one passage fewer than blocks.
        assert interior.sum() == 2 * carved.sum() - 1
        assert len(_bfs(grid, start)) == (grid != maze.OBSTACLE).sum()  # all connected
        if game == "labyrinth_escape":
            assert (grid == maze.GOAL).sum() == 1
    assert np.all(np.asarray(first.observation).reshape(64, 10, 5)[:, -1].argmax(-1) == 4)

    @jax.jit
    def play(states, key):
        def body(s, k):
            return jax.vmap(env.step)(s, jax.random.randint(k, (64,), 0, 4))

        return jax.lax.scan(body, states, jax.random.split(key, env.max_episode_steps))[1]

    ts = play(states, jax.random.PRNGKey(4))
    step_type = np.asarray(ts.step_type)
    ended = (step_type == 2).any(0)
    assert ended.all()  # random play ends within the time limit, never runs past it
    never_done = ~(step_type[:-1] == 2).any(0)
    assert_last_only_at_end(step_type[:, never_done])


def test_registry_and_unknown_difficulty():
    env = make("popgym/labyrinth_explore", difficulty="medium")
    assert (env.grid_shape, env.max_episode_steps) == ((15, 15), 1023)
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/labyrinth_escape", difficulty="huge")
    with pytest.raises(ValueError, match="square and even"):
        maze.MazeEnv(maze_dims=(9, 9))
