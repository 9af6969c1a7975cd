"""Concentration port vs popgym.envs.concentration, replayed step for step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import concentration as ref_module
from popgym_harness import (
    assert_equivalent,
    assert_last_only_at_end,
    assert_returns,
    encode_space,
    native_rollout,
    random_actions,
    reference_classes,
    replay,
    uniform_actions,
)

from stoixlite.envs.popgym import concentration
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = reference_classes(ref_module, "Concentration")
EPISODES = {"easy": 8, "medium": 3, "hard": 3}


@functools.cache
def envs(difficulty: str):
    return concentration.make_concentration(difficulty), REFERENCE[difficulty]()


def state_from_ref(jax_env, ref_env):
    return jax_env.reset_from_cards(np.asarray(ref_env.deck.idx))


def encoder(env):
    return functools.partial(concentration.encode_obs, num_categories=env.num_categories)


def perfect(ref_env, ref_obs, rng):
    """Perfect memory: complete the pending card's pair, else open the first face-down card."""
    face_up = set(ref_env.deck["face_up_idx"])
    pending = ref_env.deck["in_play_idx"]
    candidates = [p for p in range(ref_env.deck.num_cards) if p not in face_up and p not in pending]
    if pending:
        value = ref_env.state[pending[0]]
        return next(p for p in candidates if ref_env.state[p] == value)
    return candidates[0]


def wasteful_then_perfect(ref_env, ref_obs, rng):
    """Flip one card twice (a failed pair) until exactly N steps remain, then play perfectly:
    the game completes on the truncation step, so popgym reports terminated and truncated."""
    if ref_env.curr_step < ref_env.episode_length - ref_env.deck.num_cards:
        pending = ref_env.deck["in_play_idx"]
        return pending[0] if pending else int(rng.integers(ref_env.deck.num_cards))
    return perfect(ref_env, ref_obs, rng)


def sloppy(ref_env, ref_obs, rng):
    """Perfect play mixed with random flips (face-up cards, mismatches, same card twice)."""
    if rng.random() < 0.3:
        return int(rng.integers(ref_env.deck.num_cards))
    return perfect(ref_env, ref_obs, rng)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == ref.episode_length
    assert env.facedown == ref.facedown_card
    assert env.success_reward == ref.success_reward_scale
    assert env.failure_reward == ref.failure_reward_scale
    assert env.action_space.n == ref.action_space.n == env.num_cards
    assert env.observation_space.shape == (int(ref.observation_space.nvec.sum()),)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.parametrize("policy", ["random", "perfect", "wasteful_then_perfect", "sloppy"])
def test_equivalence(difficulty, policy):
    env, ref = envs(difficulty)
    actions_fn = {
        "random": random_actions(env.num_cards),
        "perfect": perfect,
        "wasteful_then_perfect": wasteful_then_perfect,
        "sloppy": sloppy,
    }[policy]
    records = replay(env, ref, state_from_ref, actions_fn, EPISODES[difficulty], encoder(env))
    assert_equivalent(records)
    n, length = env.num_cards, env.episode_length
    assert_returns(records, optimal=policy == "perfect")
    for r in records:
        np.testing.assert_array_equal(
            r.ref_obs[1],
            encode_space(ref.observation_space, np.argmax(r.ref_obs[1].reshape(n, -1), 1)),
        )
        if policy == "random":
            assert r.length == length and r.ref_truncated[-1] and not r.ref_terminated[-1]
            assert r.jax_step_type[-1] == LAST and r.jax_discount[-1] == 1.0
        elif policy == "perfect":
            assert r.length == n and r.ref_terminated[-1] and not r.ref_truncated[-1]
        elif policy == "wasteful_then_perfect":
            assert r.length == length and r.ref_terminated[-1] and r.ref_truncated[-1]
            assert r.jax_step_type[-1] == LAST and r.jax_discount[-1] == 0.0
    if policy == "sloppy":  # the mix exercised every kind of transition
        rewards = np.concatenate([r.ref_reward for r in records])
        expected = {0.0, env.success_reward, env.failure_reward, 2 * env.failure_reward}
        assert set(np.round(rewards, 9)) == set(np.round(list(expected), 9))


def test_native_reset_and_vmap():
    env, _ = envs("hard")
    num_envs = 16

    policy = uniform_actions(num_envs, env.num_cards)
    _, first, _, ts = native_rollout(env, jax.random.PRNGKey(0), num_envs, policy=policy)
    assert first.observation.shape == (num_envs, 52 * 14)
    np.testing.assert_array_equal(first.observation.reshape(num_envs, 52, 14)[..., -1], 1.0)
    # Random play never clears the table: truncated (discount 1) exactly on step L.
    assert_last_only_at_end(ts.step_type)
    np.testing.assert_array_equal(ts.discount, 1.0)
    assert np.all(np.abs(ts.reward.sum(0)) <= 1.0 + 1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/concentration")
    assert isinstance(env, concentration.Concentration) and env.num_decks == 1
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/concentration", difficulty="Easy")
