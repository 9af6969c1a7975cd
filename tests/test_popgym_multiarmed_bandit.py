"""MultiarmedBandit port vs popgym.envs.multiarmed_bandit, replayed step for step.

The reference's random stream is re-created from its seed: the port gets the same float32 payout
probabilities and the same payout draws ``u`` (float64 in popgym, passed rounded *down* to float32,
which decides ``u < p`` exactly as float64 does because ``p`` is a float32).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import multiarmed_bandit as ref_module
from popgym_harness import (
    DIFFICULTIES,
    assert_equivalent,
    env_config,
    random_actions,
    reference_classes,
    replay,
)
from popgym_physics import DrawReplay, reference_stream

from stoixlite.envs.popgym import multiarmed_bandit as port
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = reference_classes(ref_module, "MultiarmedBandit")


@functools.cache
def envs(difficulty: str):
    env = port.make_multiarmed_bandit(difficulty)
    return env, DrawReplay(env, "step_with_uniform"), REFERENCE[difficulty]()


def round_down_f32(u: np.ndarray) -> np.ndarray:
    """The largest float32 <= u (elementwise): ``f32 < p`` iff ``u < p`` for float32 ``p``."""
    down = u.astype(np.float32)
    return np.where(down.astype(np.float64) > u, np.nextafter(down, np.float32(-1)), down)


def reference_draws(ref, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities [n] float32, payout draws [L] float32-rounded-down) of ``ref.reset(seed)``."""
    rng = reference_stream(seed)
    probs = rng.random(ref.num_bandits, dtype=np.float32)
    u = np.array([rng.random() for _ in range(ref.max_episode_length)])
    return probs, round_down_f32(u)


def state_from_ref(wrapped, ref):
    probs, u = reference_draws(ref, ref.np_random_seed)
    np.testing.assert_array_equal(probs, ref.bandits)  # the stream replay is exact
    inner, ts = wrapped.env.reset_from_probs(probs)
    return wrapped.start(inner, ts, u)


def oracle(ref, obs, rng):
    return int(np.argmax(ref.bandits))


def test_round_down_keeps_comparisons_exact():
    rng = np.random.default_rng(0)
    u = rng.random(100_000)
    p = np.concatenate([u[:50_000].astype(np.float32), rng.random(50_000, dtype=np.float32)])
    np.testing.assert_array_equal(round_down_f32(u) < p, u < p)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, _, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length
    assert env.action_space.n == ref.action_space.n == ref.num_bandits
    assert env.observation_space.shape == (ref.observation_space.n,) == (2,)
    assert ref.obs_requires_prev_action and env_config("multiarmed_bandit")["env"]["obs_augment"]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_random_and_oracle(difficulty):
    env, wrapped, ref = envs(difficulty)
    n = ref.num_bandits
    rand = replay(wrapped, ref, state_from_ref, random_actions(n), 4, seed=61)
    best = replay(wrapped, ref, state_from_ref, oracle, 4, seed=61)
    for records in (rand, best):
        assert_equivalent(records)
        for r in records:
            assert r.length == ref.max_episode_length and r.ref_truncated[-1]
            assert not r.ref_terminated.any() and abs(r.jax_return) <= 1.0 + 1e-5
            np.testing.assert_allclose(np.abs(r.jax_reward), 1 / r.length, rtol=1e-6)
    # Same bandits (same seeds): pulling the best arm beats pulling at random.
    assert np.mean([r.ref_return for r in best]) > np.mean([r.ref_return for r in rand])


def test_native_payouts_follow_probabilities():
    env, _, _ = envs("easy")
    n = 8192

    @jax.jit
    def run(key):
        state, _ = jax.vmap(env.reset)(jax.random.split(key, n))
        arms = jnp.arange(n) % env.num_bandits
        state2, ts = jax.vmap(env.step)(state, arms)
        return state.probs[jnp.arange(n), arms], ts

    p, ts = run(jax.random.PRNGKey(3))
    payout = np.asarray(ts.observation)[:, 1]
    # E[payout - p] = 0; std of the mean <= 0.5 / sqrt(n).
    assert abs(np.mean(payout - np.asarray(p))) < 4 * 0.5 / np.sqrt(n)
    assert np.all(np.asarray(ts.step_type) != LAST)
    np.testing.assert_array_equal(np.asarray(ts.reward) > 0, payout == 1)


def test_registry_and_unknown_difficulty():
    env = make("popgym/multiarmed_bandit", difficulty="hard")
    assert (env.num_bandits, env.max_episode_steps) == (30, 600)
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/multiarmed_bandit", difficulty="impossible")
