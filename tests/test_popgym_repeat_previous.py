"""RepeatPrevious port vs popgym.envs.repeat_previous, replayed step for step."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import repeat_previous as ref_module
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
    uniform_actions,
)

from stoixlite.envs.popgym import repeat_previous
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = reference_classes(ref_module, "RepeatPrevious")
EPISODES = {"easy": 16, "medium": 6, "hard": 4}


@functools.cache
def envs(difficulty: str):
    return repeat_previous.make_repeat_previous(difficulty), REFERENCE[difficulty]()


def oracle(ref_env, ref_obs, rng):
    hand = ref_env.deck["player"]
    return int(ref_env.deck.suits_idx[hand[-ref_env.k]]) if len(hand) >= ref_env.k else 0


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length
    assert env.k == ref.k and env.num_cards == ref.deck.num_cards
    assert env.observation_space.shape == (ref.observation_space.n,)
    assert env.action_space.n == ref.action_space.n == 4
    for suit in range(4):
        expected = encode_space(ref.observation_space, suit)
        np.testing.assert_array_equal(repeat_previous.encode_obs(suit), expected)


def replay_episodes(difficulty: str, actions_fn, seed: int):
    env, ref = envs(difficulty)
    encode = repeat_previous.encode_obs
    return replay(env, ref, state_from_deck, actions_fn, EPISODES[difficulty], encode, seed=seed)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_equivalence_random_actions(difficulty):
    env, _ = envs(difficulty)
    records = replay_episodes(difficulty, random_actions(4), seed=100)
    assert_equivalent(records)
    assert_returns(records)
    for r in records:
        assert r.length == env.num_cards - 1 and r.ref_terminated[-1]
        # Steps before k cards have been seen give exactly 0.
        assert np.all(r.ref_reward[: env.k - 1] == 0.0)
        assert np.all(np.abs(r.ref_reward[env.k - 1 :]) > 0)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_equivalence_oracle_reaches_max_return(difficulty):
    records = replay_episodes(difficulty, oracle, seed=7)
    assert_equivalent(records)
    for r in records:
        assert r.ref_return == pytest.approx(1.0, abs=1e-9)
        assert r.jax_return == pytest.approx(1.0, abs=1e-5)


def test_native_reset_vmap_and_oracle():
    """JAX-side episodes (own reset, vmapped step): fixed length, returns in [-1, 1], oracle 1."""
    env, _ = envs("easy")
    num_envs, key = 64, jax.random.PRNGKey(0)
    policy = uniform_actions(num_envs, 4)
    _, first, _, ts_r = native_rollout(env, key, num_envs, policy=policy)
    *_, ts_o = native_rollout(env, key, num_envs)  # the same episodes, played by the oracle
    assert first.observation.shape == (num_envs, 4)
    for ts in (ts_r, ts_o):
        assert_last_only_at_end(ts.step_type)
        assert np.all(ts.discount[-1] == 0.0)
    random_returns = np.asarray(ts_r.reward.sum(0))
    assert np.all(np.abs(random_returns) <= 1.0 + 1e-5)
    np.testing.assert_allclose(np.asarray(ts_o.reward.sum(0)), 1.0, atol=1e-5)
    # Decks are permutations and differ across envs.
    state, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), 4))
    decks = np.asarray(state.deck)
    assert all(sorted(d) == list(range(52)) for d in decks)
    assert len({tuple(d) for d in decks}) == 4
    assert jnp.issubdtype(ts_r.observation.dtype, jnp.floating)


def test_registry_and_unknown_difficulty():
    env = make("popgym/repeat_previous", difficulty="medium")
    assert isinstance(env, repeat_previous.RepeatPrevious) and (env.num_decks, env.k) == (2, 32)
    assert make("popgym/repeat_previous").k == 4
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/repeat_previous", difficulty="impossible")


class _EarlyEnd(repeat_previous.RepeatPrevious):
    """A deliberately broken port: terminates one step early."""

    def step(self, state, action):
        state, ts = super().step(state, action)
        early = state.num_dealt == self.num_cards - 1
        return state, ts.replace(
            step_type=jnp.where(early, LAST, ts.step_type), discount=jnp.where(early, 0.0, 1.0)
        )


@pytest.mark.parametrize("broken", [_EarlyEnd(), repeat_previous.RepeatPrevious(k=5)])
def test_harness_detects_mismatches(broken):
    ref = REFERENCE["easy"]()
    records = replay(broken, ref, state_from_deck, oracle, 2, repeat_previous.encode_obs)
    with pytest.raises(AssertionError):
        assert_equivalent(records)
