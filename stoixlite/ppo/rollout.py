"""The rollout: ``lax.scan`` over ``rollout_length`` steps of (policy at T=1, vmapped env step),
and :func:`act`, the one policy step shared by the rollout, the evaluator and the reference player.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from stoixlite.envs.types import (
    EPISODE_METRICS,
    MID,
    Discrete,
    Environment,
    TimeStep,
    actions_in_range,
    actions_reach_unchanged,
)
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
) -> tuple[Any, jax.Array, dict[str, jax.Array], int | None]:
    """One policy step for a batch of envs: ``(carry, action [N], extras, support)``.

    Consumes ``timestep.observation [N, *obs_shape]`` (the memory resets where it starts an
    episode) and picks the distribution's mode (``greedy``, static) or a sample drawn with
    ``key``. ``extras`` holds the action's ``log_prob [N]`` and the critic's ``value [N]``.
    ``support`` (static) is the distribution's ``support_size`` (its actions are integers in
    ``0..support-1`` by construction), ``None`` when it declares none (:func:`step_envs`). The
    rollout, the evaluator and the reference player all act through this function.
    """
    start = start_flags(timestep)
    carry, (dist, value) = apply_fn(params, carry, timestep.observation[None], start[None])
    action = dist.mode()[0] if greedy else dist.sample(key)[0]
    log_prob = dist.log_prob(action[None])[0]
    support = getattr(dist, "support_size", None)
    return carry, action, {"log_prob": log_prob, "value": value[0]}, support


def step_envs(
    env: Environment, env_state: Any, action: jax.Array, support: int | None
) -> tuple[Any, TimeStep]:
    """``env.step(env_state, action)`` for actions from :func:`act`: when the policy's support is
    exactly the env's ``Discrete`` action space, the step runs under
    :func:`~stoixlite.envs.types.actions_in_range` (every action valid by construction), so the
    envs skip what only an invalid action needs (the gymnax-style adapters' sweep over the
    candidate actions, :func:`stoixlite.envs.actions.worst_valid_step`). Any other policy's
    actions (a test's fixed actions, a Gaussian's NaN), and any stack with a wrapper that may change
    actions (:func:`~stoixlite.envs.types.actions_reach_unchanged`), keep the full invalid-move
    handling."""
    space = env.action_space
    in_range = isinstance(space, Discrete) and support == space.n and actions_reach_unchanged(env)
    with actions_in_range(in_range):
        return env.step(env_state, action)


def make_policy_step(
    apply_fn: ApplyFn, env: Environment, record_next_obs: bool = False
) -> Callable:
    """``step((params, env_state, timestep, mem, key)) -> (next loop carry, transition,
    next_obs)``: act on the current observation, step the envs, record the transition.

    ``next_obs [N, *obs_shape]`` is the true next observation (the final one on LAST steps); the
    transition holds it too only with ``record_next_obs`` (static): a rollout that stacks it
    holds every frame twice."""

    def step(carry: tuple) -> tuple[tuple, Transition, jax.Array]:
        params, env_state, timestep, mem, key = carry
        key, act_key = jax.random.split(key)
        mem, action, extras, support = act(apply_fn, params, mem, timestep, act_key)
        env_state, next_ts = step_envs(env, env_state, action, support)
        next_obs = next_ts.extras["next_obs"]
        transition = Transition(
            obs=timestep.observation,
            start=start_flags(timestep),
            action=action,
            log_prob=extras["log_prob"],
            value=extras["value"],
            reward=next_ts.reward,
            discount=next_ts.discount,
            last=next_ts.last(),
            episode_return=next_ts.extras["episode_return"],
            episode_length=next_ts.extras["episode_length"],
            invalid_action=next_ts.extras.get("invalid_action", jnp.zeros_like(next_ts.last())),
            episode_metrics=next_ts.extras.get(EPISODE_METRICS, {}),
            next_obs=next_obs if record_next_obs else None,
        )
        return (params, env_state, next_ts, mem, key), transition, next_obs

    return step


def run_if(pred: jax.Array, fn: Callable[[], Any], default: Any) -> Any:
    """``fn()`` if ``pred`` (a scalar bool) else ``default`` (a pytree shaped like ``fn()``),
    calling ``fn`` only when ``pred`` holds, also under ``vmap``.

    A ``lax.cond`` whose predicate ``vmap`` batches (several seeds) becomes a select that runs
    ``fn`` every time; this is a ``lax.while_loop`` of at most one iteration, which ``vmap``
    runs when ``pred`` holds for any element of the batch (and keeps ``default`` for the
    others). Without ``vmap`` it is a ``lax.cond``."""
    body = lambda c: (jnp.zeros_like(c[0]), fn())
    _, out = jax.lax.while_loop(lambda c: c[0], body, (pred, default))
    return out


def value_after_step(apply_fn: ApplyFn, loop: tuple, next_obs: jax.Array) -> jax.Array:
    """V(``next_obs [N, ...]``) ``[N]`` from the carry after the loop's step (``loop[3]``),
    without a reset: the one T=1 call of the loops' bootstrap values."""
    no_start = jnp.zeros((1, next_obs.shape[0]), dtype=bool)
    _, (_, value) = apply_fn(loop[0], loop[3], next_obs[None], no_start)
    return value[0]


class Bootstrap(NamedTuple):
    """What :func:`rollout` keeps for :func:`next_values` in place of every step's next
    observation (``[T, N, *obs_shape]``: for frames, as many bytes as the rollout's own).

    ``first_obs [N, *obs_shape]``: the true final observation of each env's first truncation
    before the rollout's last step (zeros where there is none); ``final_obs [N, *obs_shape]``:
    the true next observation of the last step; ``later_value [T, N]``: V(true final observation)
    at each env's second and later truncations before the last step, evaluated in the loop from
    the carry after the step (0 elsewhere; time limits shorter than half the rollout).
    """

    first_obs: jax.Array
    final_obs: jax.Array
    later_value: jax.Array


def rollout(
    apply_fn: ApplyFn,
    env: Environment,
    state: LearnerState,
    length: int,
    unroll: int = 1,
    record_next_obs: bool = False,
) -> tuple[LearnerState, Transition, Any, Bootstrap]:
    """Run ``length`` steps of all (vmapped) envs.

    Returns the advanced state, the ``[T, N]`` trajectory, the memory carries *after* each step
    ``[T, N, ...]`` (carry after consuming obs t; the carry before step t is the one after t-1,
    and ``state.carry`` before step 0) and the :class:`Bootstrap` inputs of :func:`next_values`.
    The trajectory's ``next_obs`` is ``None`` unless ``record_next_obs`` (static; for
    :func:`bootstrap_values`, which reads every step's), so that the rollout holds each frame
    once.
    """
    policy_step = make_policy_step(apply_fn, env, record_next_obs)
    final = jnp.arange(length) == length - 1

    def step(carry: tuple, is_final: jax.Array) -> tuple[tuple, tuple[Transition, Any, jax.Array]]:
        loop, seen, first_obs = carry
        loop, transition, next_obs = policy_step(loop)
        ends = truncated(transition) & ~is_final  # the last step is next_values' own row
        first_now = (ends & ~seen).reshape(ends.shape + (1,) * (next_obs.ndim - 1))
        first_obs = jnp.where(first_now, next_obs, first_obs)
        later = ends & seen
        value = run_if(
            jnp.any(later),
            lambda: value_after_step(apply_fn, loop, next_obs),
            jnp.zeros_like(transition.value),
        )
        value = jnp.where(later, value, 0.0)
        return (loop, seen | ends, first_obs), (transition, loop[3], value)

    obs = state.timestep.observation
    n = obs.shape[0]
    init = (
        (state.params, state.env_state, state.timestep, state.carry, state.key),
        jnp.zeros((n,), bool),
        jnp.zeros_like(obs),
    )
    ((_, env_state, timestep, mem, key), _, first_obs), (traj, carries_after, later_value) = (
        jax.lax.scan(step, init, final, unroll=unroll)
    )
    state = state.replace(env_state=env_state, timestep=timestep, carry=mem, key=key)
    ends = Bootstrap(first_obs, timestep.extras["next_obs"], later_value)
    return state, traj, carries_after, ends


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


def shifted_values(traj: Transition, last_row: jax.Array) -> jax.Array:
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
    from the carry after step t with one more T=1 call (skipped on the other
    steps; :func:`run_if`); everywhere else the next value is the rollout's ``value[t+1]``.
    Equal to :func:`bootstrap_values` up to float rounding.

    Returns ``(state, traj, kept, next_value)``: ``kept`` leaves ``[len(keep), N, ...]`` in the
    order of ``keep``; ``next_value [T, N]``.
    """
    later = [t for t in keep if t > 0]  # kept from inside the loop; step 0's is state.carry
    slots = [len(later)] * length  # the buffer slot of each step (len(later): none)
    for i, t in enumerate(later):
        slots[t] = i
    policy_step = make_policy_step(apply_fn, env)
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
        loop, transition, next_obs = policy_step(loop)
        needed = is_final | jnp.any(truncated(transition))
        value = run_if(
            needed,
            lambda: value_after_step(apply_fn, loop, next_obs),
            jnp.zeros_like(transition.value),
        )
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
    next_value = jnp.where(needs_bootstrap(traj), called, shifted_values(traj, called[-1]))
    return state, traj, kept, next_value


def next_values(
    apply_fn: ApplyFn, params: Any, traj: Transition, carries_after: Any, ends: Bootstrap
) -> jax.Array:
    """V(true next observation) ``[T, N]``, calling the network only where it is needed.

    The rollout's ``value[t+1]`` everywhere but at :func:`needs_bootstrap`'s steps; those are
    evaluated in one T=1 call over ``2 N`` rows: every env's last step and its first truncation
    inside the rollout, if any (``ends.final_obs``, ``ends.first_obs``, from the carries after
    those steps). An env's later truncations (time limits shorter than half the rollout) take
    the values the rollout evaluated in its loop (``ends.later_value``). The result equals
    :func:`bootstrap_values`, which evaluates all ``T x N`` steps, up to float rounding.

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

    carry = jax.tree.map(pick, carries_after)
    obs = jnp.stack([ends.first_obs, ends.final_obs], axis=1)  # [N, 2, ...], env-major
    obs = obs.reshape((1, 2 * n) + obs.shape[2:])
    _, (_, value) = apply_fn(params, carry, obs, jnp.zeros((1, 2 * n), dtype=bool))
    truncation_value, last_value = value[0].reshape(n, 2).T
    at_first = (jnp.arange(t)[:, None] == rows[:, 0]) & (count > 0)
    later = truncated(traj).at[-1].set(False) & ~at_first
    inside = jnp.where(later, ends.later_value, shifted_values(traj, last_value))
    return jnp.where(at_first, truncation_value, inside)


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
    if traj.next_obs is None:
        raise ValueError(
            "bootstrap_values reads every step's next_obs: rollout(..., record_next_obs=True)"
        )
    t, n = traj.reward.shape
    flat = lambda x: jnp.swapaxes(x, 0, 1).reshape((n * t,) + x.shape[2:])
    carry = jax.tree.map(flat, carries_after)
    obs = flat(traj.next_obs)[None]
    start = jnp.zeros((1, n * t), dtype=bool)
    _, (_, value) = apply_fn(params, carry, obs, start)
    return value[0].reshape(n, t).T
