"""Craftax through the gymnax-style adapter (``stoixlite.envs.craftax_adapter``), checked against
Craftax's own ``step_env``: the same observations and rewards from the same keys, the time limit
as a truncation and death as a termination, and the episode metrics equal to the achievements
Craftax itself reports in ``info`` when an episode ends. The env contract and the invalid-action
policy are checked for every registered env by test_env_contract.py and test_invalid_actions.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("craftax", reason="Craftax is an optional extra: pip install '.[craftax]'")

from adapter_replay import replay_against_step_env  # noqa: E402

from stoixlite.envs import LAST, make  # noqa: E402
from stoixlite.envs.craftax_adapter import CRAFTAX_VARIANTS, CraftaxEnv  # noqa: E402
from stoixlite.envs.types import EPISODE_METRICS  # noqa: E402

CLASSIC = "craftax/classic_symbolic"


@pytest.mark.parametrize(
    "variant,obs,actions,limit,achievements",
    [
        ("classic_symbolic", (1345,), 17, 10_000, 22),
        ("symbolic", (8268,), 43, 100_000, 67),
        ("classic_pixels", (63, 63, 3), 17, 10_000, 22),
        # building full Craftax's pixel env draws its textures: 98 s on 2 cores
        pytest.param("pixels", (130, 110, 3), 43, 100_000, 67, marks=pytest.mark.slow),
    ],
)
def test_registered_variants(variant, obs, actions, limit, achievements):
    assert set(CRAFTAX_VARIANTS) == {"classic_symbolic", "symbolic", "classic_pixels", "pixels"}
    env = make(f"craftax/{variant}")
    assert isinstance(env, CraftaxEnv) and env.name == f"craftax/{variant}"
    assert env.observation_space.shape == obs and env.action_space.n == actions
    assert env.observation_space.dtype == jnp.float32  # symbolic vectors, pixel images in [0, 1]
    assert env.max_episode_steps == limit and len(env.achievements) == achievements
    assert sorted(index for _, index in env.achievements) == list(range(achievements))


def test_bad_factory_kwargs_raise():
    with pytest.raises(ValueError, match=r"unknown params \[.bogus.\] for craftax/classic"):
        make(CLASSIC, bogus=1)
    with pytest.raises(ValueError, match="no difficulty levels"):
        make(CLASSIC, difficulty="easy")
    assert make(CLASSIC, max_timesteps=50).max_episode_steps == 50


def _replay(limit: int, steps: int, seed: int = 0):
    """Random actions through the adapter and through Craftax's ``step_env``
    (:func:`adapter_replay.replay_against_step_env`)."""
    raw = make(CLASSIC, max_timesteps=limit)
    actions = jax.random.randint(jax.random.PRNGKey(seed + 1), (steps,), 0, 17)
    return raw, replay_against_step_env(raw, actions, seed)


# Under `pytest -m slow` (CI runs it: .ci/run-slow): one program of two
# Craftax steps, compile-bound (about 30 s of CPU at the tests' optimisation level). The default
# run checks the registered variants here and Craftax's env contract and invalid actions
# (test_env_contract.py, test_invalid_actions.py).
@pytest.mark.slow
def test_replays_craftax_and_truncates_at_the_time_limit():
    raw, (first, (ts, obs, reward, done, info)) = _replay(limit=30, steps=300)
    assert first.extras[EPISODE_METRICS]["achievements"] == 0.0
    last = np.asarray(ts.step_type) == LAST
    np.testing.assert_array_equal(last, np.asarray(done))
    assert last.sum() >= 10  # every episode ends by step 30
    lengths = np.asarray(ts.extras["episode_length"])[last]
    assert (lengths <= 30).all() and (lengths == 30).any()
    # ended at the limit: truncated (discount 1); earlier: died (discount 0)
    np.testing.assert_array_equal(np.asarray(ts.extras["truncated"])[last], lengths == 30)
    np.testing.assert_array_equal(np.asarray(ts.discount)[last], (lengths == 30).astype(float))
    np.testing.assert_array_equal(ts.reward, reward)
    # the true final observation too; the light level (a cosine of the time) may differ by an
    # ulp between the two programs' fusions
    np.testing.assert_allclose(ts.extras["next_obs"], obs, rtol=0, atol=1e-6)
    # Craftax reports the achievements of an ended episode in info (x 100)
    for name, _ in raw.achievements:
        got = np.asarray(ts.extras[EPISODE_METRICS][f"achievement/{name}"])[last]
        np.testing.assert_array_equal(got * 100.0, np.asarray(info[f"Achievements/{name}"])[last])
    total = np.asarray(ts.extras[EPISODE_METRICS]["achievements"])[last]
    counted = sum(np.asarray(info[f"Achievements/{n}"])[last] for n, _ in raw.achievements)
    np.testing.assert_array_equal(total * 100.0, counted)
    assert total.max() >= 1  # random play unlocks something in some episode (collect_wood, ...)


# Slow: it compiles Craftax-Classic's step alone (a second Craftax program, 90 s of CPU and more);
# the default run replays the adapter's episode ends, deaths and truncations against Craftax's
# step_env above.
@pytest.mark.slow
def test_death_is_a_termination_and_wins_over_the_time_limit():
    raw = make(CLASSIC, max_timesteps=1000)
    state, _ = raw.reset(jax.random.PRNGKey(0))
    step = jax.jit(raw.step)  # one program for the three cases
    for timestep, health, discount in ((0, 0, 0.0), (999, 0, 0.0), (999, 9, 1.0)):
        # dies mid-episode; dies on the step that reaches the limit; only reaches the limit
        start = state.env_state.replace(player_health=health, timestep=timestep)
        _, ts = step(state.replace(env_state=start), jnp.int32(0))
        assert int(ts.step_type) == LAST and float(ts.discount) == discount, timestep
