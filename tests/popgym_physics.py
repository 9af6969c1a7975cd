"""Test tools for the POPGym ports whose reference draws randomness or integrates float64 physics.

* :func:`reference_stream` re-creates a reference episode's random stream from its seed (gymnasium
  seeds ``np_random`` with ``PCG64(SeedSequence(seed))``), so every draw the reference makes
  (initial physics, observation noise, bandit payouts) can be put into the JAX env exactly.
* :class:`DrawReplay` wraps a port whose ``step_with_<draw>(state, action, draw)`` is the pure
  transition given a random draw, and feeds it a per-episode table of the reference's draws, so the
  replay harness (``popgym_harness.replay``) can drive it like any env.
* :func:`forced_records` / :func:`assert_forced_equivalent` check the transition one step at a
  time *from the reference's exact state* (teacher forcing) along whole episodes: needed for
  physics, where an open-loop replay of an unstable system amplifies float rounding (see
  ``stoixlite/envs/popgym/position_only_cartpole.py``); :func:`assert_forced_from_reference`
  does both for a port started with ``reset_from_physics``.
* Shared pieces of the control-env tests: :func:`port_and_reference` (and
  :func:`noisy_port_and_reference`), the reference policies
  (:func:`cartpole_oracle`, :func:`random_torque`, :func:`pump`), the noisy variants' draws
  (:func:`noisy_reference_draws`, :func:`noisy_state_from_ref`, :func:`assert_noise_specs`) and
  :class:`CartPoleTests`, the test suite shared by the position-only and velocity-only CartPoles.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnasium.utils import seeding
from popgym_harness import (
    DIFFICULTIES,
    assert_equivalent,
    assert_last_only_at_end,
    native_rollout,
    random_actions,
    replay,
)

from stoixlite.envs.popgym.position_only_cartpole import balancing_action
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST, Environment, TimeStep


def reference_stream(seed: int) -> np.random.Generator:
    """The generator ``ref_env.reset(seed=seed)`` installs as ``np_random`` (same stream)."""
    return seeding.np_random(seed)[0]


@struct.dataclass
class ReplayState:
    """inner: the port's state; draws: ``[T, ...]`` the reference's draws in order; t: int32."""

    inner: Any
    draws: jax.Array
    t: jax.Array


class DrawReplay(Environment[ReplayState]):
    """``step(s, a) = env.<step_with>(s.inner, a, s.draws[s.t])``: the port fed recorded draws."""

    def __init__(self, env: Environment, step_with: str):
        self.env = env
        self._step_with = getattr(env, step_with)
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.max_episode_steps = env.max_episode_steps

    def start(self, inner_state: Any, timestep: TimeStep, draws) -> tuple[ReplayState, TimeStep]:
        state = ReplayState(inner_state, jnp.asarray(draws), jnp.asarray(0, jnp.int32))
        return state, timestep

    def step(self, state: ReplayState, action: jax.Array) -> tuple[ReplayState, TimeStep]:
        inner, ts = self._step_with(state.inner, action, state.draws[state.t])
        return state.replace(inner=inner, t=state.t + 1), ts


def forced_records(
    ref_env,
    seeds,
    policy: Callable[[Any, np.random.Generator], Any],
    ref_state: Callable[[Any], np.ndarray],
    draws: Callable[[int], np.ndarray] | None = None,
    encode_obs: Callable[[Any], np.ndarray] = lambda o: np.asarray(o, np.float32).reshape(-1),
) -> dict[str, np.ndarray]:
    """Play whole reference episodes, recording for every step the state *before* it.

    Returns flat ``[K, ...]`` arrays over all steps of all episodes: ``physics``, ``num_steps``,
    ``action``, ``obs`` (after the step), ``reward``, ``terminated``, ``truncated`` and, with
    ``draws(seed) -> [T + 1, ...]`` (index 0: the reset's draw), ``draw`` (the step's draw).
    """
    out: dict[str, list] = {k: [] for k in ("physics", "num_steps", "action", "obs", "reward")}
    out.update(terminated=[], truncated=[], draw=[], episode_length=[])
    rng = np.random.default_rng(0)
    for seed in seeds:
        ref_env.reset(seed=seed)
        table = draws(seed) if draws is not None else None
        t = 0
        while True:
            out["physics"].append(np.array(ref_state(ref_env), np.float64))
            out["num_steps"].append(t)
            action = policy(ref_env, rng)
            obs, reward, terminated, truncated, _ = ref_env.step(action)
            out["action"].append(np.asarray(action))
            out["obs"].append(encode_obs(obs))
            out["reward"].append(float(reward))
            out["terminated"].append(bool(terminated))
            out["truncated"].append(bool(truncated))
            if table is not None:
                out["draw"].append(table[t + 1])
            t += 1
            if terminated or truncated:
                break
        out["episode_length"].append(t)
    return {k: np.asarray(v) for k, v in out.items() if len(v)}


def assert_forced_equivalent(
    env: Environment,
    records: dict[str, np.ndarray],
    start: Callable[[jax.Array], Any],
    step_with: str | None = None,
    atol: float = 1e-5,
) -> None:
    """One JAX step from every recorded reference state equals the reference's step.

    ``start(physics) -> state`` builds the port's state at step 0 from a physics vector; the
    recorded ``num_steps`` is then put in (so time limits are checked too).
    """
    dtype = getattr(env, "physics_dtype", jnp.float32)
    physics = jnp.asarray(records["physics"], dtype)
    states = jax.vmap(start)(physics)
    states = states.replace(num_steps=jnp.asarray(records["num_steps"], jnp.int32))
    actions = jnp.asarray(records["action"])
    if step_with is None:
        _, ts = jax.jit(jax.vmap(env.step))(states, actions)
    else:
        draws = jnp.asarray(records["draw"])
        _, ts = jax.jit(jax.vmap(getattr(env, step_with)))(states, actions, draws)
    ts = jax.device_get(ts)
    obs = np.asarray(ts.observation).reshape(len(actions), -1)
    bad = ~np.all(np.isclose(obs, records["obs"], atol=atol, rtol=0), axis=-1)
    assert not bad.any(), (
        f"observation differs at forced step {np.flatnonzero(bad)[:5].tolist()}: "
        f"{obs[bad][:2].tolist()} vs {records['obs'][bad][:2].tolist()}"
    )
    np.testing.assert_allclose(np.asarray(ts.reward), records["reward"], atol=1e-6, rtol=0)
    last = np.asarray(ts.step_type) == LAST
    discount = np.asarray(ts.discount)
    np.testing.assert_array_equal(last & (discount == 0.0), records["terminated"])
    np.testing.assert_array_equal(
        last & (discount == 1.0), records["truncated"] & ~records["terminated"]
    )


def assert_forced_from_reference(
    env: Environment,
    ref_env,
    policy: Callable[[Any, np.random.Generator], Any],
    seeds,
    draws: Callable[[int], np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`forced_records` of ``ref_env`` (state ``ref_env.state``) under ``policy``, checked
    with :func:`assert_forced_equivalent` for a port started by ``reset_from_physics``; with
    ``draws`` (the reference's noise) through ``step_with_noise``. Returns the records."""
    records = forced_records(ref_env, seeds, policy, lambda r: r.state, draws=draws)
    assert_forced_equivalent(
        env,
        records,
        lambda p: env.reset_from_physics(p)[0],
        step_with=None if draws is None else "step_with_noise",
    )
    return records


@functools.cache
def port_and_reference(make_port: Callable, ref_cls: type, difficulty: str, x64: bool = False):
    """``(make_port(difficulty, float64 if x64 else float32), ref_cls())``, cached."""
    return make_port(difficulty, jnp.float64 if x64 else jnp.float32), ref_cls()


@functools.cache
def noisy_port_and_reference(
    make_port: Callable, ref_cls: type, difficulty: str, x64: bool = False
):
    """``(env, DrawReplay(env, "step_with_noise"), ref_cls())`` for a noisy port, cached."""
    env, ref = port_and_reference(make_port, ref_cls, difficulty, x64)
    return env, DrawReplay(env, "step_with_noise"), ref


def cartpole_oracle(ref, obs, rng) -> int:
    """The balancing controller on the reference's exact state (a harness ``actions_fn``)."""
    return int(balancing_action(ref.state))


def random_torque(ref, obs, rng) -> np.ndarray:
    """Pendulum: uniform torques in ``[-3, 3]``, beyond the bounds to exercise the env's clip."""
    return rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)


def pump(ref, obs, rng) -> np.ndarray:
    """Scripted energy pumping: full torque along the angular velocity (clipped by the env)."""
    return np.array([2.5 if ref.state[1] >= 0 else -2.5], np.float32)


def noisy_reference_draws(
    ref, seed: int, initial_physics: Callable[[np.random.Generator], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(initial physics, noise float32 ``[L + 1, 2]``) exactly as ``ref.reset(seed)`` and its steps
    draw them; ``initial_physics(rng)`` repeats the reference's own draw of the initial state."""
    rng = reference_stream(seed)
    physics = initial_physics(rng)
    noise = [
        rng.normal(0, ref.noise_sigma).astype(np.float32) for _ in range(ref.max_episode_length + 1)
    ]
    return physics, np.stack(noise)


def noisy_state_from_ref(initial_physics: Callable[[np.random.Generator], np.ndarray]):
    """Harness adapter for a noisy port wrapped in ``DrawReplay(env, "step_with_noise")``: the
    reference's initial physics and noise draws go into the port."""

    def state_from_ref(wrapped: DrawReplay, ref):
        physics, noise = noisy_reference_draws(ref, ref.np_random_seed, initial_physics)
        np.testing.assert_array_equal(physics, ref.state)  # the stream replay is exact
        inner, ts = wrapped.env.reset_with_noise(physics, noise[0])
        return wrapped.start(inner, ts, noise[1:])

    return state_from_ref


def assert_noise_specs(env, ref, difficulty: str) -> None:
    """Noisy variants: time limit 200 at every difficulty, sigma 0.1 / 0.2 / 0.3 as popgym's."""
    assert env.max_episode_steps == ref.max_episode_length == 200  # all difficulties
    np.testing.assert_array_equal(env.noise_sigma, ref.noise_sigma)
    assert env.noise_sigma == {"easy": 0.1, "medium": 0.2, "hard": 0.3}[difficulty]


def physics_state_from_ref(env, ref):
    return env.reset_from_physics(ref.state)


class CartPoleTests:
    """Reference-equivalence tests shared by the position-only and velocity-only CartPole ports.

    A test module subclasses it as ``Test<Env>`` and sets ``name`` (registry name
    ``popgym/<name>``), ``make_port`` (the port factory ``(difficulty, physics_dtype)``),
    ``port_class``, ``reference`` (difficulty -> popgym class) and ``step_obs`` (physics indices
    observed after a step).
    Open-loop replays run the port in float64 (``jax.enable_x64``) and float32 over whole
    random-action episodes and the first 200 steps of balancing (oracle) episodes; whole oracle
    episodes up to the time limit are checked one step at a time from the reference's exact state.
    The time limit is a truncation (discount 1), never a termination.
    """

    name: ClassVar[str]
    make_port: ClassVar[Callable]
    port_class: ClassVar[type]
    reference: ClassVar[Mapping[str, type]]
    step_obs: ClassVar[list[int]]

    def envs(self, difficulty: str, x64: bool = False):
        return port_and_reference(type(self).make_port, self.reference[difficulty], difficulty, x64)

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    def test_specs_match_reference(self, difficulty):
        env, ref = self.envs(difficulty)
        assert (
            env.max_episode_steps
            == ref.max_episode_length
            == {"easy": 200, "medium": 400}.get(difficulty, 600)
        )
        assert env.action_space.n == ref.action_space.n == 2
        assert env.observation_space.shape == ref.observation_space.shape == (2,)
        high, low = env.observation_space.high, env.observation_space.low
        np.testing.assert_allclose(high, ref.observation_space.high, rtol=1e-7)
        np.testing.assert_allclose(low, ref.observation_space.low, rtol=1e-7)

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    @pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
    def test_equivalence_random_actions(self, difficulty, x64):
        env, ref = self.envs(difficulty, x64)
        with jax.enable_x64(x64):
            records = replay(env, ref, physics_state_from_ref, random_actions(2), 8, seed=11)
        assert_equivalent(records, atol=1e-6 if x64 else 1e-5)
        for r in records:
            assert r.ref_terminated[-1] and not r.ref_truncated[-1]
            # The terminating step is rewarded like any other: 1/L, so returns lie in [0, 1].
            np.testing.assert_allclose(r.jax_reward, 1.0 / ref.max_episode_length, rtol=1e-6)
            assert 0.0 < r.jax_return < 1.0

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    def test_equivalence_oracle_open_loop_first_200_steps(self, difficulty):
        """float64 open loop over 200 balanced steps (drift ~1e-16 * e^16); easy hits its limit."""
        env, ref = self.envs(difficulty, x64=True)
        with jax.enable_x64(True):
            records = replay(
                env, ref, physics_state_from_ref, cartpole_oracle, 3, seed=5, max_steps=200
            )
        assert_equivalent(records, atol=1e-6)
        for r in records:
            assert r.length == 200 and not r.ref_terminated.any()
            if difficulty == "easy":
                assert r.ref_truncated[-1] and r.jax_truncated[-1]
                assert r.ref_return == pytest.approx(1.0)
                assert r.jax_return == pytest.approx(1.0, 1e-5)

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    def test_equivalence_forced_whole_episodes(self, difficulty):
        """Every step of whole oracle (max return, truncated at L) and random episodes, float32."""
        env, ref = self.envs(difficulty)
        oracle = lambda r, rng: cartpole_oracle(r, None, rng)
        records = assert_forced_from_reference(env, ref, oracle, range(2))
        assert np.all(records["episode_length"] == ref.max_episode_length)
        assert records["truncated"].sum() == 2 and not records["terminated"].any()
        assert records["reward"].sum() == pytest.approx(2.0)
        assert_forced_from_reference(env, ref, lambda r, rng: int(rng.integers(2)), range(4))

    def test_native_reset_vmap_and_oracle(self):
        """JAX-side episodes: the JAX oracle balances for the whole time limit (return 1,
        truncated). The reset observation is (x, theta), later ones ``step_obs`` (popgym quirk)."""
        env, _ = self.envs("easy")
        n = 16
        state, ts0, _, ts = native_rollout(env, jax.random.PRNGKey(0), n)
        assert np.all(np.abs(np.asarray(state.physics)) <= 0.05)
        np.testing.assert_array_equal(ts0.observation, np.asarray(state.physics)[:, [0, 2]])
        state1, ts1 = jax.vmap(env.step)(state, jnp.ones(n, jnp.int32))
        np.testing.assert_array_equal(ts1.observation, np.asarray(state1.physics)[:, self.step_obs])
        assert_last_only_at_end(ts.step_type)
        assert np.all(ts.discount[-1] == 1.0)  # time limit: truncation, bootstrap
        np.testing.assert_allclose(np.asarray(ts.reward.sum(0)), 1.0, atol=1e-5)

    def test_registry_and_unknown_difficulty(self):
        env = make(f"popgym/{self.name}", difficulty="hard")
        assert isinstance(env, self.port_class) and env.max_episode_steps == 600
        assert make(f"popgym/{self.name}").physics_dtype == jnp.float32
        with pytest.raises(ValueError, match="easy, medium, hard"):
            make(f"popgym/{self.name}", difficulty="impossible")
