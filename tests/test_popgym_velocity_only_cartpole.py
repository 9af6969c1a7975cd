"""VelocityOnlyCartPole port vs popgym.envs.velocity_only_cartpole, replayed step for step.

popgym's quirk is reproduced: the first observation of an episode is (x, theta) (its reset is the
position-only one), every later one is (x_dot, theta_dot).

Open-loop replays (harness) run the port in float64 (``jax.enable_x64``) and float32 over whole
random-action episodes and the first 200 steps of balancing (oracle) episodes; whole oracle
episodes up to the time limit are checked one step at a time from the reference's exact state
(see ``popgym_physics``). The time limit is a truncation (discount 1), never a termination.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import velocity_only_cartpole as ref_module
from popgym_harness import assert_equivalent, random_actions, replay
from popgym_physics import assert_forced_equivalent, forced_records

from stoixlite.envs.popgym import velocity_only_cartpole as port
from stoixlite.envs.popgym.position_only_cartpole import balancing_action
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST

REFERENCE = {
    "easy": ref_module.VelocityOnlyCartPoleEasy,
    "medium": ref_module.VelocityOnlyCartPoleMedium,
    "hard": ref_module.VelocityOnlyCartPoleHard,
}
DIFFICULTIES = list(REFERENCE)


@functools.cache
def envs(difficulty: str, x64: bool = False):
    dtype = jnp.float64 if x64 else jnp.float32
    return port.make_velocity_only_cartpole(difficulty, dtype), REFERENCE[difficulty]()


def state_from_ref(env, ref):
    return env.reset_from_physics(ref.state)


def oracle(ref, obs, rng):
    return int(balancing_action(ref.state))


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, ref = envs(difficulty)
    assert (
        env.max_episode_steps
        == ref.max_episode_length
        == {"easy": 200, "medium": 400}.get(difficulty, 600)
    )
    assert env.action_space.n == ref.action_space.n == 2
    assert env.observation_space.shape == ref.observation_space.shape == (2,)
    np.testing.assert_allclose(env.observation_space.high, ref.observation_space.high, rtol=1e-7)
    np.testing.assert_allclose(env.observation_space.low, ref.observation_space.low, rtol=1e-7)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_equivalence_random_actions(difficulty, x64):
    env, ref = envs(difficulty, x64)
    with jax.enable_x64(x64):
        records = replay(env, ref, state_from_ref, random_actions(2), 8, seed=11)
    assert_equivalent(records, atol=1e-6 if x64 else 1e-5)
    for r in records:
        assert r.ref_terminated[-1] and not r.ref_truncated[-1]
        # The terminating step is rewarded like any other: 1/L, so returns lie in [0, 1].
        np.testing.assert_allclose(r.jax_reward, 1.0 / ref.max_episode_length, rtol=1e-6)
        assert 0.0 < r.jax_return < 1.0


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_oracle_open_loop_first_200_steps(difficulty):
    """float64 open loop over 200 balanced steps (drift ~1e-16 * e^16); easy hits its time limit."""
    env, ref = envs(difficulty, x64=True)
    with jax.enable_x64(True):
        records = replay(env, ref, state_from_ref, oracle, 3, seed=5, max_steps=200)
    assert_equivalent(records, atol=1e-6)
    for r in records:
        assert r.length == 200 and not r.ref_terminated.any()
        if difficulty == "easy":
            assert r.ref_truncated[-1] and r.jax_truncated[-1]
            assert r.ref_return == pytest.approx(1.0) and r.jax_return == pytest.approx(1.0, 1e-5)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_forced_whole_episodes(difficulty):
    """Every step of whole oracle (max return, truncated at L) and random episodes, float32 port."""
    env, ref = envs(difficulty)
    policies = {
        "oracle": lambda r, rng: oracle(r, None, rng),
        "random": lambda r, rng: int(rng.integers(2)),
    }
    for name, policy in policies.items():
        records = forced_records(
            ref, range(2 if name == "oracle" else 4), policy, lambda r: r.state
        )
        assert_forced_equivalent(env, records, lambda p: env.reset_from_physics(p)[0])
        if name == "oracle":
            assert np.all(records["episode_length"] == ref.max_episode_length)
            assert records["truncated"].sum() == 2 and not records["terminated"].any()
            assert records["reward"].sum() == pytest.approx(2.0)


def test_native_reset_vmap_and_oracle():
    """JAX-side episodes: the JAX oracle balances for the whole time limit (return 1, truncated)."""
    env, _ = envs("easy")
    n, steps = 16, env.max_episode_steps

    @jax.jit
    def run(key):
        state, ts0 = jax.vmap(env.reset)(jax.random.split(key, n))

        def body(s, _):
            s, ts = jax.vmap(env.step)(s, jax.vmap(env.oracle_action)(s))
            return s, (ts.step_type, ts.discount, ts.reward)

        return state, ts0, jax.lax.scan(body, state, None, length=steps)[1]

    state, ts0, (step_type, discount, reward) = run(jax.random.PRNGKey(0))
    assert np.all(np.abs(np.asarray(state.physics)) <= 0.05)
    # Reset quirk: positions first, velocities after every step.
    np.testing.assert_array_equal(ts0.observation, np.asarray(state.physics)[:, [0, 2]])
    state1, ts1 = jax.vmap(env.step)(state, jnp.ones(n, jnp.int32))
    np.testing.assert_array_equal(ts1.observation, np.asarray(state1.physics)[:, [1, 3]])
    assert np.all(step_type[:-1] != LAST) and np.all(step_type[-1] == LAST)
    assert np.all(discount[-1] == 1.0)  # time limit: truncation, bootstrap
    np.testing.assert_allclose(np.asarray(reward.sum(0)), 1.0, atol=1e-5)


def test_registry_and_unknown_difficulty():
    env = make("popgym/velocity_only_cartpole", difficulty="hard")
    assert isinstance(env, port.VelocityOnlyCartPole) and env.max_episode_steps == 600
    assert make("popgym/velocity_only_cartpole").physics_dtype == jnp.float32
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/velocity_only_cartpole", difficulty="impossible")
