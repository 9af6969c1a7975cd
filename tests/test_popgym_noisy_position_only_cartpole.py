"""NoisyPositionOnlyCartPole port vs popgym.envs.noisy_position_only_cartpole, step for step.

The reference's random stream is re-created from its seed, so the port gets the same initial
physics and the same float32 noise draws (after the reset and after every step) through
``step_with_noise``. Physics drift is handled as in ``test_popgym_position_only_cartpole``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from popgym.envs import noisy_position_only_cartpole as ref_module
from popgym_harness import (
    DIFFICULTIES,
    assert_equivalent,
    random_actions,
    reference_classes,
    replay,
)
from popgym_physics import (
    assert_forced_from_reference,
    assert_noise_specs,
    cartpole_oracle,
    noisy_port_and_reference,
    noisy_reference_draws,
    noisy_state_from_ref,
)

from stoixlite.envs.popgym import noisy_position_only_cartpole as port
from stoixlite.envs.registry import make

REFERENCE = reference_classes(ref_module, "NoisyPositionOnlyCartPole")


def envs(difficulty: str, x64: bool = False):
    make_port = port.make_noisy_position_only_cartpole
    return noisy_port_and_reference(make_port, REFERENCE[difficulty], difficulty, x64)


def initial_physics(rng: np.random.Generator) -> np.ndarray:
    """gymnasium CartPole's reset draw: ``(x, x_dot, theta, theta_dot)`` in ``U(-0.05, 0.05)``."""
    return rng.uniform(-0.05, 0.05, size=(4,))


state_from_ref = noisy_state_from_ref(initial_physics)


def mostly_oracle(ref, rng):
    """The balancing controller, with a random push one step in ten."""
    return cartpole_oracle(ref, None, rng) if rng.random() < 0.9 else int(rng.integers(2))


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_specs_match_reference(difficulty):
    env, _, ref = envs(difficulty)
    assert_noise_specs(env, ref, difficulty)
    assert env.action_space.n == ref.action_space.n == 2
    assert env.observation_space.shape == ref.observation_space.shape == (2,)
    np.testing.assert_allclose(env.observation_space.high, ref.observation_space.high, rtol=1e-7)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_equivalence_random_actions(difficulty, x64):
    _, wrapped, ref = envs(difficulty, x64)
    with jax.enable_x64(x64):
        records = replay(wrapped, ref, state_from_ref, random_actions(2), 8, seed=21)
    assert_equivalent(records, atol=1e-6 if x64 else 1e-5)
    for r in records:
        assert r.ref_terminated[-1]
        assert 0.0 < r.jax_return < 1.0
        # Noise is really there (the observation is not the clean state).
        assert np.abs(r.ref_obs).max() > 0.0


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_oracle_open_loop_whole_episodes(difficulty):
    """float64, 200 balanced steps = the whole episode (time limit 200 at every difficulty)."""
    _, wrapped, ref = envs(difficulty, x64=True)
    with jax.enable_x64(True):
        records = replay(wrapped, ref, state_from_ref, cartpole_oracle, 2, seed=3)
    assert_equivalent(records, atol=1e-6)
    for r in records:
        assert r.length == 200 and r.ref_truncated[-1] and r.jax_truncated[-1]
        assert r.ref_return == pytest.approx(1.0) and r.jax_return == pytest.approx(1.0, 1e-5)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_equivalence_forced_whole_episodes(difficulty):
    env, _, ref = envs(difficulty)
    assert_forced_from_reference(
        env,
        ref,
        mostly_oracle,
        range(3),
        draws=lambda seed: noisy_reference_draws(ref, seed, initial_physics)[1],
    )


def test_native_noise_statistics():
    """The JAX env's own noise: zero mean, std sigma, clipped to the observation bounds."""
    env, _, _ = envs("hard")
    n = 4096
    state, ts = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(1), n))
    for _ in range(2):  # after the reset, then after a step
        clean = np.asarray(state.physics, np.float32)[:, [0, 2]]
        noise = np.asarray(ts.observation) - clean
        np.testing.assert_allclose(noise.mean(0), 0.0, atol=0.03)
        np.testing.assert_allclose(noise[:, 0].std(), env.noise_sigma, rtol=0.1)  # never clipped
        high = np.asarray(env.observation_space.high, np.float32)
        assert np.all(np.abs(np.asarray(ts.observation)) <= high)
        assert np.any(np.abs(np.asarray(ts.observation)[:, 1]) == high[1])  # theta noise clipped
        state, ts = jax.jit(jax.vmap(env.step))(state, jnp.zeros(n, jnp.int32))


def test_registry_and_unknown_difficulty():
    env = make("popgym/noisy_position_only_cartpole", difficulty="hard")
    assert isinstance(env, port.NoisyPositionOnlyCartPole) and env.noise_sigma == 0.3
    with pytest.raises(ValueError, match="easy, medium, hard"):
        make("popgym/noisy_position_only_cartpole", difficulty="impossible")
