"""PositionOnlyPendulum port vs popgym.envs.position_only_pendulum, replayed step for step.

Actions are float32 ``[1]`` torques, drawn beyond the ``[-2, 2]`` bounds to check the env's clip.
Open-loop replays run the port in float64 (whole episodes) and float32 (first 60 steps); whole
episodes are also checked one step at a time from the reference's exact state (float32 port).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import position_only_pendulum as ref_module
from popgym_harness import (
    DIFFICULTIES,
    assert_equivalent,
    assert_last_only_at_end,
    native_rollout,
    reference_classes,
    replay,
)
from popgym_physics import (
    assert_forced_from_reference,
    physics_state_from_ref,
    port_and_reference,
    pump,
    random_torque,
)

from stoixlite.envs.popgym import position_only_pendulum as port
from stoixlite.envs.registry import make
from stoixlite.envs.types import Box

REFERENCE = reference_classes(ref_module, "PositionOnlyPendulum")
POLICIES = {"random": random_torque, "pump": pump}


def envs(difficulty: str, x64: bool = False):
    make_port = port.make_position_only_pendulum
    return port_and_reference(make_port, REFERENCE[difficulty], difficulty, x64)


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
        records = replay(env, ref, physics_state_from_ref, POLICIES[policy], 4, seed=31)
    assert_equivalent(records, atol=1e-6)
    for r in records:
        assert r.length == ref.max_episode_length
        assert r.ref_truncated[-1] and r.jax_truncated[-1] and not r.ref_terminated.any()
        assert abs(r.jax_return) <= 1.0 + 1e-5
        assert np.all(np.abs(r.jax_reward) <= 1.0 / ref.max_episode_length + 1e-9)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_open_loop_float32_bounded(difficulty):
    env, ref = envs(difficulty)
    records = replay(env, ref, physics_state_from_ref, random_torque, 4, seed=41, max_steps=60)
    assert_equivalent(records, atol=1e-5)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_forced_whole_episodes(difficulty):
    env, ref = envs(difficulty)
    for policy in POLICIES.values():
        records = assert_forced_from_reference(
            env, ref, lambda r, rng, policy=policy: policy(r, None, rng), range(3)
        )
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
    torques = lambda states, key: jax.random.uniform(key, (n, 1), minval=-3, maxval=3)
    state, ts0, _, ts = native_rollout(env, jax.random.PRNGKey(0), n, policy=torques)
    physics = np.asarray(state.physics)
    assert np.all(np.abs(physics[:, 0]) <= np.pi) and np.all(np.abs(physics[:, 1]) <= 1.0)
    np.testing.assert_allclose(ts0.observation[:, 0], np.cos(physics[:, 0]), atol=1e-6)
    assert_last_only_at_end(ts.step_type)
    assert np.all(ts.discount == 1.0)  # never terminated; the time limit bootstraps
    returns = np.asarray(ts.reward.sum(0))
    assert np.all((returns >= -1.0) & (returns <= 1.0))


def test_registry_and_unknown_difficulty():
    env = make("popgym/position_only_pendulum", difficulty="medium")
    assert isinstance(env, port.PositionOnlyPendulum) and env.max_episode_steps == 150
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/position_only_pendulum", difficulty="impossible")
