"""Generalised advantage estimation with terminated and truncated episodes kept apart.

Per step t (time-major arrays ``[T, ...]``):

* ``reward[t]``, ``discount[t]``: of the transition taken from observation t (discount 0 iff the
  episode terminated there);
* ``last[t]``: the transition ended the episode (terminated or truncated);
* ``value[t]``: V(observation t);
* ``next_value[t]``: V of the true next observation, i.e. of observation t+1 inside an episode and
  of ``extras["next_obs"]`` on a LAST step (used for truncation bootstrapping; multiplied by
  ``discount`` = 0 for a termination).

    delta[t] = reward[t] + gamma * discount[t] * next_value[t] - value[t]
    A[t]     = delta[t] + gamma * lambda * discount[t] * (1 - last[t]) * A[t+1]

The trace is cut at every LAST (also at a truncation, where discount is 1), and A[T] = 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae_advantages(
    reward: jax.Array,
    discount: jax.Array,
    last: jax.Array,
    value: jax.Array,
    next_value: jax.Array,
    gamma: float,
    gae_lambda: float,
    unroll: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """Return ``(advantages, returns)`` of shape ``[T, ...]``; ``returns = advantages + value``.

    ``unroll``: of the reverse ``lax.scan``. 1 is fastest on CPU: unrolled by 16, XLA fused each
    step's output with its predecessors' (a triangle of recomputed steps): 3x slower alone
    (T = 128, 4 and 64 envs), 11 % more instructions and ~1 s more compile in the mission's
    learn program, identical results (docs/benchmarks.md, 2026-11-25)."""
    delta = reward + gamma * discount * next_value - value
    trace = gamma * gae_lambda * discount * (1.0 - last.astype(reward.dtype))

    def step(
        next_adv: jax.Array, inputs: tuple[jax.Array, jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        d, c = inputs
        adv = d + c * next_adv
        return adv, adv

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(delta[0]), (delta, trace), reverse=True, unroll=unroll
    )
    return advantages, advantages + value
