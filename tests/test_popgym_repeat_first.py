"""RepeatFirst port vs popgym.envs.repeat_first, replayed step for step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from popgym.envs import repeat_first as ref_module
from popgym_harness import assert_equivalent, encode_space, random_actions, replay

from stoixlite.envs.popgym import repeat_first
from stoixlite.envs.popgym.cards import deal_order_from_popgym
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = {
    "easy": ref_module.RepeatFirstEasy,
    "medium": ref_module.RepeatFirstMedium,
    "hard": ref_module.RepeatFirstHard,
}
EPISODES = {"easy": 16, "medium": 3, "hard": 2}


@functools.cache
def envs(difficulty: str):
    return repeat_first.make_repeat_first(difficulty), REFERENCE[difficulty]()


def state_from_ref(jax_env, ref_env):
    return jax_env.reset_from_deck(deal_order_from_popgym(ref_env.deck))


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
        env, ref, state_from_ref, actions_fn, EPISODES[difficulty], repeat_first.encode_obs, seed=3
    )
    assert_equivalent(records)
    for r in records:
        assert r.length == env.num_cards - 1 and r.ref_terminated[-1]
        assert np.all(np.abs(r.ref_reward) > 0)  # every step is rewarded
        assert -1.0 - 1e-6 <= r.jax_return <= 1.0 + 1e-6
        np.testing.assert_array_equal(
            r.ref_obs, [encode_space(ref.observation_space, np.argmax(o)) for o in r.ref_obs]
        )
        if policy == "oracle":
            assert r.ref_return == pytest.approx(1.0) and r.jax_return == pytest.approx(
                1.0, abs=1e-5
            )


def test_native_reset_vmap_and_oracle():
    env, _ = envs("easy")
    num_envs = 32

    @jax.jit
    def run(key):
        state, _ = jax.vmap(env.reset)(jax.random.split(key, num_envs))

        def body(state, _):
            return jax.vmap(env.step)(state, jax.vmap(env.oracle_action)(state))

        return jax.lax.scan(body, state, None, length=env.max_episode_steps)[1]

    ts = run(jax.random.PRNGKey(0))
    assert np.all(ts.step_type[:-1] != LAST) and np.all(ts.step_type[-1] == LAST)
    np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/repeat_first")
    assert isinstance(env, repeat_first.RepeatFirst) and env.num_decks == 1
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/repeat_first", difficulty="Easy")
