"""NoisyPositionOnlyPendulum port vs popgym.envs.noisy_position_only_pendulum, step for step.

The reference's random stream is re-created from its seed: the same initial physics and the same
float32 noise draws go into the port (``step_with_noise``). Float64 open loop over whole episodes,
plus every step from the reference's exact state for the float32 port.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from popgym.envs import noisy_position_only_pendulum as ref_module
from popgym_harness import DIFFICULTIES, assert_equivalent, reference_classes, replay
from popgym_physics import (
    assert_forced_from_reference,
    assert_noise_specs,
    noisy_port_and_reference,
    noisy_reference_draws,
    noisy_state_from_ref,
    pump,
    random_torque,
)

from stoixlite.envs.popgym import noisy_position_only_pendulum as port
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "NoisyPositionOnlyPendulum")


def envs(difficulty: str, x64: bool = False):
    make_port = port.make_noisy_position_only_pendulum
    return noisy_port_and_reference(make_port, REFERENCE[difficulty], difficulty, x64)


def initial_physics(rng: np.random.Generator) -> np.ndarray:
    """gymnasium Pendulum's reset draw: ``theta ~ U(-pi, pi)``, ``theta_dot ~ U(-1, 1)``."""
    high = np.array([np.pi, 1.0])
    return rng.uniform(low=-high, high=high)


state_from_ref = noisy_state_from_ref(initial_physics)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, _, ref = envs(difficulty)
    assert_noise_specs(env, ref, difficulty)
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
    assert_forced_from_reference(
        env,
        ref,
        lambda r, rng: random_torque(r, None, rng),
        range(3),
        draws=lambda seed: noisy_reference_draws(ref, seed, initial_physics)[1],
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
