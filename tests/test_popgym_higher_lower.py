"""HigherLower port vs popgym.envs.higher_lower, replayed step for step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import higher_lower as ref_module
from popgym_harness import (
    assert_equivalent,
    assert_last_only_at_end,
    native_rollout,
    random_actions,
    reference_classes,
    replay,
    state_from_deck,
    uniform_actions,
)

from stoixlite.envs.popgym import higher_lower
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "HigherLower")
EPISODES = {"easy": 12, "medium": 4, "hard": 3}


@functools.cache
def envs(difficulty: str):
    return higher_lower.make_higher_lower(difficulty), REFERENCE[difficulty]()


def _current_and_remaining(ref_env):
    deck = ref_env.deck
    current = deck.ranks_idx[deck["player"][-1]]
    return current, deck.ranks_idx[deck.idx[: len(deck)]]  # undealt cards; the last is next


def peek(ref_env, ref_obs, rng):
    """Cheating oracle: looks at the next card (never wrong, only pushes score 0)."""
    current, remaining = _current_and_remaining(ref_env)
    return higher_lower.HIGHER if remaining[-1] > current else higher_lower.LOWER


def card_counter(ref_env, ref_obs, rng):
    """Legitimate policy: bets on the side with more undealt cards."""
    current, remaining = _current_and_remaining(ref_env)
    higher = np.sum(remaining > current) >= np.sum(remaining < current)
    return higher_lower.HIGHER if higher else higher_lower.LOWER


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == env.num_cards - 1
    assert env.reward_scale == 1 / ref.deck_size
    assert env.observation_space.shape == (ref.observation_space.n,) == (13,)
    assert env.action_space.n == ref.action_space.n == 2


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.parametrize("policy", ["random", "peek", "card_counter"])
def test_equivalence(difficulty, policy):
    env, ref = envs(difficulty)
    actions_fn = {"random": random_actions(2), "peek": peek, "card_counter": card_counter}[policy]
    records = replay(
        env, ref, state_from_deck, actions_fn, EPISODES[difficulty], higher_lower.encode_obs, seed=2
    )
    assert_equivalent(records)
    n = env.num_cards
    for r in records:
        assert r.length == n - 1 and r.ref_terminated[-1]
        assert abs(r.jax_return) <= (n - 1) / n + 1e-6
        ranks = np.argmax(r.ref_obs, axis=1)
        pushes = np.sum(ranks[1:] == ranks[:-1])
        np.testing.assert_array_equal(r.ref_reward[ranks[1:] == ranks[:-1]], 0.0)
        if policy == "peek":
            assert r.ref_return == pytest.approx((n - 1 - pushes) / n)
            assert r.jax_return == pytest.approx((n - 1 - pushes) / n, abs=1e-5)
        if policy == "card_counter":
            assert r.ref_return > 0


def test_native_reset_and_vmap():
    env, _ = envs("easy")
    num_envs = 32

    policy = uniform_actions(num_envs, 2)
    _, first, _, ts = native_rollout(env, jax.random.PRNGKey(0), num_envs, policy=policy)
    assert_last_only_at_end(ts.step_type)
    assert np.all(np.abs(ts.reward.sum(0)) <= 51 / 52 + 1e-5)
    # Every rank is seen exactly 4 times per episode.
    seen = np.asarray(first.observation) + np.asarray(ts.observation.sum(0))
    np.testing.assert_array_equal(seen, 4)


def test_registry_and_unknown_difficulty():
    env = make("popgym/higher_lower")
    assert isinstance(env, higher_lower.HigherLower) and env.num_decks == 1
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/higher_lower", difficulty="Easy")
