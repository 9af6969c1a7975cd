"""RepeatFirst port vs popgym.envs.repeat_first, replayed step for step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import repeat_first as ref_module
from popgym_harness import (
    assert_equivalent,
    assert_last_only_at_end,
    assert_returns,
    encode_space,
    native_rollout,
    random_actions,
    reference_classes,
    replay,
    state_from_deck,
)

from stoixlite.envs.popgym import repeat_first
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "RepeatFirst")
EPISODES = {"easy": 16, "medium": 3, "hard": 2}


@functools.cache
def envs(difficulty: str):
    return repeat_first.make_repeat_first(difficulty), REFERENCE[difficulty]()


def oracle(ref_env, ref_obs, rng):
    return int(ref_env.card)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length == env.num_cards - 1
    assert env.observation_space.shape == (ref.observation_space.n,) == (4,)
    assert env.action_space.n == ref.action_space.n == 4


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.parametrize("policy", ["random", "oracle"])
def test_equivalence(difficulty, policy):
    env, ref = envs(difficulty)
    actions_fn = random_actions(4) if policy == "random" else oracle
    records = replay(
        env, ref, state_from_deck, actions_fn, EPISODES[difficulty], repeat_first.encode_obs, seed=3
    )
    assert_equivalent(records)
    for r in records:
        assert r.length == env.num_cards - 1 and r.ref_terminated[-1]
        assert np.all(np.abs(r.ref_reward) > 0)  # every step is rewarded
        np.testing.assert_array_equal(
            r.ref_obs, [encode_space(ref.observation_space, np.argmax(o)) for o in r.ref_obs]
        )
    assert_returns(records, optimal=policy == "oracle")


def test_native_reset_vmap_and_oracle():
    env, _ = envs("easy")
    num_envs = 32

    *_, ts = native_rollout(env, jax.random.PRNGKey(0), num_envs)
    assert_last_only_at_end(ts.step_type)
    np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/repeat_first")
    assert isinstance(env, repeat_first.RepeatFirst) and env.num_decks == 1
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/repeat_first", difficulty="Easy")
