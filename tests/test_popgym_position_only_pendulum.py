"""PositionOnlyPendulum port vs popgym.envs.position_only_pendulum, replayed step for step.

Actions are float32 ``[1]`` torques, drawn beyond the ``[-2, 2]`` bounds to check the env's clip.
Open-loop replays run the port in float64 (whole episodes) and float32 (first 60 steps); whole
episodes are also checked one step at a time from the reference's exact state (float32 port).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import position_only_pendulum as ref_module
from popgym_harness import assert_equivalent, replay
from popgym_physics import assert_forced_equivalent, forced_records

from stoixlite.envs.popgym import position_only_pendulum as port
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST, Box

REFERENCE = {
    "easy": ref_module.PositionOnlyPendulumEasy,
    "medium": ref_module.PositionOnlyPendulumMedium,
    "hard": ref_module.PositionOnlyPendulumHard,
}
DIFFICULTIES = list(REFERENCE)


@functools.cache
def envs(difficulty: str, x64: bool = False):
    dtype = jnp.float64 if x64 else jnp.float32
    return port.make_position_only_pendulum(difficulty, dtype), REFERENCE[difficulty]()


def state_from_ref(env, ref):
    return env.reset_from_physics(ref.state)


def random_torque(ref, obs, rng):
    return rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)


def pump(ref, obs, rng):
    """Scripted energy pumping: full torque along the angular velocity (clipped by the env)."""
    return np.array([2.5 if ref.state[1] >= 0 else -2.5], np.float32)


POLICIES = {"random": random_torque, "pump": pump}


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert (
        env.max_episode_steps
        == ref.max_episode_length
        == {"easy": 200, "medium": 150}.get(difficulty, 100)
    )
    assert isinstance(env.action_space, Box) and env.action_space.shape == ref.action_space.shape
    assert (env.action_space.low, env.action_space.high) == (-2.0, 2.0)
    assert env.observation_space.shape == ref.observation_space.shape == (2,)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_equivalence_open_loop_float64(difficulty, policy):
    env, ref = envs(difficulty, x64=True)
    with jax.enable_x64(True):
        records = replay(env, ref, state_from_ref, POLICIES[policy], 4, seed=31)
    assert_equivalent(records, atol=1e-6)
    for r in records:
        assert r.length == ref.max_episode_length
        assert r.ref_truncated[-1] and r.jax_truncated[-1] and not r.ref_terminated.any()
        assert abs(r.jax_return) <= 1.0 + 1e-5
        assert np.all(np.abs(r.jax_reward) <= 1.0 / ref.max_episode_length + 1e-9)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_open_loop_float32_bounded(difficulty):
    env, ref = envs(difficulty)
    records = replay(env, ref, state_from_ref, random_torque, 4, seed=41, max_steps=60)
    assert_equivalent(records, atol=1e-5)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_forced_whole_episodes(difficulty):
    env, ref = envs(difficulty)
    for policy in POLICIES.values():
        records = forced_records(
            ref, range(3), lambda r, rng, policy=policy: policy(r, None, rng), lambda r: r.state
        )
        assert_forced_equivalent(env, records, lambda p: env.reset_from_physics(p)[0])
        assert np.all(records["episode_length"] == ref.max_episode_length)


def test_reward_scaling_extremes():
    """popgym maps gymnasium's reward [-16.27, 0] linearly to [-1/L, 1/L]."""
    env, ref = envs("hard")
    top = env.reward_transform(jnp.float32(0.0))
    bottom = env.reward_transform(jnp.float32(16.2736044))
    assert float(top) == pytest.approx(1.0 / 100) == ref.reward_transform(0.0)
    assert float(bottom) == pytest.approx(-1.0 / 100, abs=1e-9)
    # Upright and still, zero torque: the best reward, exactly as the reference computes it.
    state, _ = env.reset_from_physics(jnp.zeros(2))
    _, ts = env.step(state, jnp.zeros(1))
    assert float(ts.reward) == pytest.approx(0.01)


def test_native_reset_and_truncation():
    env, _ = envs("hard")
    n = 64

    @jax.jit
    def run(key):
        state, ts0 = jax.vmap(env.reset)(jax.random.split(key, n))

        def body(s, key):
            s, ts = jax.vmap(env.step)(s, jax.random.uniform(key, (n, 1), minval=-3, maxval=3))
            return s, (ts.step_type, ts.discount, ts.reward)

        out = jax.lax.scan(body, state, jax.random.split(key, env.max_episode_steps))[1]
        return state, ts0, out

    state, ts0, (step_type, discount, reward) = run(jax.random.PRNGKey(0))
    physics = np.asarray(state.physics)
    assert np.all(np.abs(physics[:, 0]) <= np.pi) and np.all(np.abs(physics[:, 1]) <= 1.0)
    np.testing.assert_allclose(ts0.observation[:, 0], np.cos(physics[:, 0]), atol=1e-6)
    assert np.all(step_type[:-1] != LAST) and np.all(step_type[-1] == LAST)
    assert np.all(discount == 1.0)  # never terminated; the time limit bootstraps
    returns = np.asarray(reward.sum(0))
    assert np.all((returns >= -1.0) & (returns <= 1.0))


def test_registry_and_unknown_difficulty():
    env = make("popgym/position_only_pendulum", difficulty="medium")
    assert isinstance(env, port.PositionOnlyPendulum) and env.max_episode_steps == 150
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/position_only_pendulum", difficulty="impossible")
