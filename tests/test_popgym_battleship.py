"""Battleship port vs popgym.envs.battleship, replayed step for step.

The reference's board (its ship placement) is put into the port. The port's action is the flat
cell index ``row * B + col``; the reference gets ``[row, col]`` (popgym's MultiDiscrete).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import battleship as ref_module
from popgym_harness import (
    DIFFICULTIES,
    FlatActions,
    assert_equivalent,
    assert_last_only_at_end,
    assert_returns,
    env_config,
    native_rollout,
    random_actions,
    reference_classes,
    replay,
)

from stoixlite.envs.popgym import battleship as port
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "Battleship")


@functools.cache
def envs(difficulty: str):
    env = port.make_battleship(difficulty)
    return env, FlatActions(REFERENCE[difficulty](), env.board_size)


def state_from_ref(env, ref):
    return env.reset_from_board(ref.board)


def oracle(ref, obs, rng):
    """Fire at the first ship cell not fired at yet: every shot hits, return 1."""
    return int(np.argmax(((ref.board == 1) & (ref.guesses == 0)).reshape(-1)))


def sweep(ref, obs, rng):
    """Fire at every cell in row-major order (may terminate and truncate on the same step)."""
    return int(ref.num_steps)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    b = ref.board_size
    assert env.max_episode_steps == ref.max_episode_length == b * b
    assert env.action_space.n == int(np.prod(ref.action_space.nvec)) == b * b
    assert env.observation_space.shape == (ref.observation_space.n,) == (2,)
    assert ref.obs_requires_prev_action and env_config("battleship")["env"]["obs_augment"]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_random_scripted_and_oracle(difficulty):
    env, ref = envs(difficulty)
    n = env.action_space.n
    lo = -n / (n - 12)  # all misses
    runs = {
        "random": replay(env, ref, state_from_ref, random_actions(n), 6, seed=71),
        "sweep": replay(env, ref, state_from_ref, sweep, 6, seed=71),
        "oracle": replay(env, ref, state_from_ref, oracle, 6, seed=71),
    }
    for records in runs.values():
        assert_equivalent(records)
        assert_returns(records, low=lo)
    assert_returns(runs["oracle"], optimal=True, low=lo)
    for r in runs["oracle"]:
        assert r.length == 12 and r.ref_terminated[-1]
    for r in runs["sweep"]:  # every ship cell gets hit exactly once before the sweep ends
        assert r.ref_terminated[-1] and np.sum(r.ref_obs[1:, 1]) == 12
    # Random shots repeat cells: most such episodes hit the time limit (truncation).
    assert any(r.ref_truncated[-1] and not r.ref_terminated[-1] for r in runs["random"])


def test_ship_placement_distribution():
    """The port's boards: 12 ship cells in 4 straight lines; cell frequencies match popgym's."""
    env, ref = envs("easy")
    boards = np.asarray(
        jax.jit(jax.vmap(port.place_ships, in_axes=(0, None)), static_argnums=1)(
            jax.random.split(jax.random.PRNGKey(0), 4000), 8
        )
    )
    assert np.all(boards.sum((1, 2)) == 12)
    ref_boards = []
    for seed in range(1000):
        ref.reset(seed=seed)
        ref_boards.append(ref.board.astype(bool))
    freq, ref_freq = boards.mean(0), np.mean(ref_boards, 0)
    # Per-cell hit frequency (~0.19), binomial std ~0.01 (reference) and ~0.006 (port).
    np.testing.assert_allclose(freq, ref_freq, atol=0.06)
    np.testing.assert_allclose(freq, freq[::-1, ::-1], atol=0.04)  # symmetric like the rules


def test_native_oracle_vmap():
    env, _ = envs("medium")
    *_, ts = native_rollout(env, jax.random.PRNGKey(1), num_envs=32, num_steps=12)
    assert_last_only_at_end(ts.step_type)
    assert np.all(ts.discount[-1] == 0.0)
    np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    assert make("popgym/battleship", difficulty="hard").board_size == 12
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/battleship", difficulty="impossible")
