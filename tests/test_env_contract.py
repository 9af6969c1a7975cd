"""The env contract, checked for every registered env outside the popgym suite (whose ports are
proven step for step against popgym by their own tests): a new env is picked up here as soon as
it is registered.

Checked: ``reset``/``step`` are pure and jittable and return timesteps of the declared
observation space with identical structure; step types, rewards and discounts are valid; the
standard batched stack (``make_batched_env``) runs under ``jit`` and ``vmap``, auto-resets after
every LAST (the next step continues a fresh episode) and never lets an episode run past
``max_episode_steps``; declared difficulties all build. Envs whose optional dependency is not
installed (``requires`` of their registration, e.g. Craftax) are skipped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from slow_envs import SLOW_ENVS, SLOW_PROBES

from stoixlite.envs.registry import available_envs, env_spec, make, missing_modules
from stoixlite.envs.types import FIRST, LAST, MID
from stoixlite.envs.wrappers import make_batched_env
from stoixlite.specs import Discrete

ENVS = [name for name in available_envs() if env_spec(name).suite != "popgym"]
NUM_ENVS = 3
# Time limits of the batched-stack test for envs whose own limit is too long to step through
# on a CPU (Craftax: 10,000 and 100,000 steps); the limit is the same code path at any length.
SHORT_LIMITS = {
    f"craftax/{v}": 40 for v in ("classic_symbolic", "symbolic", "classic_pixels", "pixels")
}
# Envs whose compilation alone takes minutes on a 2-core CPU: checked by `pytest -m slow`.
SLOW = SLOW_ENVS


def cases(names: list[str], slow: frozenset[str] = SLOW) -> list:
    """``names`` as parameters, those in ``slow`` marked slow."""
    return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n for n in names]


def build(name: str, difficulty: str | None = None, **kwargs):
    for module in missing_modules(name):
        pytest.importorskip(module, reason=f"{name} needs the optional extra '.[{module}]'")
    spec = env_spec(name)
    level = difficulty or (spec.difficulties[0] if spec.difficulties else None)
    return make(name, **kwargs) if level is None else make(name, difficulty=level, **kwargs)


def random_action(env, key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
    space = env.action_space
    if isinstance(space, Discrete):
        return jax.random.randint(key, shape, 0, space.n, space.dtype)
    low, high = jnp.asarray(space.low), jnp.asarray(space.high)
    return jax.random.uniform(key, shape + space.shape, space.dtype, low, high)


def test_non_popgym_envs_are_registered():
    assert ENVS, "the contract test needs at least one non-popgym env"


@pytest.mark.parametrize("name", cases(ENVS))
def test_reset_and_step_follow_the_declared_specs(name):
    env = build(name)
    state, ts = jax.jit(env.reset)(jax.random.PRNGKey(0))
    obs_shape = tuple(env.observation_space.shape)
    assert ts.observation.shape == obs_shape and int(ts.step_type) == FIRST
    assert float(ts.reward) == 0.0 and float(ts.discount) == 1.0
    step = jax.jit(env.step)
    key = jax.random.PRNGKey(1)
    for _ in range(5):
        key, act_key = jax.random.split(key)
        state, nxt = step(state, random_action(env, act_key))
        assert jax.tree.structure(nxt) == jax.tree.structure(ts), "reset/step structures differ"
        assert nxt.observation.shape == obs_shape
        assert nxt.observation.dtype == ts.observation.dtype
        assert int(nxt.step_type) in (MID, LAST)
        assert float(nxt.discount) in (0.0, 1.0) and np.isfinite(float(nxt.reward))
        if int(nxt.step_type) == LAST:
            break


@pytest.mark.parametrize("name", cases(ENVS, SLOW_PROBES))
def test_batched_stack_auto_resets_under_jit_and_vmap(name):
    short = {"max_timesteps": SHORT_LIMITS[name]} if name in SHORT_LIMITS else {}
    env = build(name, **short)
    limit = env.max_episode_steps or 500
    steps = limit + 2
    batched = make_batched_env(env, NUM_ENVS, obs_augment=False)

    @jax.jit
    def play(key):
        key, reset_key = jax.random.split(key)
        state, ts = batched.reset(reset_key)

        def body(carry, k):
            state, _ = carry
            state, ts = batched.step(state, random_action(env, k, (NUM_ENVS,)))
            return (state, ts), (ts.step_type, ts.extras["episode_length"], ts.observation)

        return jax.lax.scan(body, (state, ts), jax.random.split(key, steps))[1]

    step_type, length, obs = (np.asarray(x) for x in play(jax.random.PRNGKey(2)))
    assert obs.shape == (steps, NUM_ENVS) + tuple(env.observation_space.shape)
    assert np.isfinite(obs).all()
    assert set(np.unique(step_type)) <= {MID, LAST}
    # Episode lengths count from the reset: the running count of MID steps since the last LAST.
    for n in range(NUM_ENVS):
        since = 0
        for t in range(steps):
            since += 1
            if step_type[t, n] == LAST:
                assert length[t, n] == since, (t, n)
                since = 0
            if env.max_episode_steps is not None:
                assert since <= env.max_episode_steps
    if env.max_episode_steps is not None:
        assert (step_type == LAST).any(axis=0).all(), "every env must finish an episode"


# Every arcade game's levels are built eagerly (op by op: 5-23 s a game); test_arcade_adapter.py
# builds count_recall's easy and medium in the default run.
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW or n.startswith("arcade/") else n
        for n in ENVS
        if env_spec(n).difficulties
    ],
)
def test_every_declared_difficulty_builds(name):
    for level in env_spec(name).difficulties:
        env = build(name, level)
        _, ts = env.reset(jax.random.PRNGKey(0))
        assert ts.observation.shape == tuple(env.observation_space.shape)
