"""MineSweeper port vs popgym.envs.minesweeper, replayed step for step.

The reference's mine grid is put into the port. The port's action is the flat cell index
``row * W + col``; the reference gets ``[row, col]`` (popgym's MultiDiscrete). Traps checked: the
neighbour count includes the clicked cell itself (3x3 window), and the game is won when every free
cell has been clicked.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import minesweeper as ref_module
from popgym_harness import (
    DIFFICULTIES,
    FlatActions,
    assert_equivalent,
    assert_last_only_at_end,
    assert_returns,
    encode_space,
    env_config,
    native_rollout,
    random_actions,
    reference_classes,
    replay,
)

from stoixlite.envs.popgym import minesweeper as port
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "MineSweeper")


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
    assert ref.obs_requires_prev_action and env_config("minesweeper")["env"]["obs_augment"]
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
        assert_returns(records)
    assert_returns(runs["oracle"], optimal=True)
    for r in runs["oracle"]:  # win: every free cell clicked once
        assert r.length == env.max_episode_steps and r.ref_terminated[-1]
    for r in runs["repeat"]:  # time limit: truncated, not terminated
        assert r.length == env.max_episode_steps and r.jax_truncated[-1]
    # Random clicking mostly ends on a mine: terminated with the failure reward.
    lost = [r for r in runs["random"] if r.ref_terminated[-1] and r.ref_reward[-1] < -0.5]
    assert lost and all(r.jax_reward[-1] == pytest.approx(env.fail_reward) for r in lost)


def test_native_oracle_and_mine_count():
    env, _ = envs("hard")
    state, _, _, ts = native_rollout(env, jax.random.PRNGKey(2), num_envs=16)
    assert np.all(np.asarray(state.mines).sum((1, 2)) == env.num_mines)
    assert_last_only_at_end(ts.step_type)
    assert np.all(ts.discount[-1] == 0.0)  # a win terminates
    np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/minesweeper", difficulty="medium")
    assert (env.dims, env.num_mines, env.max_episode_steps) == ((6, 6), 6, 30)
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/minesweeper", difficulty="impossible")
