"""Action validity: which actions an env accepts, and the checked mode that refuses the others.

The policy (``docs/envs.md``, "Invalid actions"):

* ``Discrete(n)``: an action is valid when it is an integer in ``0..n-1``. Anything else
  (negative, ``n``, huge) is an *invalid move*: each env defines it so that it changes nothing but
  the passage of time, pays no more than the worst valid action would at that step and never
  counts as a success (the per-env table is in ``docs/envs.md``).
* ``Box(low, high)``: finite or infinite values outside the bounds are clipped to them, as
  gymnasium, popgym and gymnax do; an action with a NaN component is an invalid move.
* The standard wrapper stack reports every invalid move in ``extras["invalid_action"]`` (bool,
  see :class:`stoixlite.envs.wrappers.InvalidActionFlagWrapper`); with ``check_actions`` it
  raises :class:`InvalidActionError` naming the env, the action and the allowed range
  (:class:`stoixlite.envs.wrappers.ActionCheckWrapper`).

All functions work on unbatched and batched actions alike: the trailing ``space.shape`` axes are
the action, any leading axes are batch axes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs.batching import batch_aware
from stoixlite.envs.types import Box, Discrete, Space, TimeStep, actions_in_range_known


class InvalidActionError(ValueError):
    """An out-of-range action met an env in checked mode (``env.check_actions=true``)."""


def _action_axes(space: Space, action: jax.Array) -> tuple[int, ...]:
    ndim = len(space.shape)
    return tuple(range(action.ndim - ndim, action.ndim))


def is_valid_action(space: Space, action: jax.Array) -> jax.Array:
    """bool ``[*batch]``: ``action`` (``[*batch, *space.shape]``) is a valid action of ``space``.

    Discrete: an integer in ``0..n-1`` (a float is valid only when it is such an integer). Box: no
    NaN component (out-of-bounds values are valid and clipped by the env).
    """
    action = jnp.asarray(action)
    if isinstance(space, Discrete):
        valid = (action >= 0) & (action < space.n)
        if not jnp.issubdtype(action.dtype, jnp.integer):
            valid &= action == jnp.floor(action)
        return jnp.all(valid, axis=_action_axes(space, action))
    return ~jnp.any(jnp.isnan(action), axis=_action_axes(space, action))


def clip_action(space: Box, action: jax.Array) -> jax.Array:
    """A Box action clipped to the space's bounds (float32; NaN components become 0)."""
    action = jnp.nan_to_num(
        jnp.asarray(action, jnp.float32), nan=0.0, posinf=np.inf, neginf=-np.inf
    )
    low = jnp.asarray(space.low, jnp.float32)
    high = jnp.asarray(space.high, jnp.float32)
    return jnp.clip(action, low, high)


def allowed_actions(space: Space) -> str:
    """The allowed range in words, e.g. ``integers 0..15`` or ``floats in [-2.0, 2.0] ...``."""
    if isinstance(space, Discrete):
        return f"integers 0..{space.n - 1}"
    return (
        f"float arrays of shape {tuple(space.shape)} without NaN (values outside "
        f"[{space.low}, {space.high}] are clipped)"
    )


def invalid_action_message(env_name: str, space: Space, action: Any, valid: Any) -> str:
    """One line naming the env, the first invalid action and the allowed range."""
    action = np.asarray(action)
    valid = np.asarray(valid, bool)
    bad_index = np.argwhere(~valid)[0] if valid.ndim else ()
    bad = action[tuple(bad_index)]
    where = f" (env index {tuple(int(i) for i in bad_index)})" if valid.ndim else ""
    count = int((~valid).sum())
    more = f"; {count} invalid in this step" if count > 1 else ""
    value = bad.tolist()
    return (
        f"env {env_name}: invalid action {value}{where}{more}; "
        f"allowed: {allowed_actions(space)} ({space!r})"
    )


def raise_on_invalid(env_name: str, space: Space) -> Callable[[Any, Any], None]:
    """A host callback ``(action, valid) -> None`` raising :class:`InvalidActionError`."""

    def check(action: Any, valid: Any) -> None:
        if not np.all(valid):
            raise InvalidActionError(invalid_action_message(env_name, space, action, valid))

    return check


_ERROR_LINE = re.compile(rf"{InvalidActionError.__name__}: (.*)")


def find_invalid_action_error(exc: BaseException) -> str | None:
    """The :class:`InvalidActionError` message inside ``exc`` (a ``JaxRuntimeError`` raised by the
    checked mode's callback from compiled code), or ``None`` when ``exc`` is something else."""
    if isinstance(exc, InvalidActionError):
        return str(exc)
    match = _ERROR_LINE.search(str(exc))
    return match.group(1).strip() if match else None


def _safe_action(space: Space, action: jax.Array, valid: jax.Array) -> jax.Array:
    """``action`` where valid, else any valid stand-in (a Box action clipped to the bounds)."""
    if isinstance(space, Discrete):
        return jnp.where(valid, action, 0).astype(jnp.int32)
    return clip_action(space, action)


def _worst_candidate(
    step: Callable[[Any, jax.Array], tuple[Any, TimeStep]], space: Space, state: Any
) -> tuple[Any, TimeStep]:
    """Of the candidate actions (every action of a ``Discrete`` space, the all-``low`` and
    all-``high`` corners of a ``Box``) stepped from the unbatched ``state``, the outcome with the
    lowest reward (the first on ties)."""
    if isinstance(space, Discrete):
        candidates = jnp.arange(space.n, dtype=jnp.int32)
    else:
        corner = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), space.shape)  # noqa: E731
        candidates = jnp.stack([corner(space.low), corner(space.high)])
    states, timesteps = jax.vmap(step, in_axes=(None, 0))(state, candidates)
    index = jnp.argmin(timesteps.reward)
    return jax.tree.map(lambda x: x[index], (states, timesteps))


def worst_valid_step(
    step: Callable[[Any, jax.Array], tuple[Any, TimeStep]],
    space: Space,
    state: Any,
    action: jax.Array,
) -> tuple[Any, TimeStep]:
    """``step(state, action)``; an invalid action is replaced by the worst valid candidate.

    The candidates are every action of a ``Discrete`` space, or the all-``low`` and all-``high``
    corners of a ``Box``; each is stepped from ``state`` and the one with the lowest reward (the
    first on ties) stands in for the invalid action. Used where the env's internals are not ours
    (the gymnax-style adapters): the invalid move then pays exactly the worst valid reward. Box
    actions are clipped to the bounds first. ``state`` and ``action`` are one env's (unbatched).

    Cost. Unbatched, a ``lax.cond`` runs one step, or one per candidate for an invalid action.
    Under ``vmap`` (:func:`stoixlite.envs.batching.batch_aware`, nested ``vmap`` included) the
    batch takes one step per env when every action is valid, and the candidates are stepped only
    on steps where some action of the batch is invalid (a ``lax.cond`` on the whole batch), so a
    policy that samples from the action space pays one step per step, not ``n + 1``. Under
    :func:`~stoixlite.envs.batching.masked_batches` (``arch.branching=mask``) every env steps
    every candidate (a ``Box``: the corners and its clipped action) and keeps its action's
    outcome, or the worst: no data-dependent branch, ``n`` steps per env and step (3 for a
    ``Box``). Results are the same in every case (up to float rounding: XLA may vectorise a
    batched step differently).

    Under :func:`~stoixlite.envs.types.actions_in_range` a ``Discrete`` action is stepped alone,
    with no sweep and no branch: the caller guarantees that it is valid (the rollout and the
    evaluator, whose categorical policy covers exactly the space's actions).
    """
    if isinstance(space, Discrete) and actions_in_range_known():
        return step(state, jnp.asarray(action).astype(jnp.int32))

    def one(state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        valid = is_valid_action(space, action)
        safe = _safe_action(space, action, valid)
        return jax.lax.cond(
            valid,
            lambda: step(state, safe),
            lambda: _worst_candidate(step, space, state),
        )

    def batch(state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        valid = is_valid_action(space, action)  # [B]
        safe = _safe_action(space, action, valid)
        step_all = jax.vmap(step)

        def with_worst() -> tuple[Any, TimeStep]:
            worst = jax.vmap(lambda s: _worst_candidate(step, space, s))(state)
            chosen = step_all(state, safe)
            pick = lambda w, c: jnp.where(  # noqa: E731
                valid.reshape(valid.shape + (1,) * (c.ndim - 1)), c, w
            )
            return jax.tree.map(pick, worst, chosen)

        return jax.lax.cond(jnp.all(valid), lambda: step_all(state, safe), with_worst)

    def masked(state: Any, action: jax.Array) -> tuple[Any, TimeStep]:
        valid = is_valid_action(space, action)
        safe = _safe_action(space, action, valid)
        if isinstance(space, Discrete):  # every action a candidate, the valid one among them
            candidates, own, compared = jnp.arange(space.n, dtype=jnp.int32), safe, space.n
        else:  # the corners, then the clipped action
            corner = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), space.shape)  # noqa: E731
            candidates = jnp.stack([corner(space.low), corner(space.high), safe])
            own, compared = 2, 2
        states, timesteps = jax.vmap(step, in_axes=(None, 0))(state, candidates)
        index = jnp.where(valid, own, jnp.argmin(timesteps.reward[:compared]))
        return jax.tree.map(lambda x: x[index], (states, timesteps))

    return batch_aware(one, batch, masked)(state, action)
