"""MineSweeper port vs popgym.envs.minesweeper, replayed step for step.

The reference's mine grid is put into the port. The port's action is the flat cell index
``row * W + col``; the reference gets ``[row, col]`` (popgym's MultiDiscrete). Traps checked: the
neighbour count includes the clicked cell itself (3x3 window), and the game is won when every free
cell has been clicked.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml
from popgym.envs import minesweeper as ref_module
from popgym_harness import assert_equivalent, encode_space, random_actions, replay

from stoixlite.envs.popgym import minesweeper as port
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = {
    "easy": ref_module.MineSweeperEasy,
    "medium": ref_module.MineSweeperMedium,
    "hard": ref_module.MineSweeperHard,
}
DIFFICULTIES = list(REFERENCE)
CONFIG = Path(__file__).parents[1] / "configs/env/popgym/minesweeper.yaml"


class FlatActions:
    """The reference env taking the port's flat cell index as its action."""

    def __init__(self, ref, width: int):
        self.ref, self.width = ref, width

    def reset(self, seed=None):
        return self.ref.reset(seed=seed)

    def step(self, action):
        return self.ref.step(np.array([action // self.width, action % self.width]))

    def __getattr__(self, name):
        return getattr(self.ref, name)


@functools.cache
def envs(difficulty: str):
    env = port.make_minesweeper(difficulty)
    return env, FlatActions(REFERENCE[difficulty](), env.dims[1])


def state_from_ref(env, ref):
    return env.reset_from_mines(ref.hidden_grid == ref_module.HiddenSquare.MINE)


def oracle(ref, obs, rng):
    """Click the first free cell not clicked yet: wins with return 1."""
    return int(np.argmax((ref.hidden_grid == ref_module.HiddenSquare.CLEAR).reshape(-1)))


def first_free_cell_forever(ref, obs, rng):
    """Click the first free cell again and again: a bad action each time, then the time limit."""
    return int(np.argmax((ref.hidden_grid != ref_module.HiddenSquare.MINE).reshape(-1)))


def mostly_oracle(ref, obs, rng):
    return oracle(ref, obs, rng) if rng.random() < 0.8 else int(rng.integers(ref.hidden_grid.size))


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_and_neighbour_counts_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length
    assert env.action_space.n == int(np.prod(ref.action_space.nvec))
    assert env.observation_space.shape == (ref.observation_space.n,)
    assert ref.obs_requires_prev_action and yaml.safe_load(CONFIG.read_text())["env"]["obs_augment"]
    for seed in range(20):
        ref.reset(seed=seed)
        mines = ref.hidden_grid == ref_module.HiddenSquare.MINE
        counts = np.asarray(port.neighbour_counts(mines))
        np.testing.assert_array_equal(counts, ref.neighbor_grid)
        # Counts include the cell itself: a mine cell shows at least 1.
        assert np.all(counts[mines] >= 1)
    for k in range(ref.observation_space.n):
        np.testing.assert_array_equal(
            np.asarray(jax.nn.one_hot(k, env.num_obs)), encode_space(ref.observation_space, k)
        )


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_random_scripted_and_oracle(difficulty):
    env, ref = envs(difficulty)
    runs = {
        "random": replay(env, ref, state_from_ref, random_actions(env.action_space.n), 6, seed=81),
        "mostly_oracle": replay(env, ref, state_from_ref, mostly_oracle, 6, seed=81),
        "repeat": replay(env, ref, state_from_ref, first_free_cell_forever, 6, seed=81),
        "oracle": replay(env, ref, state_from_ref, oracle, 6, seed=81),
    }
    for records in runs.values():
        assert_equivalent(records)
        for r in records:
            assert -1.0 - 1e-6 <= r.jax_return <= 1.0 + 1e-6
    for r in runs["oracle"]:  # win: every free cell clicked once
        assert r.length == env.max_episode_steps and r.ref_terminated[-1]
        assert r.ref_return == pytest.approx(1.0) and r.jax_return == pytest.approx(1.0, abs=1e-5)
    for r in runs["repeat"]:  # time limit: truncated, not terminated
        assert r.length == env.max_episode_steps and r.jax_truncated[-1]
    # Random clicking mostly ends on a mine: terminated with the failure reward.
    lost = [r for r in runs["random"] if r.ref_terminated[-1] and r.ref_reward[-1] < -0.5]
    assert lost and all(r.jax_reward[-1] == pytest.approx(env.fail_reward) for r in lost)


def test_native_oracle_and_mine_count():
    env, _ = envs("hard")
    n = 16

    @jax.jit
    def run(key):
        state, _ = jax.vmap(env.reset)(jax.random.split(key, n))

        def body(s, _):
            s, ts = jax.vmap(env.step)(s, jax.vmap(env.oracle_action)(s))
            return s, (ts.step_type, ts.discount, ts.reward)

        return state, jax.lax.scan(body, state, None, length=env.max_episode_steps)[1]

    state, (step_type, discount, reward) = run(jax.random.PRNGKey(2))
    assert np.all(np.asarray(state.mines).sum((1, 2)) == env.num_mines)
    assert np.all(step_type[:-1] != LAST) and np.all(step_type[-1] == LAST)
    assert np.all(discount[-1] == 0.0)  # a win terminates
    np.testing.assert_allclose(np.asarray(reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/minesweeper", difficulty="medium")
    assert (env.dims, env.num_mines, env.max_episode_steps) == ((6, 6), 6, 30)
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/minesweeper", difficulty="impossible")
