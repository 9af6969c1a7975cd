"""Replay harness proving a JAX port step-for-step identical to its ``popgym`` reference.

Usage::

    records = replay(jax_env, ref_env, state_from_ref, actions_fn, num_episodes, encode_obs)
    assert_equivalent(records)

For each episode ``i`` the harness

1. resets the reference with ``ref_env.reset(seed=seed + i)`` and builds the JAX start state with
   the per-env adapter ``state_from_ref(jax_env, ref_env) -> (state, timestep)``, which injects the
   reference's random draws (e.g. its shuffled deck) into the JAX state;
2. plays the reference episode to its end (or ``max_steps``), choosing each action with
   ``actions_fn(ref_env, ref_obs, rng) -> action`` (random, or an oracle that reads the reference's
   hidden state), and records observations (encoded with ``encode_obs``), rewards and flags.

All episodes are then replayed through the JAX env in a single compiled call, ``vmap`` over
episodes of a ``lax.scan`` over the recorded actions (padded to a fixed length; steps after the
reference's last step are ignored). The compiled function is cached per env instance, so repeated
``replay`` calls with the same ``num_episodes`` and length compile once.

``assert_equivalent`` checks, at every step, the encoded observation and the reward (allclose,
``atol``), terminated and truncated (derived from the JAX ``step_type`` and ``discount``; a
reference step that is both terminated and truncated must be terminated, discount 0), and the
episode length (the JAX env is LAST exactly on the reference's final step, never before), plus the
FIRST timestep (step type, reward 0, discount 1, observation).

Shared by the per-env tests: :func:`reference_classes` (popgym's ``*Easy/Medium/Hard`` classes),
:func:`state_from_deck` (the adapter of the single-deck card games), :class:`FlatActions` (grid
games), :func:`env_config`, :func:`assert_returns` and, for the JAX env on its own,
:func:`native_rollout` and :func:`assert_last_only_at_end`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from stoixlite.envs.popgym import DIFFICULTIES
from stoixlite.envs.popgym.cards import deal_order_from_popgym
from stoixlite.envs.popgym.reference import encode_space  # noqa: F401 (re-exported to the tests)
from stoixlite.envs.types import FIRST, LAST, Environment, TimeStep

StateFromRef = Callable[[Environment, Any], tuple[Any, TimeStep]]
ActionsFn = Callable[[Any, Any, np.random.Generator], Any]


@dataclass
class EpisodeRecord:
    """One replayed episode of ``length`` reference steps; per-step arrays have leading axis T.

    ``*_obs`` include the reset observation: shape ``[T + 1, D]``.
    """

    seed: int
    actions: np.ndarray
    ref_obs: np.ndarray
    ref_reward: np.ndarray
    ref_terminated: np.ndarray
    ref_truncated: np.ndarray
    jax_obs: np.ndarray
    jax_reward: np.ndarray
    jax_step_type: np.ndarray
    jax_discount: np.ndarray
    jax_first: TimeStep

    @property
    def length(self) -> int:
        return len(self.actions)

    @property
    def jax_terminated(self) -> np.ndarray:
        return (self.jax_step_type == LAST) & (self.jax_discount == 0.0)

    @property
    def jax_truncated(self) -> np.ndarray:
        return (self.jax_step_type == LAST) & (self.jax_discount == 1.0)

    @property
    def ref_return(self) -> float:
        return float(np.sum(self.ref_reward))

    @property
    def jax_return(self) -> float:
        return float(np.sum(self.jax_reward))

    @property
    def ref_done(self) -> bool:
        return bool(self.ref_terminated[-1] or self.ref_truncated[-1])


def random_actions(n: int) -> ActionsFn:
    """Uniform random actions over ``Discrete(n)``."""
    return lambda ref_env, ref_obs, rng: int(rng.integers(n))


_ROLLOUTS: dict[int, tuple[Environment, Callable]] = {}


def _rollout_fn(env: Environment) -> Callable:
    """jit(vmap(scan of env.step over an action sequence)), cached per env instance."""
    cached = _ROLLOUTS.get(id(env))
    if cached is not None and cached[0] is env:
        return cached[1]

    def rollout(state, actions):
        def body(s, a):
            s, ts = env.step(s, a)
            return s, (ts.observation, ts.reward, ts.step_type, ts.discount)

        return jax.lax.scan(body, state, actions)[1]

    fn = jax.jit(jax.vmap(rollout))
    _ROLLOUTS[id(env)] = (env, fn)
    return fn


def _play_reference(jax_env, ref_env, state_from_ref, actions_fn, encode_obs, seed, rng, cap):
    """Play one reference episode; the adapter builds the JAX start right after the reset."""
    obs, _ = ref_env.reset(seed=seed)
    start = state_from_ref(jax_env, ref_env)
    observations, actions, rewards, terms, truncs = [encode_obs(obs)], [], [], [], []
    while len(actions) < cap:
        action = actions_fn(ref_env, obs, rng)
        obs, reward, terminated, truncated, _ = ref_env.step(action)
        observations.append(encode_obs(obs))
        actions.append(np.asarray(action))
        rewards.append(float(reward))
        terms.append(bool(terminated))
        truncs.append(bool(truncated))
        if terminated or truncated:
            break
    return start, dict(
        seed=seed,
        actions=np.stack(actions),
        ref_obs=np.stack(observations).astype(np.float32).reshape(len(observations), -1),
        ref_reward=np.asarray(rewards, np.float64),
        ref_terminated=np.asarray(terms),
        ref_truncated=np.asarray(truncs),
    )


def replay(
    jax_env: Environment,
    ref_env,
    state_from_ref: StateFromRef,
    actions_fn: ActionsFn,
    num_episodes: int,
    encode_obs: Callable[[Any], np.ndarray] | None = None,
    seed: int = 0,
    max_steps: int | None = None,
) -> list[EpisodeRecord]:
    """Replay ``num_episodes`` reference episodes through ``jax_env``; see the module docstring.

    ``encode_obs`` defaults to :func:`encode_space` of ``ref_env.observation_space``.
    ``max_steps`` caps each episode and sets the padded scan length (default: the env's
    ``max_episode_steps``, else the longest reference episode).
    """
    if encode_obs is None:
        encode_obs = lambda obs: encode_space(ref_env.observation_space, obs)
    rng = np.random.default_rng(seed)
    cap = max_steps or jax_env.max_episode_steps or 10**9
    played = [
        _play_reference(
            jax_env, ref_env, state_from_ref, actions_fn, encode_obs, seed + i, rng, cap
        )
        for i in range(num_episodes)
    ]
    pad = max_steps or jax_env.max_episode_steps or max(len(p[1]["actions"]) for p in played)
    actions = np.stack([_pad(p[1]["actions"], pad) for p in played])
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[p[0][0] for p in played])
    outputs = jax.device_get(_rollout_fn(jax_env)(states, actions))
    obs, reward, step_type, discount = outputs
    records = []
    for i, ((_, first), ref) in enumerate(played):
        t = len(ref["actions"])
        first = jax.device_get(first)
        jax_obs = np.concatenate([np.asarray(first.observation)[None], obs[i, :t]])
        records.append(
            EpisodeRecord(
                **ref,
                jax_obs=jax_obs.reshape(t + 1, -1),
                jax_reward=np.asarray(reward[i, :t], np.float64),
                jax_step_type=np.asarray(step_type[i, :t]),
                jax_discount=np.asarray(discount[i, :t]),
                jax_first=first,
            )
        )
    return records


def _pad(x: np.ndarray, length: int) -> np.ndarray:
    if len(x) > length:
        raise ValueError(f"episode of {len(x)} steps exceeds the padded length {length}")
    pad = np.zeros((length - len(x),) + x.shape[1:], x.dtype)
    return np.concatenate([x, pad])


def assert_equivalent(records: list[EpisodeRecord], atol: float = 1e-6) -> None:
    """Assert every record matches its reference at every step (see the module docstring)."""
    assert records, "no episodes replayed"
    for r in records:
        where = f"episode seed={r.seed}"
        assert int(r.jax_first.step_type) == FIRST, where
        assert float(r.jax_first.reward) == 0.0 and float(r.jax_first.discount) == 1.0, where
        assert r.jax_obs.shape == r.ref_obs.shape, (
            f"{where}: obs shapes {r.jax_obs.shape} vs reference {r.ref_obs.shape}"
        )
        bad = ~np.all(np.isclose(r.jax_obs, r.ref_obs, atol=atol, rtol=0), axis=-1)
        if bad.any():
            t = int(np.argmax(bad))
            idx = np.flatnonzero(~np.isclose(r.jax_obs[t], r.ref_obs[t], atol=atol, rtol=0))[:8]
            raise AssertionError(
                f"{where}: observation differs after {t} steps at indices {idx.tolist()}: "
                f"jax {r.jax_obs[t][idx].tolist()} vs reference {r.ref_obs[t][idx].tolist()}"
            )
        for name, got, want in (
            ("reward", r.jax_reward, r.ref_reward),
            ("terminated", r.jax_terminated, r.ref_terminated),
            ("truncated", r.jax_truncated, r.ref_truncated & ~r.ref_terminated),
        ):
            bad = ~np.isclose(got, want, atol=atol, rtol=0)
            if bad.any():
                t = int(np.argmax(bad))
                raise AssertionError(
                    f"{where}: {name} differs at step {t + 1} (action {r.actions[t]}): "
                    f"jax {got[t]} vs reference {want[t]}"
                )
        last = np.flatnonzero(r.jax_step_type == LAST)
        jax_len = int(last[0]) + 1 if len(last) else None
        ref_len = r.length if r.ref_done else None
        assert jax_len == ref_len, f"{where}: episode length jax {jax_len} vs reference {ref_len}"


def reference_classes(ref_module: ModuleType, name: str) -> dict[str, type]:
    """``{"easy": ref_module.<name>Easy, "medium": ...Medium, "hard": ...Hard}``."""
    return {d: getattr(ref_module, f"{name}{d.capitalize()}") for d in DIFFICULTIES}


def state_from_deck(jax_env, ref_env) -> tuple[Any, TimeStep]:
    """Adapter of the single-deck card games: the port starts from popgym's shuffled deck."""
    return jax_env.reset_from_deck(deal_order_from_popgym(ref_env.deck))


class FlatActions:
    """The reference env taking the port's flat cell index ``row * width + col`` as its action
    (popgym's grid games take ``[row, col]``, a MultiDiscrete)."""

    def __init__(self, ref, width: int):
        self.ref, self.width = ref, width

    def reset(self, seed=None):
        return self.ref.reset(seed=seed)

    def step(self, action):
        return self.ref.step(np.array([action // self.width, action % self.width]))

    def __getattr__(self, name):
        return getattr(self.ref, name)


def env_config(name: str) -> dict:
    """The shipped Hydra config ``configs/env/popgym/<name>.yaml``, parsed."""
    path = Path(__file__).parents[1] / f"configs/env/popgym/{name}.yaml"
    return yaml.safe_load(path.read_text())


def assert_returns(records: list[EpisodeRecord], optimal: bool = False, low: float = -1.0) -> None:
    """Every JAX return lies in ``[low, 1]``; with ``optimal``, both returns are 1."""
    for r in records:
        assert low - 1e-6 <= r.jax_return <= 1.0 + 1e-6
        if optimal:
            assert r.ref_return == pytest.approx(1.0) and r.jax_return == pytest.approx(
                1.0, abs=1e-5
            )


def native_rollout(
    env: Environment,
    key: jax.Array,
    num_envs: int,
    num_steps: int | None = None,
    policy: Callable[[Any, jax.Array], jax.Array] | None = None,
) -> tuple[Any, TimeStep, Any, TimeStep]:
    """The JAX env on its own: ``num_envs`` episodes from its own ``reset``, ``num_steps`` steps.

    One jitted call: ``vmap(env.reset)`` over ``split(key, num_envs)``, then a scan over
    ``split(key, num_steps)`` (default ``env.max_episode_steps``) of ``vmap(env.step)`` with the
    actions ``policy(states, step_key) -> [num_envs]`` (default: ``vmap(env.oracle_action)``).
    Returns ``(first_state, first_timestep, final_state, timesteps [num_steps, num_envs, ...])``.
    """
    num_steps = env.max_episode_steps if num_steps is None else num_steps
    if policy is None:
        policy = lambda states, _: jax.vmap(env.oracle_action)(states)

    @jax.jit
    def run(key):
        state, first = jax.vmap(env.reset)(jax.random.split(key, num_envs))

        def body(s, step_key):
            return jax.vmap(env.step)(s, policy(s, step_key))

        final, ts = jax.lax.scan(body, state, jax.random.split(key, num_steps))
        return state, first, final, ts

    return run(key)


def uniform_actions(num_envs: int, n: int) -> Callable[[Any, jax.Array], jax.Array]:
    """A :func:`native_rollout` policy: uniform random actions over ``Discrete(n)``."""
    return lambda states, key: jax.random.randint(key, (num_envs,), 0, n)


def assert_last_only_at_end(step_type) -> None:
    """Time-major step types ``[T, ...]``: LAST on the final step and on no earlier one."""
    step_type = np.asarray(step_type)
    assert np.all(step_type[:-1] != LAST) and np.all(step_type[-1] == LAST)
