"""RepeatPrevious port vs popgym.envs.repeat_previous, replayed step for step."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import repeat_previous as ref_module
from popgym_harness import assert_equivalent, encode_space, random_actions, replay

from stoixlite.envs.popgym import repeat_previous
from stoixlite.envs.popgym.cards import deal_order_from_popgym
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = {
    "easy": ref_module.RepeatPreviousEasy,
    "medium": ref_module.RepeatPreviousMedium,
    "hard": ref_module.RepeatPreviousHard,
}
EPISODES = {"easy": 16, "medium": 6, "hard": 4}


@functools.cache
def envs(difficulty: str):
    return repeat_previous.make_repeat_previous(difficulty), REFERENCE[difficulty]()


def state_from_ref(jax_env, ref_env):
    return jax_env.reset_from_deck(deal_order_from_popgym(ref_env.deck))


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


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_equivalence_random_actions(difficulty):
    env, ref = envs(difficulty)
    records = replay(
        env,
        ref,
        state_from_ref,
        random_actions(4),
        EPISODES[difficulty],
        repeat_previous.encode_obs,
        seed=100,
    )
    assert_equivalent(records)
    for r in records:
        assert r.length == env.num_cards - 1 and r.ref_terminated[-1]
        assert -1.0 - 1e-6 <= r.jax_return <= 1.0 + 1e-6
        # Steps before k cards have been seen give exactly 0.
        assert np.all(r.ref_reward[: env.k - 1] == 0.0)
        assert np.all(np.abs(r.ref_reward[env.k - 1 :]) > 0)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_equivalence_oracle_reaches_max_return(difficulty):
    env, ref = envs(difficulty)
    records = replay(
        env,
        ref,
        state_from_ref,
        oracle,
        EPISODES[difficulty],
        repeat_previous.encode_obs,
        seed=7,
    )
    assert_equivalent(records)
    for r in records:
        assert r.ref_return == pytest.approx(1.0, abs=1e-9)
        assert r.jax_return == pytest.approx(1.0, abs=1e-5)


def test_native_reset_vmap_and_oracle():
    """JAX-side episodes (own reset, vmapped step): fixed length, returns in [-1, 1], oracle 1."""
    env, _ = envs("easy")
    num_envs, steps = 64, env.max_episode_steps

    @jax.jit
    def run(key):
        state, ts = jax.vmap(env.reset)(jax.random.split(key, num_envs))
        assert ts.observation.shape == (num_envs, 4)

        def body(carry, key):
            random_state, oracle_state = carry
            action = jax.random.randint(key, (num_envs,), 0, 4)
            random_state, ts_r = jax.vmap(env.step)(random_state, action)
            oracle_action = jax.vmap(env.oracle_action)(oracle_state)
            oracle_state, ts_o = jax.vmap(env.step)(oracle_state, oracle_action)
            return (random_state, oracle_state), (ts_r, ts_o)

        return jax.lax.scan(body, (state, state), jax.random.split(key, steps))[1]

    ts_r, ts_o = run(jax.random.PRNGKey(0))
    for ts in (ts_r, ts_o):
        assert np.all(ts.step_type[:-1] != LAST) and np.all(ts.step_type[-1] == LAST)
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
    records = replay(broken, ref, state_from_ref, oracle, 2, repeat_previous.encode_obs)
    with pytest.raises(AssertionError):
        assert_equivalent(records)
