"""The rollout: ``lax.scan`` over ``rollout_length`` steps of (policy at T=1, vmapped env step),
and :func:`act`, the one policy step shared by the rollout, the evaluator and the reference player.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from stoixlite.envs.types import EPISODE_METRICS, MID, Environment, TimeStep
from stoixlite.ppo.types import LearnerState, Transition

ApplyFn = Callable[[Any, Any, jax.Array, jax.Array], tuple[Any, tuple[Any, jax.Array]]]


def start_flags(timestep: TimeStep) -> jax.Array:
    """Start flag of ``timestep.observation``: FIRST (initial reset) or LAST (auto-reset)."""
    return timestep.step_type != MID


def act(
    apply_fn: ApplyFn,
    params: Any,
    carry: Any,
    timestep: TimeStep,
    key: jax.Array,
    greedy: bool = False,
) -> tuple[Any, jax.Array, dict[str, jax.Array]]:
    """One policy step for a batch of envs: ``(carry, action [N], extras)``.

    Consumes ``timestep.observation [N, *obs_shape]`` (the memory resets where it starts an
    episode) and picks the distribution's mode (``greedy``, static) or a sample drawn with
    ``key``. ``extras`` holds the action's ``log_prob [N]`` and the critic's ``value [N]``. The
    rollout, the evaluator and the reference player all act through this function.
    """
    start = start_flags(timestep)
    carry, (dist, value) = apply_fn(params, carry, timestep.observation[None], start[None])
    action = dist.mode()[0] if greedy else dist.sample(key)[0]
    log_prob = dist.log_prob(action[None])[0]
    return carry, action, {"log_prob": log_prob, "value": value[0]}


def _policy_step(apply_fn: ApplyFn, env: Environment) -> Callable:
    """``step((params, env_state, timestep, mem, key)) -> (next loop carry, transition)``: act
    on the current observation, step the envs, record the transition."""

    def step(carry: tuple) -> tuple[tuple, Transition]:
        params, env_state, timestep, mem, key = carry
        key, act_key = jax.random.split(key)
        mem, action, extras = act(apply_fn, params, mem, timestep, act_key)
        env_state, next_ts = env.step(env_state, action)
        transition = Transition(
            obs=timestep.observation,
            start=start_flags(timestep),
            action=action,
            log_prob=extras["log_prob"],
            value=extras["value"],
            reward=next_ts.reward,
            discount=next_ts.discount,
            last=next_ts.last(),
            next_obs=next_ts.extras["next_obs"],
            episode_return=next_ts.extras["episode_return"],
            episode_length=next_ts.extras["episode_length"],
            invalid_action=next_ts.extras.get("invalid_action", jnp.zeros_like(next_ts.last())),
            episode_metrics=next_ts.extras.get(EPISODE_METRICS, {}),
        )
        return (params, env_state, next_ts, mem, key), transition

    return step


def rollout(
    apply_fn: ApplyFn, env: Environment, state: LearnerState, length: int, unroll: int = 1
) -> tuple[LearnerState, Transition, Any]:
    """Run ``length`` steps of all (vmapped) envs.

    Returns the advanced state, the ``[T, N]`` trajectory and the memory carries *after* each step
    ``[T, N, ...]`` (carry after consuming obs t; the carry before step t is the one after t-1,
    and ``state.carry`` before step 0).
    """
    policy_step = _policy_step(apply_fn, env)

    def step(carry: tuple, _: None) -> tuple[tuple, tuple[Transition, Any]]:
        carry, transition = policy_step(carry)
        return carry, (transition, carry[3])

    init = (state.params, state.env_state, state.timestep, state.carry, state.key)
    (_, env_state, timestep, mem, key), (traj, carries_after) = jax.lax.scan(
        step, init, None, length=length, unroll=unroll
    )
    state = state.replace(env_state=env_state, timestep=timestep, carry=mem, key=key)
    return state, traj, carries_after


def truncated(transition: Transition) -> jax.Array:
    """Where an episode ended by truncation (LAST with ``discount != 0``), any leading shape."""
    return transition.last & (transition.discount != 0)


def needs_bootstrap(traj: Transition) -> jax.Array:
    """``[T, N]`` bool: the steps whose next value the rollout did not compute.

    GAE needs V(true next observation) at every step (:mod:`stoixlite.ppo.gae`). Inside an
    episode that is the rollout's own ``value[t+1]`` (the same observation, consumed from the same
    carry without a reset); after a termination it is multiplied by ``discount = 0``. Only a
    *truncation* (LAST with ``discount != 0``: the true final observation, which the rollout never
    fed to the network) and the rollout's last step need one more network call.
    """
    return truncated(traj).at[-1].set(True)


def _shifted_values(traj: Transition, last_row: jax.Array) -> jax.Array:
    """``[T, N]``: the rollout's ``value[t+1]``, and ``last_row`` for the rollout's last step."""
    return jnp.concatenate([traj.value[1:], last_row[None]], axis=0)


def rollout_keeping(
    apply_fn: ApplyFn,
    env: Environment,
    state: LearnerState,
    length: int,
    keep: tuple[int, ...],
    unroll: int = 1,
) -> tuple[LearnerState, Transition, Any, jax.Array]:
    """:func:`rollout` that keeps only the carries *before* the steps ``keep`` (static indices)
    and computes the bootstrap values in the loop, so no per-step carry is stored.

    For a memory whose carry is large (an attention cache: ``2 M H`` floats per layer and env)
    the ``[T, N, ...]`` carries of :func:`rollout` dominate the update's memory and time. Here
    the carry before step 0 is the state's own, and on the other steps of ``keep`` the loop
    writes the carry into a ``[K, N, ...]`` buffer (``K`` such steps; a ``lax.cond``: on the
    other steps nothing is copied, and with ``keep == (0,)``, whole-rollout sequences, there is
    no buffer at all). On the steps where some env needs it
    (:func:`needs_bootstrap`: a truncation, or the last step), evaluates V(true next observation)
    from the carry after step t with one more T=1 call (a ``lax.cond``: skipped on the other
    steps); everywhere else the next value is the rollout's ``value[t+1]``. Equal to
    :func:`bootstrap_values` up to float rounding.

    Returns ``(state, traj, kept, next_value)``: ``kept`` leaves ``[len(keep), N, ...]`` in the
    order of ``keep``; ``next_value [T, N]``.
    """
    later = [t for t in keep if t > 0]  # kept from inside the loop; step 0's is state.carry
    slots = [len(later)] * length  # the buffer slot of each step (len(later): none)
    for i, t in enumerate(later):
        slots[t] = i
    policy_step = _policy_step(apply_fn, env)
    final = jnp.arange(length) == length - 1

    def write(buffer: Any, slot: jax.Array, carry: Any) -> Any:
        return jax.tree.map(
            lambda b, c: jax.lax.dynamic_update_index_in_dim(b, c, slot, 0), buffer, carry
        )

    def step(carry: tuple, xs: tuple[jax.Array, jax.Array]) -> tuple[tuple, tuple]:
        (loop, buffer), (slot, is_final) = carry, xs
        if later:
            buffer = jax.lax.cond(
                slot < len(later), lambda b: write(b, slot, loop[3]), lambda b: b, buffer
            )
        loop, transition = policy_step(loop)
        no_start = jnp.zeros((1, transition.reward.shape[0]), dtype=bool)

        def value_of_next() -> jax.Array:
            _, (_, value) = apply_fn(loop[0], loop[3], transition.next_obs[None], no_start)
            return value[0]

        needed = is_final | jnp.any(truncated(transition))
        value = jax.lax.cond(needed, value_of_next, lambda: jnp.zeros_like(transition.value))
        return (loop, buffer), (transition, value)

    buffer = jax.tree.map(lambda c: jnp.zeros((len(later),) + c.shape, c.dtype), state.carry)
    init = ((state.params, state.env_state, state.timestep, state.carry, state.key), buffer)
    xs = (jnp.asarray(slots, jnp.int32), final)
    ((_, env_state, timestep, mem, key), buffer), (traj, called) = jax.lax.scan(
        step, init, xs, unroll=unroll
    )
    kept = jax.tree.map(
        lambda c0, b: jnp.stack([c0 if t == 0 else b[later.index(t)] for t in keep]),
        state.carry,
        buffer,
    )
    state = state.replace(env_state=env_state, timestep=timestep, carry=mem, key=key)
    next_value = jnp.where(needs_bootstrap(traj), called, _shifted_values(traj, called[-1]))
    return state, traj, kept, next_value


def next_values(apply_fn: ApplyFn, params: Any, traj: Transition, carries_after: Any) -> jax.Array:
    """V(true next observation) ``[T, N]``, calling the network only where it is needed.

    The rollout's ``value[t+1]`` everywhere but at :func:`needs_bootstrap`'s steps; those are
    evaluated in one T=1 call over ``2 N`` rows: every env's last step and its truncation inside
    the rollout, if any. When some env truncated more than once in the rollout (time limits
    shorter than half the rollout) the whole :func:`bootstrap_values` runs instead (a
    ``lax.cond``), so the result is always the same, up to float rounding, as
    :func:`bootstrap_values`, which evaluates all ``T x N`` steps (the rollout computed all
    but ``N`` of them already).

    The row choice is per env along time (``take_along_axis``), so when the env axis is split
    over devices each device evaluates its own envs' rows.
    """
    t, n = traj.reward.shape
    inner = truncated(traj)[:-1]  # truncations before the last step ([0, N] when T == 1)
    count = jnp.sum(inner, axis=0)
    first = jnp.argmax(inner, axis=0) if t > 1 else jnp.zeros((n,), jnp.int32)
    rows = jnp.stack([first, jnp.full((n,), t - 1)], axis=1)  # [N, 2]

    def pick(x: jax.Array) -> jax.Array:  # [T, N, ...] -> [N * 2, ...], env-major
        index = rows.T.reshape((2, n) + (1,) * (x.ndim - 2))
        picked = jnp.take_along_axis(x, index, axis=0)  # [2, N, ...]
        return jnp.swapaxes(picked, 0, 1).reshape((2 * n,) + x.shape[2:])

    def sparse() -> jax.Array:
        carry = jax.tree.map(pick, carries_after)
        obs = pick(traj.next_obs)[None]
        _, (_, value) = apply_fn(params, carry, obs, jnp.zeros((1, 2 * n), dtype=bool))
        truncation_value, last_value = value[0].reshape(n, 2).T
        at_truncation = (jnp.arange(t)[:, None] == rows[:, 0]) & (count > 0)
        return jnp.where(at_truncation, truncation_value, _shifted_values(traj, last_value))

    def dense() -> jax.Array:
        return bootstrap_values(apply_fn, params, traj, carries_after)

    return jax.lax.cond(jnp.any(count > 1), dense, sparse)


def bootstrap_values(
    apply_fn: ApplyFn, params: Any, traj: Transition, carries_after: Any
) -> jax.Array:
    """V(true next observation) for every step ``[T, N]`` in one batched T=1 call.

    For step t the next observation is ``traj.next_obs[t]`` (the true final observation on LAST
    steps) consumed from the carry after step t without a reset. Inside an episode this equals the
    rollout's ``value[t+1]``; on a truncation it is the value needed to bootstrap.

    The ``T x N`` inputs are flattened env-major (``[N, T] -> [N T]``), so when the env axis is
    split over devices each device evaluates its own envs' steps without moving data.
    """
    t, n = traj.reward.shape
    flat = lambda x: jnp.swapaxes(x, 0, 1).reshape((n * t,) + x.shape[2:])
    carry = jax.tree.map(flat, carries_after)
    obs = flat(traj.next_obs)[None]
    start = jnp.zeros((1, n * t), dtype=bool)
    _, (_, value) = apply_fn(params, carry, obs, start)
    return value[0].reshape(n, t).T
