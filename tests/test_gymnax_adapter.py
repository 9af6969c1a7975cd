"""gymnax adapter: time limits as truncation, pole falls as termination, no double reset, and
agreement with gymnax's own ``step`` trajectory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.envs import LAST, Box, Discrete, make, wrap_env
from stoixlite.envs.gymnax_adapter import GYMNAX_ENVS, GymnaxEnv

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "env" / "gymnax"


def rollout(env, policy, num_steps: int, seed: int = 0):
    """Reset, then ``num_steps`` steps of ``action = policy(observation, key)`` in a lax.scan.

    Returns (reset state, reset timestep, stacked step timesteps, stacked actions, stacked states).
    """

    def body(carry, key):
        state, ts = carry
        action = policy(ts.observation, key)
        state, ts = env.step(state, action)
        return (state, ts), (ts, action, state)

    key, reset_key = jax.random.split(jax.random.key(seed))
    state0, ts0 = env.reset(reset_key)
    _, (traj, actions, states) = jax.lax.scan(body, (state0, ts0), jax.random.split(key, num_steps))
    return state0, ts0, traj, actions, states


def balance(obs, key):
    del key
    return (obs[2] + obs[3] > 0).astype(jnp.int32)


def push_right(obs, key):
    del obs, key
    return jnp.int32(1)


def random_biased(obs, key):
    """Random actions, mostly pushing right, so the pole falls within a few dozen steps."""
    del obs
    return jax.random.bernoulli(key, 0.8).astype(jnp.int32)


def first_last(traj) -> int:
    last = np.flatnonzero(np.asarray(traj.step_type) == LAST)
    assert last.size, "no episode ended"
    return int(last[0])


def test_cartpole_time_limit_is_truncation():
    env = wrap_env(make("gymnax/CartPole-v1", max_steps_in_episode=20), obs_augment=False)
    assert env.max_episode_steps == 20
    _, _, traj, _, _ = jax.jit(lambda: rollout(env, balance, 45))()
    last = np.flatnonzero(np.asarray(traj.step_type) == LAST)
    np.testing.assert_array_equal(last, [19, 39])
    np.testing.assert_array_equal(np.asarray(traj.discount)[last], 1.0)
    np.testing.assert_array_equal(np.flatnonzero(traj.extras["truncated"]), last)
    np.testing.assert_array_equal(np.asarray(traj.extras["episode_length"])[last], 20)
    np.testing.assert_array_equal(np.asarray(traj.extras["episode_return"])[last], 20.0)
    np.testing.assert_array_equal(traj.discount, 1.0)


@pytest.fixture(scope="module")
def pole_fall():
    env = wrap_env(make("gymnax/CartPole-v1"), obs_augment=False)
    return jax.jit(lambda: rollout(env, push_right, 40, seed=1))()


def test_cartpole_pole_fall_is_termination(pole_fall):
    _, _, traj, _, _ = pole_fall
    k = first_last(traj)
    assert 5 < k < 39
    assert float(traj.discount[k]) == 0.0 and not bool(traj.extras["truncated"][k])
    np.testing.assert_array_equal(np.asarray(traj.discount)[:k], 1.0)
    final = np.asarray(traj.extras["next_obs"][k])
    params = gymnax.make("CartPole-v1")[1]
    assert abs(final[2]) > params.theta_threshold_radians or abs(final[0]) > params.x_threshold
    assert int(traj.extras["episode_length"][k]) == k + 1
    assert float(traj.extras["episode_return"][k]) == k + 1.0


def test_terminated_and_truncated_on_same_step_is_termination(pole_fall):
    k = first_last(pole_fall[2])
    env = wrap_env(make("gymnax/CartPole-v1", max_steps_in_episode=k + 1), obs_augment=False)
    _, _, traj, _, _ = rollout(env, push_right, k + 1, seed=1)
    assert first_last(traj) == k
    assert float(traj.discount[k]) == 0.0 and not bool(traj.extras["truncated"][k])
    # One step earlier, the time limit alone is a truncation.
    env = wrap_env(make("gymnax/CartPole-v1", max_steps_in_episode=k), obs_augment=False)
    _, _, traj, _, _ = rollout(env, push_right, k, seed=1)
    assert first_last(traj) == k - 1
    assert float(traj.discount[k - 1]) == 1.0 and bool(traj.extras["truncated"][k - 1])


def test_matches_gymnax_step_trajectory_without_double_reset():
    """Replay our first episode's actions through gymnax's own auto-resetting ``step``."""
    raw = make("gymnax/CartPole-v1")
    env = wrap_env(raw, obs_augment=False)
    state0, ts0, traj, actions, states = jax.jit(lambda: rollout(env, random_biased, 60, 2))()
    k = first_last(traj)
    assert 5 < k < 58, "the biased policy should drop the pole within 60 steps"

    genv, gparams = raw.gymnax_env, raw.params
    gstate = state0.env_state.env_state.env_state  # EpisodeStats -> AutoReset -> Gymnax state
    np.testing.assert_array_equal(ts0.observation, genv.get_obs(gstate))
    gstep = jax.jit(genv.step)
    key = jax.random.key(123)
    for t in range(k + 1):
        key, sub = jax.random.split(key)
        gobs, gstate, grew, gterm, gtrunc, ginfo = gstep(sub, gstate, actions[t], gparams)
        assert float(traj.reward[t]) == float(grew)
        assert bool(traj.last()[t]) == bool(gterm | gtrunc)
        if t < k:
            np.testing.assert_allclose(traj.observation[t], gobs, rtol=1e-6, atol=1e-7)
    # At the end: our next_obs is gymnax's true final observation; the flags agree.
    np.testing.assert_allclose(
        traj.extras["next_obs"][k], ginfo["final_observation"], rtol=1e-6, atol=1e-7
    )
    assert bool(gterm) and not bool(gtrunc) and float(traj.discount[k]) == 0.0
    # We reset exactly once: the inner gymnax state after LAST is a fresh episode (time 0) whose
    # observation is the one we returned, and the next step continues that episode.
    inner = jax.tree.map(lambda x: x[k], states).env_state.env_state.env_state
    assert int(inner.time) == 0
    np.testing.assert_array_equal(traj.observation[k], genv.get_obs(inner))
    cont = genv.step_env(jax.random.key(0), inner, actions[k + 1], gparams)[0]
    np.testing.assert_allclose(traj.observation[k + 1], cont, rtol=1e-6, atol=1e-7)
    assert int(jax.tree.map(lambda x: x[k + 1], states).env_state.env_state.env_state.time) == 1


def test_memory_chain_semantics():
    m = 3
    raw = make("gymnax/MemoryChain-bsuite", memory_length=m)
    assert raw.observation_space.shape == (3,) and raw.action_space == Discrete(n=2)
    env = wrap_env(raw, obs_augment=False)
    step = jax.jit(env.step)
    state, ts = env.reset(jax.random.key(0))
    for episode in range(4):
        obs0 = np.asarray(ts.observation)
        assert obs0[0] == 1.0 and obs0[1] == 0.0 and obs0[2] in (-1.0, 1.0)
        context = int(obs0[2] > 0)
        action = context if episode % 2 == 0 else 1 - context  # right, then wrong
        seen = []
        for _ in range(m + 1):
            state, ts = step(state, jnp.int32(action))
            seen.append((ts.extras["next_obs"], ts))
        # bsuite: observations use the pre-step time, so the context shows twice (t=0).
        np.testing.assert_allclose(seen[0][0], obs0)
        np.testing.assert_allclose([o[0] for o, _ in seen], [1, 1 - 1 / m, 1 - 2 / m, 0], atol=1e-6)
        np.testing.assert_array_equal([o[2] for o, _ in seen[1:]], 0.0)
        np.testing.assert_array_equal([int(t.step_type) for _, t in seen], [1] * m + [LAST])
        np.testing.assert_array_equal([float(t.reward) for _, t in seen[:-1]], 0.0)
        assert float(ts.reward) == (1.0 if episode % 2 == 0 else -1.0)
        assert float(ts.discount) == 0.0 and not bool(ts.extras["truncated"])
        assert int(ts.extras["episode_length"]) == m + 1


def test_pendulum_box_action_and_truncation():
    raw = make("gymnax/Pendulum-v1", max_steps_in_episode=5)
    assert isinstance(raw.action_space, Box) and raw.action_space.shape == (1,)
    assert raw.action_space.low == -2.0 and raw.action_space.high == 2.0
    env = wrap_env(raw, obs_augment=True)
    assert env.observation_space.shape == (3 + 1 + 1,)

    def policy(obs, key):
        return jax.random.uniform(key, (1,), minval=-2.0, maxval=2.0)

    _, _, traj, actions, _ = rollout(env, policy, 7)
    np.testing.assert_array_equal(np.flatnonzero(traj.last()), [4])
    assert float(traj.discount[4]) == 1.0 and bool(traj.extras["truncated"][4])
    obs = np.asarray(traj.observation)
    np.testing.assert_allclose(obs[:4, 3], np.asarray(actions)[:4, 0])
    np.testing.assert_array_equal(obs[4, 3:], [0.0, 1.0])  # auto-reset: zero action, first
    np.testing.assert_allclose(traj.extras["next_obs"][4, 3:], [actions[4, 0], 0.0])


WITH_FILES = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def test_the_envs_with_files_are_registered():
    assert set(WITH_FILES) <= set(GYMNAX_ENVS)


@pytest.mark.parametrize("env_id", WITH_FILES)
def test_registered_envs_and_configs(env_id):
    name = f"gymnax/{env_id}"
    env = make(name, difficulty=None)
    assert isinstance(env, GymnaxEnv) and env.name == name
    _, default_params = gymnax.make(env_id)
    assert env.max_episode_steps == default_params.max_steps_in_episode
    state, ts = env.reset(jax.random.key(0))
    assert ts.observation.dtype == jnp.float32
    assert ts.observation.shape == env.observation_space.shape
    space = env.action_space
    action = jnp.zeros(space.shape, space.dtype)
    state2, ts2 = env.step(state, action)
    assert ts2.observation.shape == ts.observation.shape and ts2.reward.shape == ()
    assert not np.array_equal(jax.random.key_data(state2.key), jax.random.key_data(state.key))
    text = (CONFIG_DIR / f"{env_id}.yaml").read_text()
    assert text.startswith(
        f"# @package _global_\nenv:\n  name: {name}\n  difficulty: null\n  obs_augment: false\n"
        "  obs_prev_reward: false "
    )
    assert text.count("\n") == 7


def test_bad_factory_kwargs_raise():
    with pytest.raises(ValueError, match="unknown params"):
        make("gymnax/CartPole-v1", not_a_param=3)
    with pytest.raises(ValueError, match="difficulty"):
        make("gymnax/CartPole-v1", difficulty="hard")


def test_listing_envs_does_not_import_gymnax():
    """Config parsing lists every env name; gymnax (seconds of imports: seaborn, pandas, ...) is
    imported only when a gymnax env is made, so popgym runs start without it."""
    code = (
        "import sys\n"
        "from stoixlite.envs.registry import available_envs, make\n"
        "assert 'gymnax/CartPole-v1' in available_envs()\n"
        "make('popgym/repeat_first')\n"
        "assert 'gymnax' not in sys.modules, 'gymnax imported'\n"
        "make('gymnax/CartPole-v1')\n"
        "assert 'gymnax' in sys.modules\n"
    )
    run_in_checkout(code)


def test_importing_stoixlite_does_not_start_a_jax_backend():
    """No module of the package creates arrays at import time: a script may import stoixlite
    (the env registry, the networks, the run wing) and still choose XLA flags or devices
    afterwards (``XLA_FLAGS``, ``jax.config``), which a started backend would ignore."""
    code = (
        "import importlib, pkgutil\n"
        "from jax._src import xla_bridge\n"
        "import stoixlite\n"
        "for info in pkgutil.walk_packages(stoixlite.__path__, 'stoixlite.'):\n"
        "    importlib.import_module(info.name)\n"
        "    assert not xla_bridge.backends_are_initialized(), info.name\n"
    )
    run_in_checkout(code)


def run_in_checkout(code: str) -> None:
    """Run ``code`` in a fresh interpreter importing this checkout; it must exit 0."""
    checkout = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=checkout, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_stable_gymnax_beside_gymnax_is_refused_in_one_line_with_the_fix(monkeypatch):
    """``stable-gymnax`` (popgym-arcade's dependency) installs a module also named ``gymnax``: an
    install holding both distributions has one's files over the other's, so gymnax envs (and the
    arcade, which runs on gymnax >= 1.0) refuse to load instead of running on the wrong code."""
    import importlib.metadata

    from stoixlite.envs import gymnax_adapter

    real = importlib.metadata.distribution

    def distribution(name: str):
        if name == "stable-gymnax":
            return real("gymnax")  # any installed distribution: "it is installed"
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    gymnax_adapter.load_gymnax.cache_clear()
    try:
        with pytest.raises(ImportError, match="stable-gymnax is installed") as error:
            make("gymnax/CartPole-v1")
        assert "\n" not in str(error.value)
        assert gymnax_adapter.STABLE_GYMNAX_FIX in str(error.value)
    finally:
        gymnax_adapter.load_gymnax.cache_clear()
    monkeypatch.undo()
    assert make("gymnax/CartPole-v1").name == "gymnax/CartPole-v1"
