"""NoisyPositionOnlyPendulum port vs popgym.envs.noisy_position_only_pendulum, step for step.

The reference's random stream is re-created from its seed: the same initial physics and the same
float32 noise draws go into the port (``step_with_noise``). Float64 open loop over whole episodes,
plus every step from the reference's exact state for the float32 port.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import noisy_position_only_pendulum as ref_module
from popgym_harness import assert_equivalent, replay
from popgym_physics import DrawReplay, assert_forced_equivalent, forced_records, reference_stream

from stoixlite.envs.popgym import noisy_position_only_pendulum as port
from stoixlite.envs.registry import make

REFERENCE = {
    "easy": ref_module.NoisyPositionOnlyPendulumEasy,
    "medium": ref_module.NoisyPositionOnlyPendulumMedium,
    "hard": ref_module.NoisyPositionOnlyPendulumHard,
}
DIFFICULTIES = list(REFERENCE)


@functools.cache
def envs(difficulty: str, x64: bool = False):
    dtype = jnp.float64 if x64 else jnp.float32
    env = port.make_noisy_position_only_pendulum(difficulty, dtype)
    return env, DrawReplay(env, "step_with_noise"), REFERENCE[difficulty]()


def reference_draws(ref, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(initial physics [2], noise [L + 1, 2]) exactly as ``ref.reset(seed)`` and its steps draw."""
    rng = reference_stream(seed)
    high = np.array([np.pi, 1.0])
    physics = rng.uniform(low=-high, high=high)
    noise = [
        rng.normal(0, ref.noise_sigma).astype(np.float32) for _ in range(ref.max_episode_length + 1)
    ]
    return physics, np.stack(noise)


def state_from_ref(wrapped, ref):
    physics, noise = reference_draws(ref, ref.np_random_seed)
    np.testing.assert_array_equal(physics, ref.state)  # the stream replay is exact
    inner, ts = wrapped.env.reset_with_noise(physics, noise[0])
    return wrapped.start(inner, ts, noise[1:])


def random_torque(ref, obs, rng):
    return rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)


def pump(ref, obs, rng):
    return np.array([2.5 if ref.state[1] >= 0 else -2.5], np.float32)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, _, ref = envs(difficulty)
    assert env.max_episode_steps == ref.max_episode_length == 200  # all difficulties
    np.testing.assert_array_equal(env.noise_sigma, ref.noise_sigma)
    assert env.noise_sigma == {"easy": 0.1, "medium": 0.2, "hard": 0.3}[difficulty]
    assert env.action_space.shape == ref.action_space.shape == (1,)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("policy", [random_torque, pump], ids=["random", "pump"])
def test_equivalence_open_loop_float64(difficulty, policy):
    _, wrapped, ref = envs(difficulty, x64=True)
    with jax.enable_x64(True):
        records = replay(wrapped, ref, state_from_ref, policy, 3, seed=51)
    assert_equivalent(records, atol=1e-6)
    for r in records:
        assert r.length == 200 and r.ref_truncated[-1] and r.jax_truncated[-1]
        assert abs(r.jax_return) <= 1.0 + 1e-5
        assert np.all(np.abs(r.jax_obs) <= 1.0)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_forced_whole_episodes(difficulty):
    env, _, ref = envs(difficulty)
    records = forced_records(
        ref,
        range(3),
        lambda r, rng: random_torque(r, None, rng),
        lambda r: r.state,
        draws=lambda seed: reference_draws(ref, seed)[1],
    )
    assert_forced_equivalent(
        env, records, lambda p: env.reset_from_physics(p)[0], step_with="step_with_noise"
    )


def test_native_noise_statistics():
    env, _, _ = envs("medium")
    n = 4096
    state, ts = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(2), n))
    th = np.asarray(state.physics)[:, 0]
    clean = np.stack([np.cos(th), np.sin(th)], -1)
    inside = np.all(np.abs(np.asarray(ts.observation)) < 1.0, axis=-1)  # not clipped
    noise = (np.asarray(ts.observation) - clean)[inside]
    np.testing.assert_allclose(noise.mean(0), 0.0, atol=0.03)
    np.testing.assert_allclose(noise.std(0), env.noise_sigma, rtol=0.15)
    assert np.all(np.abs(np.asarray(ts.observation)) <= 1.0)


def test_registry_and_unknown_difficulty():
    env = make("popgym/noisy_position_only_pendulum", difficulty="hard")
    assert isinstance(env, port.NoisyPositionOnlyPendulum) and env.noise_sigma == 0.3
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/noisy_position_only_pendulum", difficulty="impossible")
