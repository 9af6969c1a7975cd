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
  ``stoixlite/envs/popgym/position_only_cartpole.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnasium.utils import seeding

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
