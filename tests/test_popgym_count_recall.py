"""CountRecall port vs popgym.envs.count_recall, replayed step for step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import count_recall as ref_module
from popgym_harness import (
    assert_equivalent,
    assert_last_only_at_end,
    assert_returns,
    encode_space,
    native_rollout,
    random_actions,
    reference_classes,
    replay,
)

from stoixlite.envs.popgym import count_recall
from stoixlite.envs.popgym.cards import deal_order_from_popgym
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "CountRecall")
EPISODES = {"easy": 12, "medium": 4, "hard": 3}


@functools.cache
def envs(difficulty: str):
    return count_recall.make_count_recall(difficulty), REFERENCE[difficulty]()


def state_from_ref(jax_env, ref_env):
    return jax_env.reset_from_decks(
        deal_order_from_popgym(ref_env.value_deck), deal_order_from_popgym(ref_env.query_deck)
    )


def oracle(ref_env, ref_obs, rng):
    return int(ref_env.counts[ref_env.query])


def noisy_oracle(ref_env, ref_obs, rng):
    """The true count, off by one half of the time: near-optimal play with both reward signs."""
    count = int(ref_env.counts[ref_env.query])
    return max(0, count + int(rng.choice([-1, 1])) * int(rng.random() < 0.5))


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length == env.num_cards - 1
    assert env.num_categories == ref.num_distinct_cards
    assert env.max_card_count == ref.max_card_count
    assert env.action_space.n == ref.action_space.n == ref.max_card_count + 1
    assert env.observation_space.shape == (int(ref.observation_space.nvec.sum()),)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.parametrize("policy", ["random", "oracle", "noisy_oracle"])
def test_equivalence(difficulty, policy):
    env, ref = envs(difficulty)
    actions_fn = {
        "random": random_actions(env.action_space.n),
        "oracle": oracle,
        "noisy_oracle": noisy_oracle,
    }[policy]
    encode = functools.partial(count_recall.encode_obs, num_categories=env.num_categories)
    records = replay(env, ref, state_from_ref, actions_fn, EPISODES[difficulty], encode, seed=5)
    assert_equivalent(records)
    for r in records:
        assert r.length == env.num_cards - 1 and r.ref_terminated[-1]
        obs = r.ref_obs[1]
        popgym_obs = np.argmax(obs.reshape(2, -1), axis=1)
        np.testing.assert_array_equal(obs, encode_space(ref.observation_space, popgym_obs))
    assert_returns(records, optimal=policy == "oracle")


def test_native_reset_vmap_and_oracle():
    env, _ = envs("medium")
    num_envs = 16

    _, _, final, ts = native_rollout(env, jax.random.PRNGKey(0), num_envs)
    assert_last_only_at_end(ts.step_type)
    np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(final.counts), env.max_card_count)
    assert not np.array_equal(final.value_deck[0], final.query_deck[0])


def test_registry_and_unknown_difficulty():
    env = make("popgym/count_recall")
    assert isinstance(env, count_recall.CountRecall) and env.num_decks == 1
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/count_recall", difficulty="Easy")
