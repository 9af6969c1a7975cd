"""Wrapper semantics on a tiny deterministic counting env (the 3-step example of the Stoix thread).

CountingEnv: observation ``[t, offset]`` where ``t`` counts steps since reset and ``offset`` is a
random number drawn from the reset key (so we can tell episodes apart); reward ``10 * t + a``
(``t`` after the step, ``a`` the action's first component); the episode ends after ``length``
steps, by termination (discount 0) or by truncation (discount 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from test_invalid_actions import scalar_conds

from stoixlite.envs.types import FIRST, LAST, MID, Box, Discrete, Environment, restart, transition
from stoixlite.envs.wrappers import (
    AutoResetWrapper,
    EpisodeStatsWrapper,
    ObsAugmentWrapper,
    VmapWrapper,
    make_batched_env,
    reset_pool_size,
    wrap_env,
)


@struct.dataclass
class CountState:
    t: jax.Array
    offset: jax.Array


class CountingEnv(Environment):
    def __init__(self, length: int = 3, truncate: bool = False, box_action: bool = False):
        self.length = length
        self.truncate = truncate
        self.observation_space = Box(low=-10.0, high=10.0, shape=(2,))
        self.action_space = Box(low=-1.0, high=1.0, shape=(2,)) if box_action else Discrete(n=3)
        self.max_episode_steps = length if truncate else None

    def _obs(self, s: CountState) -> jax.Array:
        return jnp.stack([s.t.astype(jnp.float32), s.offset])

    def reset(self, key):
        s = CountState(jnp.int32(0), jax.random.uniform(key))
        return s, restart(self._obs(s))

    def step(self, state, action):
        s = CountState(state.t + 1, state.offset)
        a0 = jnp.asarray(action, jnp.float32).reshape(-1)[0]
        reward = 10.0 * s.t + a0
        end = s.t >= self.length
        terminated = end & (not self.truncate)
        truncated = end & self.truncate
        return s, transition(self._obs(s), reward, terminated, truncated)


def rollout(env: Environment, actions: jax.Array, seed: int = 0):
    """Reset then step through ``actions`` (leading time axis) with lax.scan.

    Carrying the timestep through the scan also checks that reset and step timesteps have the
    same pytree structure and dtypes. Returns (reset timestep, stacked step timesteps).
    """

    def body(carry, action):
        state, _ = carry
        state, ts = env.step(state, action)
        return (state, ts), ts

    state, ts0 = env.reset(jax.random.key(seed))
    _, traj = jax.lax.scan(body, (state, ts0), actions)
    return ts0, traj


@pytest.fixture(scope="module")
def discrete_traj():
    env = wrap_env(CountingEnv(length=3), obs_augment=False)
    actions = jnp.array([1, 2, 0, 1, 2, 0, 1], jnp.int32)
    ts0, traj = jax.jit(lambda a: rollout(env, a))(actions)
    return actions, ts0, traj


def test_auto_reset_three_step_example(discrete_traj):
    actions, ts0, traj = discrete_traj
    np.testing.assert_array_equal(np.asarray(ts0.observation)[0], 0.0)
    assert int(ts0.step_type) == FIRST and float(ts0.discount) == 1.0
    np.testing.assert_array_equal(ts0.extras["next_obs"], ts0.observation)
    assert not bool(ts0.extras["truncated"])

    st = np.asarray(traj.step_type)
    np.testing.assert_array_equal(st, [MID, MID, LAST, MID, MID, LAST, MID])
    t_obs = np.asarray(traj.observation)[:, 0]
    # LAST's observation is already the next episode's first (t=0); we never see t=3 there.
    np.testing.assert_array_equal(t_obs, [1, 2, 0, 1, 2, 0, 1])
    # next_obs is the true final observation on LAST and the observation otherwise.
    nxt = np.asarray(traj.extras["next_obs"])
    np.testing.assert_array_equal(nxt[:, 0], [1, 2, 3, 1, 2, 3, 1])
    notlast = st != LAST
    np.testing.assert_array_equal(nxt[notlast], np.asarray(traj.observation)[notlast])
    # Final reward and discount of the transition that ended the episode.
    np.testing.assert_allclose(traj.reward, 10.0 * np.array([1, 2, 3, 1, 2, 3, 1]) + actions)
    np.testing.assert_array_equal(traj.discount, [1, 1, 0, 1, 1, 0, 1])
    assert not np.asarray(traj.extras["truncated"]).any()
    # The offset identifies the episode: constant within one, fresh after each auto-reset
    # (the AutoReset key is split on each reset), and next_obs keeps the old episode's offset.
    off = np.asarray(traj.observation)[:, 1]
    ep0 = float(ts0.observation[1])
    np.testing.assert_array_equal(off[:2], ep0)
    np.testing.assert_array_equal(nxt[2, 1], ep0)
    assert off[2] != ep0 and off[5] != off[2]
    np.testing.assert_array_equal(off[3:5], off[2])
    np.testing.assert_array_equal(nxt[5, 1], off[2])


def test_episode_stats(discrete_traj):
    actions, ts0, traj = discrete_traj
    assert float(ts0.extras["episode_return"]) == 0.0
    assert int(ts0.extras["episode_length"]) == 0
    rewards = np.asarray(traj.reward)
    np.testing.assert_allclose(
        traj.extras["episode_return"],
        [rewards[0], rewards[:2].sum(), rewards[:3].sum(), rewards[3]]
        + [rewards[3:5].sum(), rewards[3:6].sum(), rewards[6]],
    )
    np.testing.assert_array_equal(traj.extras["episode_length"], [1, 2, 3, 1, 2, 3, 1])
    assert traj.extras["episode_return"].dtype == jnp.float32
    assert traj.extras["episode_length"].dtype == jnp.int32


def test_truncation_keeps_discount_one():
    env = wrap_env(CountingEnv(length=2, truncate=True), obs_augment=False)
    _, traj = rollout(env, jnp.zeros((5,), jnp.int32))
    np.testing.assert_array_equal(traj.step_type, [MID, LAST, MID, LAST, MID])
    np.testing.assert_array_equal(traj.discount, 1.0)
    np.testing.assert_array_equal(traj.extras["truncated"], [False, True, False, True, False])
    np.testing.assert_array_equal(np.asarray(traj.extras["next_obs"])[:, 0], [1, 2, 1, 2, 1])
    np.testing.assert_array_equal(np.asarray(traj.observation)[:, 0], [1, 0, 1, 0, 1])


def test_obs_augment_discrete_around_auto_reset():
    env = wrap_env(CountingEnv(length=2), obs_augment=True)
    assert env.observation_space.shape == (2 + 3 + 1,)
    assert env.action_space == Discrete(n=3)
    actions = jnp.array([2, 1, 0, 2], jnp.int32)
    ts0, traj = rollout(env, actions)
    np.testing.assert_array_equal(ts0.observation[2:], [0, 0, 0, 1])
    obs, nxt = np.asarray(traj.observation), np.asarray(traj.extras["next_obs"])
    assert obs.dtype == np.float32
    eye = np.eye(3)
    # step 0: MID, prev action 2, not first
    np.testing.assert_array_equal(obs[0, 2:], [*eye[2], 0])
    np.testing.assert_array_equal(obs[0], nxt[0])
    # step 1: LAST -> new episode's first obs (zero action, is_first 1); next_obs is the true
    # final augmented observation (t=2, last action 1, is_first 0)
    assert int(traj.step_type[1]) == LAST
    np.testing.assert_array_equal(obs[1, [0, 2, 3, 4, 5]], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(nxt[1, [0, 2, 3, 4, 5]], [2, *eye[1], 0])
    # step 2 continues the new episode
    np.testing.assert_array_equal(obs[2, [0, 2, 3, 4, 5]], [1, *eye[0], 0])
    np.testing.assert_array_equal(obs[3, [0, 5]], [0, 1])
    np.testing.assert_array_equal(nxt[3, [0, 2, 3, 4, 5]], [2, *eye[2], 0])


def test_obs_prev_reward_around_auto_reset():
    """``obs_prev_reward``: the previous reward sits before the is-first flag, 0 after resets."""
    env = wrap_env(CountingEnv(length=2), obs_augment=True, obs_prev_reward=True)
    space = env.observation_space
    assert space.shape == (2 + 3 + 2,)
    assert space.low[-2:] == (-np.inf, 0.0) and space.high[-2:] == (np.inf, 1.0)
    actions = jnp.array([2, 1, 0, 2], jnp.int32)
    ts0, traj = rollout(env, actions)
    np.testing.assert_array_equal(ts0.observation[2:], [0, 0, 0, 0, 1])
    obs, nxt = np.asarray(traj.observation), np.asarray(traj.extras["next_obs"])
    eye = np.eye(3)
    # rewards 10 t + a: 12, 21 (LAST), 10, 22 (LAST)
    np.testing.assert_array_equal(obs[0, 2:], [*eye[2], 12, 0])
    np.testing.assert_array_equal(obs[1, [0, 2, 3, 4, 5, 6]], [0, 0, 0, 0, 0, 1])  # auto-reset
    np.testing.assert_array_equal(nxt[1, [0, 2, 3, 4, 5, 6]], [2, *eye[1], 21, 0])
    np.testing.assert_array_equal(obs[2, [0, 2, 3, 4, 5, 6]], [1, *eye[0], 10, 0])
    np.testing.assert_array_equal(nxt[3, [0, 5, 6]], [2, 22, 0])
    # without the option the layout is unchanged
    assert wrap_env(CountingEnv(), obs_augment=True).observation_space.shape == (6,)
    with pytest.raises(ValueError, match="obs_augment"):
        wrap_env(CountingEnv(), obs_augment=False, obs_prev_reward=True)


def test_obs_prev_action_off_keeps_the_is_first_flag():
    """``obs_prev_action=False``: the augmentation is [obs, (prev reward,) is_first], no action."""
    env = wrap_env(CountingEnv(length=2), obs_augment=True, obs_prev_action=False)
    assert env.observation_space.shape == (2 + 1,)
    actions = jnp.array([2, 1, 0, 2], jnp.int32)
    ts0, traj = rollout(env, actions)
    full_ts0, full = rollout(wrap_env(CountingEnv(length=2), obs_augment=True), actions)
    keep = [0, 1, 5]  # the full layout without the action one-hot (columns 2-4)
    np.testing.assert_array_equal(ts0.observation, np.asarray(full_ts0.observation)[keep])
    np.testing.assert_array_equal(
        np.asarray(traj.observation), np.asarray(full.observation)[:, keep]
    )
    np.testing.assert_array_equal(
        np.asarray(traj.extras["next_obs"]), np.asarray(full.extras["next_obs"])[:, keep]
    )
    with_reward = wrap_env(
        CountingEnv(length=2), obs_augment=True, obs_prev_action=False, obs_prev_reward=True
    )
    _, traj = rollout(with_reward, actions)
    # rewards 10 t + a: 12, 21 (LAST: the auto-reset observation), 10, 22 (LAST)
    expected = [[12, 0], [0, 1], [10, 0], [0, 1]]
    np.testing.assert_array_equal(np.asarray(traj.observation)[:, 2:], expected)


def test_obs_prev_action_config_and_fingerprint():
    """``env.obs_prev_action`` parses as a strict bool; at its default it is left out of the
    checkpoint fingerprint (checkpoints written before the key existed still restore)."""
    from conftest import compose_config

    from stoixlite.config.fingerprint import config_fingerprint
    from stoixlite.config.parse import parse
    from stoixlite.config.strict import ConfigError

    default = config_fingerprint(parse(compose_config(["env=popgym/repeat_previous"])).to_dict())
    off = config_fingerprint(
        parse(compose_config(["env=popgym/repeat_previous", "env.obs_prev_action=false"])).to_dict()
    )
    assert "obs_prev_action" not in default["env"]
    assert off["env"]["obs_prev_action"] is False and off["hash"] != default["hash"]
    with pytest.raises(ConfigError, match=r"^env.obs_prev_action='no' is invalid: .*true or false"):
        parse(compose_config(["env.obs_prev_action=no"]))


def test_obs_prev_reward_config_needs_obs_augment():
    from conftest import compose_config

    from stoixlite.config.parse import parse
    from stoixlite.config.strict import ConfigError

    parse(compose_config(["env.obs_prev_reward=true"]))  # repeat_previous: obs_augment on
    with pytest.raises(ConfigError, match=r"^env.obs_prev_reward=True is invalid: requires"):
        parse(compose_config(["env=gymnax/CartPole-v1", "env.obs_prev_reward=true"]))


def test_obs_augment_box_action_and_space():
    raw = CountingEnv(length=2, box_action=True)
    aug = ObsAugmentWrapper(raw)
    space = aug.observation_space
    assert space.shape == (5,)
    np.testing.assert_array_equal(space.low, [-10, -10, -1, -1, 0])
    np.testing.assert_array_equal(space.high, [10, 10, 1, 1, 1])
    assert aug.unwrapped is raw and aug.action_space is raw.action_space
    env = wrap_env(raw, obs_augment=True)
    actions = jnp.array([[0.5, -0.25], [0.75, 0.125], [-1.0, 1.0]], jnp.float32)
    ts0, traj = rollout(env, actions)
    np.testing.assert_array_equal(ts0.observation[2:], [0, 0, 1])
    obs, nxt = np.asarray(traj.observation), np.asarray(traj.extras["next_obs"])
    np.testing.assert_array_equal(obs[0, 2:], [0.5, -0.25, 0])
    np.testing.assert_array_equal(obs[1, [0, 2, 3, 4]], [0, 0, 0, 1])  # auto-reset
    np.testing.assert_array_equal(nxt[1, [0, 2, 3, 4]], [2, 0.75, 0.125, 0])
    np.testing.assert_array_equal(obs[2, [0, 2, 3, 4]], [1, -1.0, 1.0, 0])


def test_vmap_shapes_and_independence():
    num_envs = 4
    env = VmapWrapper(wrap_env(CountingEnv(length=3), obs_augment=True), num_envs)
    assert env.observation_space.shape == (6,) and env.max_episode_steps is None
    assert isinstance(env.unwrapped, CountingEnv)
    state, ts = env.reset(jax.random.key(3))
    assert ts.observation.shape == (num_envs, 6)
    assert len(set(np.asarray(ts.observation)[:, 1].tolist())) == num_envs  # distinct keys
    actions = jnp.array([0, 1, 2, 0], jnp.int32)
    state, ts = jax.jit(env.step)(state, actions)
    for leaf in (ts.step_type, ts.reward, ts.discount, ts.extras["truncated"]):
        assert leaf.shape == (num_envs,)
    assert ts.extras["next_obs"].shape == (num_envs, 6)
    assert ts.extras["episode_return"].shape == (num_envs,)
    np.testing.assert_allclose(ts.reward, 10.0 + np.asarray(actions))
    np.testing.assert_array_equal(np.asarray(ts.observation)[:, 2:5], np.eye(3)[actions])


def test_wrappers_forward_specs():
    raw = CountingEnv(length=3, truncate=True)
    for wrapper in (AutoResetWrapper, EpisodeStatsWrapper):
        w = wrapper(raw)
        assert w.observation_space == raw.observation_space
        assert w.action_space == raw.action_space
        assert w.max_episode_steps == 3
        assert w.unwrapped is raw


def _key_data(tree):
    """The pytree with typed PRNG keys replaced by their raw uint32 data (comparable arrays)."""
    is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)


def _random_play(env, num_envs: int, num_actions: int, key: jax.Array, steps: int):
    """``(states, timesteps)`` of ``steps`` uniformly random actions on the batched ``env``,
    reset with ``key`` and stepped with keys split from it."""

    def body(state, step_key):
        action = jax.random.randint(step_key, (num_envs,), 0, num_actions)
        state, ts = env.step(state, action)
        return state, (state, ts)

    state, _ = env.reset(key)
    return jax.lax.scan(body, state, jax.random.split(jax.random.fold_in(key, 1), steps))[1]


@pytest.mark.parametrize("name", ["popgym/minesweeper", "popgym/labyrinth_escape"])
def test_batched_lazy_reset_equals_eager_reset(name):
    """make_batched_env (resets only on steps where some env is done) gives exactly the states and
    timesteps of VmapWrapper(wrap_env(...)) (resets computed every step)."""
    from stoixlite.envs.registry import make

    raw = make(name)
    num_envs, steps = 6, 60
    eager = VmapWrapper(wrap_env(raw, obs_augment=True), num_envs)
    lazy = make_batched_env(raw, num_envs, obs_augment=True)

    def run(env):
        return _random_play(env, num_envs, raw.action_space.n, jax.random.key(5), steps)

    lazy_run = jax.jit(lambda: run(lazy))
    assert "cond[" in str(jax.make_jaxpr(lazy_run)())
    want, got = _key_data(jax.jit(lambda: run(eager))()), _key_data(lazy_run())
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(a, b)
    done_per_step = np.asarray(got[1].step_type == LAST).sum(1)
    assert (done_per_step == 0).any()  # steps on which the lazy stack skips the resets
    if name == "popgym/minesweeper":  # steps that reset only the done envs (at most the pool)
        assert ((done_per_step > 0) & (done_per_step <= reset_pool_size(num_envs))).any()


def test_lazy_reset_under_seeds_equals_each_seed_alone():
    """Under a vmap over seeds (the multi-seed learner) the lazy stack merges seeds x envs into
    one batch: the same states and timesteps as each seed's batch stepped on its own, and the
    resets still behind a cond on the whole batch (not a select computed every step)."""
    from stoixlite.envs.registry import make

    raw = make("popgym/minesweeper")
    num_envs, seeds, steps = 4, 2, 30
    env = make_batched_env(raw, num_envs, obs_augment=False)

    def run(key):
        return _random_play(env, num_envs, raw.action_space.n, key, steps)

    keys = jax.random.split(jax.random.key(9), seeds)
    together = _key_data(jax.jit(jax.vmap(run))(keys))
    for s in range(seeds):
        alone = _key_data(jax.jit(run)(keys[s]))
        for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(together), strict=True):
            np.testing.assert_array_equal(a, b[s])
    state, _ = jax.vmap(env.reset)(keys)
    actions = jnp.zeros((seeds, num_envs), jnp.int32)
    # the reset's three-way switch (none, the done envs, all) on the merged batch
    assert 3 in scalar_conds(jax.vmap(env.step), state, actions)
