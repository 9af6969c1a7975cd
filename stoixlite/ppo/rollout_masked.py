"""The rollout without data-dependent control flow (``arch.branching=mask``, accelerators).

:func:`~stoixlite.ppo.rollout.rollout` and :func:`~stoixlite.ppo.rollout.rollout_keeping` skip
rare work with data-dependent branches (a ``lax.while_loop`` or ``lax.cond`` per step: the
bootstrap value of a truncation, the write of a kept carry). A CPU gains from skipping; an
accelerator waits on the host for each branch's predicate, in each step of each update.
:func:`rollout_masked` collects the same trajectory (bit for bit: same steps, same keys) with
computation that every step does alike:

* **Bootstrap values** V(true next observation) at the steps :func:`needs_bootstrap` names
  (truncations and the last step). With the carry after every step kept and vector
  observations, the rollout keeps every step's next observation (a vector: small beside the
  carries) and evaluates them after the loop in one T=1 call over all ``T x N`` rows
  (:func:`~stoixlite.ppo.rollout.bootstrap_values`), one large batch instead of a call per step.
  Otherwise (frames, whose second copy the rollout does not keep, or kept carries only) each
  step evaluates V(next observation) from the carry after it for every env, one more T=1 call.
* **Kept carries** (``keep``): the loop is a scan over periods of a scan per segment between
  kept steps (:func:`segments`), and the carry at each segment's start is an output of the
  period's scan: nothing is written on the other steps and nothing is branched on.

Everywhere else the next value is the rollout's ``value[t+1]``, as in the other rollouts. The
bootstrap values equal theirs up to float rounding (other batch shapes of the same network
call; ``tests/test_branching.py``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from stoixlite.envs.types import Environment
from stoixlite.ppo.rollout import (
    ApplyFn,
    bootstrap_values,
    make_policy_step,
    needs_bootstrap,
    shifted_values,
    value_after_step,
)
from stoixlite.ppo.types import LearnerState, Transition


def records_next_obs(observation: jax.Array) -> bool:
    """Whether :func:`rollout_masked` keeps every step's next observation (``observation``:
    ``[N, *obs_shape]``) to evaluate the bootstrap values after the loop: vectors, yes; frames,
    no (a second copy of the rollout's frames)."""
    return observation.ndim <= 2


def segments(length: int, keep: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """``(period P, offsets O)`` of a rollout of ``length`` steps that keeps the carries before
    the steps ``keep`` (static, with 0): ``P`` divides ``length``, every kept step is ``p P + o``
    with ``o`` in ``O``; a scan over the ``length / P`` periods runs one scan per offset's
    segment and outputs the carry at each segment's start (``length / P x |O|`` carries, a few
    more than ``keep`` where the last period has a kept offset that the rollout does not need).

    Of the periods that keep at most twice as many carries as needed, the one with the fewest
    offsets (the fewest copies of the step in the program), then the fewest carries: chunk
    starts every ``L`` steps give ``(L, (0,))``, with a burn-in of ``B`` ``(L, (0, L - B))``;
    ``keep == (0,)`` gives ``(length, (0,))``."""
    best: tuple[tuple[int, int], int, tuple[int, ...]] | None = None
    for period in (p for p in range(1, length + 1) if length % p == 0):
        offsets = tuple(sorted({t % period for t in keep} | {0}))
        slots = length // period * len(offsets)
        if slots > 2 * len(keep) and period != length:
            continue
        score = (len(offsets), slots)
        if best is None or score < best[0]:
            best = (score, period, offsets)
    assert best is not None  # the whole rollout is always a period
    return best[1], best[2]


def rollout_masked(
    apply_fn: ApplyFn,
    env: Environment,
    state: LearnerState,
    length: int,
    keep: tuple[int, ...] | None = None,
    unroll: int = 1,
) -> tuple[LearnerState, Transition, Any, jax.Array]:
    """``length`` steps of all (vmapped) envs, without data-dependent control flow.

    Returns ``(state, traj, carries, next_value)``: the advanced state, the ``[T, N]``
    trajectory (``next_obs`` not kept), ``carries`` and V(true next observation) ``[T, N]``.
    With ``keep=None`` ``carries`` holds the carry after every step (leaves ``[T, N, ...]``, as
    :func:`~stoixlite.ppo.rollout.rollout`); with ``keep`` (static step indices, 0 among them)
    the carries before those steps in that order (leaves ``[len(keep), N, ...]``, as
    :func:`~stoixlite.ppo.rollout.rollout_keeping`).
    """
    after = keep is None and records_next_obs(state.timestep.observation)
    policy_step = make_policy_step(apply_fn, env, record_next_obs=after)

    def step(loop: tuple, _: None) -> tuple[tuple, tuple]:
        loop, transition, next_obs = policy_step(loop)
        value = None if after else value_after_step(apply_fn, loop, next_obs)
        return loop, (transition, loop[3] if keep is None else None, value)

    init = (state.params, state.env_state, state.timestep, state.carry, state.key)
    if keep is None:
        loop, (traj, carries, called) = jax.lax.scan(step, init, None, length, unroll=unroll)
    else:
        loop, (traj, kept, called) = _scan_segments(step, init, length, keep, unroll)
        period, offsets = segments(length, keep)
        carries = jax.tree.map(
            lambda *by_offset: jnp.stack(
                [by_offset[offsets.index(t % period)][t // period] for t in keep]
            ),
            *kept,
        )
    _, env_state, timestep, mem, key = loop
    state = state.replace(env_state=env_state, timestep=timestep, carry=mem, key=key)
    if after:
        called = bootstrap_values(apply_fn, state.params, traj, carries)
        traj = traj.replace(next_obs=None)
    next_value = jnp.where(needs_bootstrap(traj), called, shifted_values(traj, called[-1]))
    return state, traj, carries, next_value


def _scan_segments(
    step: Any, init: tuple, length: int, keep: tuple[int, ...], unroll: int
) -> tuple[tuple, tuple]:
    """The rollout's loop as a scan over :func:`segments`' periods of one scan per segment:
    ``(loop, (traj, kept, called))``, ``kept`` a tuple over the offsets of carries
    ``[length / P, N, ...]`` (the carry before step ``p P + o``), the step outputs ``[T, ...]``."""
    period, offsets = segments(length, keep)
    bounds = (*offsets, period)

    def one_period(loop: tuple, _: None) -> tuple[tuple, tuple]:
        kept, outs = [], []
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            kept.append(loop[3])
            loop, out = jax.lax.scan(
                step, loop, None, stop - start, unroll=min(unroll, stop - start)
            )
            outs.append(out)
        out = (
            jax.tree.map(lambda *parts: jnp.concatenate(parts), *outs) if len(outs) > 1 else outs[0]
        )
        return loop, (tuple(kept), out)

    loop, (kept, out) = jax.lax.scan(one_period, init, None, length // period)
    out = jax.tree.map(lambda x: x.reshape((length,) + x.shape[2:]), out)
    return loop, (out[0], kept, out[2])
