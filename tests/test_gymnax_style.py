"""The gymnax-style adapter (``stoixlite.envs.gymnax_style``) on a toy env written here the way
docs/extending.md ("Adding a JAX env in one file") tells: the termination/truncation split, the
env-provided episode metrics through the wrappers, the rollout and the learner's
``train/env/<name>`` means (against numpy), and their episode-weighted reduction per chunk."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from stoixlite.envs import LAST, Box, Discrete, make_batched_env, wrap_env
from stoixlite.envs.gymnax_style import GymnaxStyleEnv, convert_space, replace_params
from stoixlite.envs.types import EPISODE_METRICS
from stoixlite.ppo.learner import episode_metrics
from stoixlite.ppo.types import Transition
from stoixlite.tracking.metrics import summarize_chunk


@struct.dataclass
class CoinState:
    coins: jax.Array  # int32: coins collected this episode
    time: jax.Array  # int32
    goal: jax.Array  # int32: the action that collects a coin
    trapped: jax.Array  # bool: the trap action was played


@struct.dataclass
class CoinParams:
    max_steps: int = 6
    trap: int = 3  # action that ends the episode (a termination)


class CoinSpace:
    """A gymnax-style space object, read by duck typing."""

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)


class CoinGame:
    """A gymnax-style functional env: action ``goal`` collects a coin (+1), action ``trap``
    ends the episode (terminated); the time limit ``max_steps`` sits in ``done`` too."""

    def reset_env(self, key: jax.Array, params: CoinParams) -> tuple[jax.Array, CoinState]:
        goal = jax.random.randint(key, (), 0, 3)
        state = CoinState(jnp.int32(0), jnp.int32(0), goal, jnp.bool_(False))
        return self.obs(state), state

    def step_env(self, key, state: CoinState, action, params: CoinParams):
        del key
        hit = action == state.goal
        state = CoinState(state.coins + hit, state.time + 1, state.goal, action == params.trap)
        done = state.trapped | (state.time >= params.max_steps)
        return self.obs(state), state, hit.astype(jnp.float32), done, {}

    def obs(self, state: CoinState) -> jax.Array:
        return jnp.stack([state.coins, state.time]).astype(jnp.float32)

    def observation_space(self, params: CoinParams) -> CoinSpace:
        return CoinSpace(low=0.0, high=float(params.max_steps), shape=(2,))

    def action_space(self, params: CoinParams) -> CoinSpace:
        return CoinSpace(n=4)


class Coins(GymnaxStyleEnv):
    def __init__(self, **overrides: Any):
        params = replace_params(CoinParams(), overrides, "toy/coins")
        super().__init__(CoinGame(), params, "toy/coins", params.max_steps)

    def terminated_truncated(self, env_state, done, info):
        del done, info  # done holds both ends; the state tells them apart
        return env_state.trapped, env_state.time >= self.params.max_steps

    def episode_metrics(self, env_state):
        return {"coins": env_state.coins, "late": env_state.time > 3}


def test_spaces_are_read_by_duck_typing():
    env = Coins()
    assert env.action_space == Discrete(n=4)
    assert env.observation_space == Box(low=0.0, high=6.0, shape=(2,))
    with pytest.raises(TypeError, match="unsupported space"):
        convert_space(CoinSpace(size=3), flatten=True)
    with pytest.raises(ValueError, match=r"unknown params \['bogus'\] for toy/coins; allowed"):
        Coins(bogus=1)


def _goal(env) -> int:
    """The coin action of the first episode of ``_play``."""
    state, _ = wrap_env(env, obs_augment=False).reset(jax.random.PRNGKey(0))
    return int(state.env_state.env_state.env_state.goal)  # EpisodeStats, AutoReset, adapter


def _play(env, actions: list[int]):
    env = wrap_env(env, obs_augment=False)
    state, ts = env.reset(jax.random.PRNGKey(0))
    out = [ts]
    for a in actions:
        state, ts = jax.jit(env.step)(state, jnp.int32(a))
        out.append(ts)
    return out


def test_time_limit_truncates_and_the_trap_terminates():
    env = Coins(max_steps=4)
    goal = _goal(env)
    tss = _play(env, [goal, goal, 0 if goal else 1, goal, 0])
    types = [int(ts.step_type) for ts in tss]
    assert types == [0, 1, 1, 1, LAST, 1]
    assert float(tss[4].discount) == 1.0 and bool(tss[4].extras["truncated"])
    metrics = tss[4].extras[EPISODE_METRICS]
    assert float(metrics["coins"]) == 3.0 and float(metrics["late"]) == 1.0
    assert float(tss[4].extras["episode_return"]) == 3.0
    # the first step of the next episode starts counting again
    assert float(tss[5].extras[EPISODE_METRICS]["coins"]) in (0.0, 1.0)
    trap = _play(Coins(max_steps=4), [3])
    assert int(trap[1].step_type) == LAST and float(trap[1].discount) == 0.0
    # terminated and truncated on one step: termination wins
    both = _play(Coins(max_steps=1), [3])
    assert float(both[1].discount) == 0.0 and not bool(both[1].extras["truncated"])


def test_reset_and_step_carry_the_same_metrics_structure():
    env = make_batched_env(Coins(), 3, obs_augment=True)
    state, ts = env.reset(jax.random.PRNGKey(1))
    _, nxt = jax.jit(env.step)(state, jnp.zeros(3, jnp.int32))
    assert jax.tree.structure(ts) == jax.tree.structure(nxt)
    assert set(ts.extras[EPISODE_METRICS]) == {"coins", "late"}
    assert ts.extras[EPISODE_METRICS]["late"].dtype == jnp.float32


def test_learner_means_env_metrics_over_finished_episodes():
    rng = np.random.default_rng(0)
    t, n = 7, 5
    last = rng.random((t, n)) < 0.3
    coins = rng.integers(0, 9, (t, n)).astype(np.float32)
    zeros = np.zeros((t, n), np.float32)
    traj = Transition(
        obs=zeros[..., None],
        start=np.zeros((t, n), bool),
        action=np.zeros((t, n), np.int32),
        log_prob=zeros,
        value=zeros,
        reward=zeros,
        discount=np.ones((t, n), np.float32),
        last=last,
        next_obs=zeros[..., None],
        episode_return=coins,
        episode_length=np.ones((t, n), np.int32),
        invalid_action=np.zeros((t, n), bool),
        episode_metrics={"coins": coins},
    )
    out = episode_metrics(jax.tree.map(jnp.asarray, traj))
    np.testing.assert_allclose(float(out["train/env/coins"]), coins[last].mean(), rtol=1e-6)
    assert int(out["train/episodes"]) == last.sum()
    # no episode finished: 0, and the chunk reduction below skips that update
    none = traj.replace(last=np.zeros((t, n), bool))
    assert float(episode_metrics(jax.tree.map(jnp.asarray, none))["train/env/coins"]) == 0.0


def test_chunk_reduction_weights_env_metrics_by_episodes():
    chunk = {
        "train/episode_return": np.array([1.0, 0.0, 3.0], np.float32),
        "train/episodes": np.array([1, 0, 3], np.int32),
        "train/env/achievements": np.array([2.0, 0.0, 6.0], np.float32),
    }
    out = summarize_chunk(chunk)
    assert math.isclose(out["train/env/achievements"], (2.0 + 6.0 * 3) / 4, rel_tol=1e-6)
    out = summarize_chunk({**chunk, "train/episodes": np.zeros(3, np.int32)})
    assert math.isnan(out["train/env/achievements"])
