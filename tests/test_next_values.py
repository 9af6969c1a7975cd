"""The next values GAE reads: only truncations and the rollout's last step need a network call.

``next_values`` (the rollout that stores every carry) and ``rollout_keeping`` (only the sequence
starts) take V(true next observation) from the rollout's own ``value[t+1]`` inside episodes and
call the network only at truncations and at the last step; neither keeps every step's next
observation (``rollout`` keeps each env's first truncation's and the last step's, and evaluates
later truncations in its loop). Checked against ``bootstrap_values``, which evaluates every step
from every step's next observation, wherever GAE uses the value (every step but a termination,
where it is multiplied by ``discount = 0``), and through GAE itself: on synthetic trajectories
with a toy network (terminations, at most one truncation per env, and two in one env: the
later one from the loop's value), and on real rollouts of Pendulum (time limit 200: one
truncation per env in 256 steps, two in 512) and MemoryChain (terminations every 6 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_plan

from stoixlite.ppo.gae import gae_advantages
from stoixlite.ppo.rollout import (
    Bootstrap,
    bootstrap_values,
    next_values,
    rollout,
    rollout_keeping,
    run_if,
)
from stoixlite.ppo.types import Transition
from stoixlite.run.build import build_run


def toy_apply(params, carry, obs, start):
    """A 'network' whose value is ``sum(w * carry * obs)``: deterministic per row."""
    del start
    value = jnp.sum(params * carry[None] * obs, axis=-1)  # [1, N]
    return carry, (None, value)


def synthetic(ends: dict[tuple[int, int], str], t_len: int = 12, n: int = 4, seed: int = 0):
    """A trajectory whose ``value[t+1]`` is the toy value of ``(next_obs[t], carry after t)``
    inside episodes; ``ends[(t, env)]`` is "term" or "trunc" (episode ends after step t; the
    value at t+1 is then that of an unrelated reset observation)."""
    rng = np.random.default_rng(seed)
    f = 3
    params = jnp.asarray(rng.normal(size=f), jnp.float32)
    carries = jnp.asarray(rng.normal(size=(t_len, n, f)), jnp.float32)  # after each step
    next_obs = jnp.asarray(rng.normal(size=(t_len, n, f)), jnp.float32)
    last = np.zeros((t_len, n), bool)
    discount = np.ones((t_len, n), np.float32)
    for (t, e), kind in ends.items():
        last[t, e] = True
        discount[t, e] = 0.0 if kind == "term" else 1.0
    true_next = np.asarray(toy_apply(params, carries, next_obs, None)[1][1][0])  # [T, N] per step
    value = rng.normal(size=(t_len, n)).astype(np.float32)
    value[1:] = np.where(last[:-1], value[1:], true_next[:-1])  # value[t+1] = V(next obs t)
    zeros = jnp.zeros((t_len, n))
    traj = Transition(
        obs=next_obs,  # not read
        start=jnp.asarray(np.concatenate([np.zeros((1, n), bool), last[:-1]])),
        action=zeros,
        log_prob=zeros,
        value=jnp.asarray(value),
        reward=jnp.asarray(rng.normal(size=(t_len, n)), jnp.float32),
        discount=jnp.asarray(discount),
        last=jnp.asarray(last),
        next_obs=next_obs,
        episode_return=zeros,
        episode_length=zeros,
        invalid_action=jnp.zeros((t_len, n), bool),
    )
    return params, traj, carries


def assert_same_where_used(traj: Transition, got: jax.Array, want: jax.Array, **tol) -> None:
    """Equal at every step whose next value GAE uses, and the same advantages."""
    used = ~np.asarray(traj.last & (traj.discount == 0))
    np.testing.assert_allclose(np.asarray(got)[used], np.asarray(want)[used], **tol)
    args = (traj.reward, traj.discount, traj.last, traj.value)
    adv_got, _ = gae_advantages(*args, got, 0.99, 0.95)
    adv_want, _ = gae_advantages(*args, want, 0.99, 0.95)
    np.testing.assert_allclose(np.asarray(adv_got), np.asarray(adv_want), **tol)


@pytest.mark.parametrize(
    "ends",
    [
        {},  # no episode ends: only the last step is called
        {(3, 0): "term", (7, 0): "term", (5, 2): "term"},  # terminations only
        {(3, 0): "trunc", (7, 1): "term", (2, 1): "trunc", (11, 3): "trunc"},  # <= 1 per env
        {(0, 2): "trunc", (9, 2): "trunc", (4, 1): "trunc"},  # two in env 2: one from the loop
        {(1, 0): "trunc", (5, 0): "trunc", (8, 0): "trunc", (11, 0): "trunc"},  # three, and last
    ],
)
def test_next_values_equal_the_full_bootstrap_where_gae_uses_them(ends):
    params, traj, carries = synthetic(ends)
    check_against_full_bootstrap(params, traj, carries)


@pytest.mark.parametrize("ends", [{}, {(0, 1): "trunc", (0, 2): "term"}])
def test_one_step_rollouts_next_values(ends):
    """``system.rollout_length=1``: there is no step before the last, every value is called."""
    params, traj, carries = synthetic(ends, t_len=1)
    check_against_full_bootstrap(params, traj, carries)


def kept_by_the_rollout(params, traj: Transition, carries: jax.Array) -> Bootstrap:
    """What ``rollout`` keeps for ``next_values`` (``Bootstrap``), built plainly from every
    step's next observation: each env's first truncation before the last step, the last step's
    next observation, and the toy value at the later truncations before the last step."""
    next_obs = np.asarray(traj.next_obs)
    t, n = np.asarray(traj.reward).shape
    truncated = np.asarray(traj.last & (traj.discount != 0))
    value = np.asarray(toy_apply(params, carries, next_obs, None)[1][1][0])  # [T, N]
    first_obs = np.zeros_like(next_obs[0])
    later_value = np.zeros((t, n), np.float32)
    for e in range(n):
        steps = [s for s in range(t - 1) if truncated[s, e]]
        if steps:
            first_obs[e] = next_obs[steps[0], e]
        for s in steps[1:]:
            later_value[s, e] = value[s, e]
    return Bootstrap(jnp.asarray(first_obs), jnp.asarray(next_obs[-1]), jnp.asarray(later_value))


def check_against_full_bootstrap(params, traj: Transition, carries: jax.Array) -> None:
    want = bootstrap_values(toy_apply, params, traj, carries)
    ends = kept_by_the_rollout(params, traj, carries)
    got = jax.jit(next_values, static_argnums=0)(toy_apply, params, traj, carries, ends)
    assert_same_where_used(traj, got, want, rtol=1e-6, atol=1e-6)
    truncated = np.asarray(traj.last & (traj.discount != 0))
    # a truncation's value is the final observation's, not the rollout's value[t+1]
    for t, e in zip(*np.nonzero(truncated[:-1]), strict=True):
        assert abs(float(got[t, e]) - float(traj.value[t + 1, e])) > 1e-3


ENV_OVERRIDES = [
    "arch.num_envs=3",
    "arch.num_eval_envs=2",
    "arch.num_evaluations=1",
    "system.num_minibatches=1",
    "network.hidden_size=8",
    "network.embed_size=8",
    "network.head_size=8",
]


@pytest.mark.parametrize(
    ("env", "length", "truncations"),
    [
        # one truncation per env, the sparse call alone: under `pytest -m slow` (a learner of
        # its own, 6 s of CPU); the two-truncation case makes the same sparse call first
        pytest.param("gymnax/Pendulum-v1", 256, 1, marks=pytest.mark.slow),
        ("gymnax/Pendulum-v1", 512, 2),  # two per env: the second evaluated in the loop
        ("gymnax/MemoryChain-bsuite", 32, 0),  # terminations only
    ],
)
def test_rollouts_next_values_equal_the_full_bootstrap(env, length, truncations):
    overrides = [f"env={env}", f"system.rollout_length={length}"]
    overrides.append(f"arch.total_timesteps={3 * length}")
    exp = build_run(run_plan(ENV_OVERRIDES + overrides + ["network=gru"]))
    keep = (0, length // 2)

    @jax.jit
    def collect(key):
        state = exp.init_state(key, exp.hyper)
        state, *_ = rollout(exp.network.apply, exp.env, state, 7)  # mid-episode carry
        s1, traj, after, ends = rollout(
            exp.network.apply, exp.env, state, length, record_next_obs=True
        )
        full = bootstrap_values(exp.network.apply, s1.params, traj, after)
        sparse = next_values(exp.network.apply, s1.params, traj, after, ends)
        *_, in_loop = rollout_keeping(exp.network.apply, exp.env, state, length, keep)
        return traj, full, sparse, in_loop

    traj, full, sparse, in_loop = collect(jax.random.PRNGKey(2))
    truncated = np.asarray(traj.last & (traj.discount != 0))
    assert truncated.sum(axis=0).max() == truncations
    if env.endswith("MemoryChain-bsuite"):
        assert np.asarray(traj.last).any()
    for got in (sparse, in_loop):
        assert_same_where_used(traj, got, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("network", ["gru", "mlp"])
def test_training_with_one_step_rollouts(network):
    """The learn chunk compiles and runs with ``system.rollout_length=1`` (next values of a
    one-step rollout; stateful and stateless data paths)."""
    overrides = ["system.rollout_length=1", "system.bptt_length=1", "arch.total_timesteps=12"]
    exp = build_run(run_plan(ENV_OVERRIDES + overrides + [f"network={network}"]))
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)
    state, metrics = jax.jit(exp.update)(state)
    assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values())


def test_run_if_runs_fn_only_when_some_element_needs_it():
    """``run_if`` is ``fn() if pred else default`` per element, also when ``vmap`` batches the
    predicate; ``fn`` runs (for the whole batch) only when some element's predicate holds,
    where a ``lax.cond`` batched by ``vmap`` would run it every time."""
    runs = []

    def one(pred, x):
        def fn():
            jax.debug.callback(lambda _: runs.append(1), x)  # under vmap: once per element
            return x * 2.0

        return run_if(pred, fn, jnp.full_like(x, -1.0))

    batched = jax.jit(jax.vmap(one))
    xs = jnp.arange(4.0)
    got = batched(jnp.asarray([True, False, True, False]), xs)
    jax.effects_barrier()
    np.testing.assert_array_equal(got, [0.0, -1.0, 4.0, -1.0])
    assert len(runs) == 4  # one run of fn
    np.testing.assert_array_equal(batched(jnp.zeros(4, bool), xs), [-1.0] * 4)
    jax.effects_barrier()
    assert len(runs) == 4  # no element needed it: fn did not run
    assert float(jax.jit(one)(jnp.bool_(True), jnp.float32(3.0))) == 6.0
    assert float(jax.jit(one)(jnp.bool_(False), jnp.float32(3.0))) == -1.0
