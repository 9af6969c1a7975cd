"""Autoencode port vs popgym.envs.autoencode, replayed step for step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import autoencode as ref_module
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

from stoixlite.envs.popgym import autoencode
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "Autoencode")
EPISODES = {"easy": 12, "medium": 4, "hard": 3}


@functools.cache
def envs(difficulty: str):
    return autoencode.make_autoencode(difficulty), REFERENCE[difficulty]()


def oracle(ref_env, ref_obs, rng):
    """Recite the suit of the last card still held by the system; random while watching."""
    if ref_env.mode == ref_module.Mode.PLAY:
        return int(ref_env.deck.suits_idx[ref_env.deck["system"][-1]])
    return int(rng.integers(4))


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length == 2 * env.num_cards - 1
    assert env.observation_space.shape == (6,)
    assert env.action_space.n == ref.action_space.n == 4


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.parametrize("policy", ["random", "oracle"])
def test_equivalence(difficulty, policy):
    env, ref = envs(difficulty)
    actions_fn = random_actions(4) if policy == "random" else oracle
    records = replay(
        env, ref, state_from_deck, actions_fn, EPISODES[difficulty], autoencode.encode_obs, seed=11
    )
    assert_equivalent(records)
    n = env.num_cards
    for r in records:
        assert r.length == 2 * n - 1 and r.ref_terminated[-1]
        assert np.all(r.ref_reward[: n - 1] == 0) and np.all(np.abs(r.ref_reward[n - 1 :]) > 0)
        # Watch phase shows the cards with the WATCH flag; the flag flips to PLAY on the step that
        # deals the last card (still shown); play observations are (PLAY, suit 0).
        mode = np.argmax(r.ref_obs[:, :2], axis=1)
        np.testing.assert_array_equal(mode[: n - 1], autoencode.WATCH)
        np.testing.assert_array_equal(mode[n - 1 :], autoencode.PLAY)
        np.testing.assert_array_equal(r.ref_obs[n:], np.tile([1, 0, 1, 0, 0, 0], (n, 1)))
        for o in r.ref_obs[:3]:
            popgym_obs = (np.argmax(o[:2]), np.argmax(o[2:]))
            np.testing.assert_array_equal(o, encode_space(ref.observation_space, popgym_obs))
    assert_returns(records, optimal=policy == "oracle")


def test_native_reset_vmap_and_oracle():
    env, _ = envs("easy")
    num_envs = 32

    *_, ts = native_rollout(env, jax.random.PRNGKey(0), num_envs)
    assert_last_only_at_end(ts.step_type)
    np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/autoencode")
    assert isinstance(env, autoencode.Autoencode) and env.num_decks == 1
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/autoencode", difficulty="Easy")
