"""Evaluation on separate (vmapped, auto-resetting) eval envs with greedy or sampled actions.

``make_evaluator`` returns a pure ``evaluate(params, hyper, key) -> {"return": [E], "length":
[E], "finished": [E]}`` that plays exactly one episode in each of E eval envs (computing with the
env params of ``hyper.env``, :class:`~stoixlite.ppo.types.Hyper`) (a ``lax.while_loop`` that
stops once every env has finished, or after ``max_steps``), resetting the memory at the episode
start. It acts like the rollout (:func:`~stoixlite.ppo.rollout.act`); the host applies ``jit``
(and ``vmap`` over seeds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from stoixlite.envs.types import Environment
from stoixlite.ppo.rollout import ApplyFn, act, step_envs
from stoixlite.ppo.types import Hyper


def make_evaluator(
    apply_fn: ApplyFn,
    init_carry: Callable[[int], Any],
    env: Environment,
    num_envs: int,
    greedy: bool,
    max_steps: int,
) -> Callable[[Any, Hyper, jax.Array], dict[str, jax.Array]]:
    """Build the evaluator; ``env`` must be the vmapped env stack for ``num_envs`` envs."""

    def evaluate(params: Any, hyper: Hyper, key: jax.Array) -> dict[str, jax.Array]:
        bound = env.with_params(hyper.env)
        key, reset_key = jax.random.split(key)
        env_state, timestep = bound.reset(reset_key)
        zeros = jnp.zeros((num_envs,), jnp.float32)
        init = (
            env_state,
            timestep,
            init_carry(num_envs),
            key,
            jnp.zeros((num_envs,), bool),
            zeros,
            zeros,
            jnp.asarray(0),
        )

        def cond(loop: tuple) -> jax.Array:
            done, step = loop[4], loop[7]
            return (~done.all()) & (step < max_steps)

        def body(loop: tuple) -> tuple:
            env_state, timestep, carry, key, done, ret, length, step = loop
            key, act_key = jax.random.split(key)
            carry, action, _, support = act(apply_fn, params, carry, timestep, act_key, greedy)
            env_state, timestep = step_envs(bound, env_state, action, support)
            finished = timestep.last() & ~done
            ret = jnp.where(finished, timestep.extras["episode_return"], ret)
            length = jnp.where(finished, timestep.extras["episode_length"], length)
            return env_state, timestep, carry, key, done | finished, ret, length, step + 1

        out = jax.lax.while_loop(cond, body, init)
        return {"return": out[5], "length": out[6], "finished": out[4]}

    return evaluate
