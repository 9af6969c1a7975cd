"""One PPO update and the learn chunk (``lax.scan`` over updates); pure functions, no ``jit``.

An update: rollout -> bootstrap values -> GAE -> epochs x minibatches of training sequences
(:mod:`stoixlite.ppo.sequences`: whole rollouts or ``bptt_length`` chunks, each from the carry
the rollout had there), shuffled each epoch.

Stateless networks (``PPOConfig.transitions``) train on shuffled single transitions: sequences of
length 1, so each minibatch is a random ``1/num_minibatches`` of all ``T x N`` steps, as in
feed-forward PPO. For a model without state this is the same loss as on sequences (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from stoixlite.envs.types import Environment
from stoixlite.metric_keys import (
    ENV_METRIC_PREFIX,
    LAST100_COUNT_KEY,
    LAST100_KEY,
    LAST100_READS_KEY,
)
from stoixlite.ppo.episode_window import push_finished, reads_at, window_mean
from stoixlite.ppo.gae import gae_advantages
from stoixlite.ppo.loss import ppo_loss
from stoixlite.ppo.rollout import (
    ApplyFn,
    Bootstrap,
    bootstrap_values,
    next_values,
    rollout,
    rollout_keeping,
)
from stoixlite.ppo.rollout_masked import rollout_masked
from stoixlite.ppo.sequences import (
    SequenceBatch,
    carries_at,
    carry_steps,
    cut_sequences,
    keeps_sequence_starts,
    sequence_length,
    take_minibatch,
)
from stoixlite.ppo.types import Hyper, LearnerState, PPOConfig, Transition


def make_optimizer(cfg: PPOConfig, hyper: Hyper) -> optax.GradientTransformation:
    """Adam with global-norm gradient clipping and optional linear LR annealing to 0, with the
    rate, clipping norm and epsilon of ``hyper`` (traced values inside a program; the state's
    structure does not depend on them, so a run initialises it from its config's values)."""
    steps_per_update = cfg.epochs * cfg.num_minibatches
    if cfg.anneal_lr:
        lr = optax.linear_schedule(hyper.lr, 0.0, cfg.num_updates * steps_per_update)
    else:
        lr = hyper.lr
    return optax.chain(
        optax.clip_by_global_norm(hyper.max_grad_norm), optax.adam(lr, eps=hyper.adam_eps)
    )


def episode_metrics(traj: Transition) -> dict[str, jax.Array]:
    """Mean return/length of the episodes that ended in this rollout (NaN-free: count may be 0),
    the mean of each of the env's own episode statistics over the same episodes
    (``train/env/<name>``, :data:`~stoixlite.metric_keys.ENV_METRIC_PREFIX`), and the
    fraction of rollout steps whose action was invalid (``train/invalid_actions``)."""
    count = traj.last.sum()
    denom = jnp.maximum(count, 1)

    def over_episodes(values: jax.Array) -> jax.Array:
        return jnp.where(traj.last, values, 0).sum(dtype=jnp.float32) / denom

    env_metrics = {
        f"{ENV_METRIC_PREFIX}{name}": over_episodes(values)
        for name, values in traj.episode_metrics.items()
    }
    return {
        "train/episode_return": over_episodes(traj.episode_return),
        "train/episode_length": over_episodes(traj.episode_length),
        "train/episodes": count,
        "train/invalid_actions": traj.invalid_action.mean(dtype=jnp.float32),
        **env_metrics,
    }


def explained_variance(value: jax.Array, target: jax.Array) -> jax.Array:
    """``1 - Var[target - value] / Var[target]`` (0 when the target is constant)."""
    var = jnp.var(target)
    return jnp.where(var > 0, 1.0 - jnp.var(target - value) / jnp.where(var > 0, var, 1.0), 0.0)


class Collected(NamedTuple):
    """What an update's rollout leaves for training (:attr:`UpdatePhases.collect`).

    ``traj`` leaves ``[T, N, ...]``; ``chunk_carry`` / ``burn_carry`` the carries before each
    training chunk / its burn-in (leaves ``[chunks, N, ...]``; ``burn_carry`` is ``None`` without
    burn-in, :func:`carry_steps`); ``next_value [T, N]`` is V(true next observation) per step.
    """

    traj: Transition
    chunk_carry: Any
    burn_carry: Any
    next_value: jax.Array


class UpdatePhases(NamedTuple):
    """The three phases of one update, pure functions that :func:`make_update` chains.

    * ``collect(state) -> (state, Collected)``: the rollout and the bootstrap values (the env
      computing with ``state.hyper.env``);
    * ``prepare(Collected, Hyper) -> (SequenceBatch, target [T, N])``: GAE and the training
      sequences;
    * ``epochs(state, SequenceBatch) -> (state, loss metrics [epochs, minibatches])``: the
      shuffled minibatch steps (params, optimiser state and key advance), with the loss and
      optimiser values of ``state.hyper``.

    ``python -m stoixlite.benchmark profile`` times them separately, so what it profiles is what
    trains.
    """

    collect: Callable[[LearnerState], tuple[LearnerState, Collected]]
    prepare: Callable[[Collected, Hyper], tuple[SequenceBatch, jax.Array]]
    epochs: Callable[[LearnerState, SequenceBatch], tuple[LearnerState, dict[str, jax.Array]]]


def collected(
    apply_fn: ApplyFn,
    cfg: PPOConfig,
    params: Any,
    initial_carry: Any,
    traj: Transition,
    carries_after: Any,
    ends: Bootstrap | None = None,
    next_value: jax.Array | None = None,
) -> Collected:
    """:class:`Collected` of a rollout that kept the carry after every step: the bootstrap
    values and the carries the training sequences start from. ``traj`` leaves ``[T, N, ...]``,
    ``carries_after`` the carry after each step ``[T, N, ...]``, ``initial_carry`` the one before
    step 0. ``ends``: what :func:`~stoixlite.ppo.rollout.rollout` kept for the bootstrap
    (:func:`~stoixlite.ppo.rollout.next_values`); ``None`` when ``traj.next_obs`` holds every
    step's next observation, as the host rollout records it, and every step is evaluated
    (:func:`~stoixlite.ppo.rollout.bootstrap_values`, equal up to float rounding). The rollout of
    the JAX envs (:attr:`UpdatePhases.collect`) and of the host envs (:mod:`stoixlite.run.host`)
    share it. ``next_value`` ``[T, N]``: the bootstrap values when the rollout computed them
    (:func:`~stoixlite.ppo.rollout_masked.rollout_masked`)."""
    bptt = sequence_length(cfg)
    chunk_starts, burn_starts = carry_steps(cfg.rollout_length, bptt, cfg.burn_in)
    if next_value is None and ends is None:
        next_value = bootstrap_values(apply_fn, params, traj, carries_after)
    elif next_value is None:
        next_value = next_values(apply_fn, params, traj, carries_after, ends)
    stored = jax.tree.map(  # the carry before every step
        lambda c0, c: jnp.concatenate([c0[None], c[:-1]], axis=0), initial_carry, carries_after
    )
    chunk_carry = carries_at(stored, list(chunk_starts))
    burn_carry = carries_at(stored, list(burn_starts)) if cfg.burn_in else None
    return Collected(traj, chunk_carry, burn_carry, next_value)


def learner_keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The learner's split of the state's key (:attr:`UpdatePhases.epochs`): ``(the key the
    update leaves, the key of its epochs' shuffles)``. The host runs' actor thread starts the
    next rollout from the first before the update ends (:mod:`stoixlite.run.host`)."""
    key, epoch_key = jax.random.split(key)
    return key, epoch_key


def make_update_phases(
    apply_fn: ApplyFn,
    env: Environment,
    cfg: PPOConfig,
    rollout_unroll: int = 1,
    layout_minibatch: Callable[[SequenceBatch], SequenceBatch] | None = None,
) -> UpdatePhases:
    """Build the phases of :func:`make_update` (same arguments)."""
    grad_fn = jax.grad(lambda p, b, h: ppo_loss(p, apply_fn, b, cfg, h), has_aux=True)
    bptt = sequence_length(cfg)
    chunk_starts, burn_starts = carry_steps(cfg.rollout_length, bptt, cfg.burn_in)

    def collect(state: LearnerState) -> tuple[LearnerState, Collected]:
        bound = env.with_params(state.hyper.env)
        masked = cfg.branching == "mask"
        if keeps_sequence_starts(cfg.rollout_carries, state.carry):
            keep = sorted(set(chunk_starts) | set(burn_starts))
            roll = rollout_masked if masked else rollout_keeping
            state, traj, stored, next_value = roll(
                apply_fn, bound, state, cfg.rollout_length, tuple(keep), rollout_unroll
            )
            row = keep.index  # stored[keep.index(t)] is the carry before step t
        elif masked:
            initial_carry = state.carry
            state, traj, carries_after, next_value = rollout_masked(
                apply_fn, bound, state, cfg.rollout_length, unroll=rollout_unroll
            )
            data = collected(
                apply_fn, cfg, state.params, initial_carry, traj, carries_after, None, next_value
            )
            return state, data
        else:
            initial_carry = state.carry
            state, traj, carries_after, ends = rollout(
                apply_fn, bound, state, cfg.rollout_length, rollout_unroll
            )
            data = collected(apply_fn, cfg, state.params, initial_carry, traj, carries_after, ends)
            return state, data
        chunk_carry = carries_at(stored, [row(t) for t in chunk_starts])
        burn_carry = carries_at(stored, [row(t) for t in burn_starts]) if cfg.burn_in else None
        return state, Collected(traj, chunk_carry, burn_carry, next_value)

    def prepare(data: Collected, hyper: Hyper) -> tuple[SequenceBatch, jax.Array]:
        traj = data.traj
        advantage, target = gae_advantages(
            traj.reward,
            traj.discount,
            traj.last,
            traj.value,
            data.next_value,
            hyper.gamma,
            hyper.gae_lambda,
        )
        sequences = cut_sequences(
            traj, advantage, target, data.chunk_carry, data.burn_carry, bptt, cfg.burn_in
        )
        return sequences, target

    def epochs(
        state: LearnerState, sequences: SequenceBatch
    ) -> tuple[LearnerState, dict[str, jax.Array]]:
        num_sequences = sequences.start.shape[1]
        hyper = state.hyper
        tx = make_optimizer(cfg, hyper)

        def minibatch_step(carry: tuple, batch: SequenceBatch) -> tuple[tuple, dict]:
            params, opt_state = carry
            grads, metrics = grad_fn(params, batch, hyper)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), metrics

        def epoch_step(carry: tuple, key: jax.Array) -> tuple[tuple, dict]:
            perm = jax.random.permutation(key, num_sequences)

            def train_on(carry: tuple, index: jax.Array) -> tuple[tuple, dict]:
                batch = take_minibatch(sequences, perm, index, cfg.num_minibatches)
                if layout_minibatch is not None:
                    batch = layout_minibatch(batch)
                return minibatch_step(carry, batch)

            return jax.lax.scan(train_on, carry, jnp.arange(cfg.num_minibatches))

        key, epoch_key = learner_keys(state.key)
        (params, opt_state), loss_metrics = jax.lax.scan(
            epoch_step, (state.params, state.opt_state), jax.random.split(epoch_key, cfg.epochs)
        )
        return state.replace(params=params, opt_state=opt_state, key=key), loss_metrics

    return UpdatePhases(collect, prepare, epochs)


def make_update(
    apply_fn: ApplyFn,
    env: Environment,
    cfg: PPOConfig,
    rollout_unroll: int = 1,
    layout_minibatch: Callable[[SequenceBatch], SequenceBatch] | None = None,
) -> Callable[[LearnerState], tuple[LearnerState, dict[str, jax.Array]]]:
    """Build ``update(state) -> (state, metrics)``: a rollout, then epochs x minibatches steps
    (:class:`UpdatePhases` chained), with the traced values of ``state.hyper`` (the env's params,
    GAE's, the loss's and the optimiser's).

    ``layout_minibatch`` maps a minibatch ``[L, B, ...]`` (:func:`take_minibatch`) to itself with
    a device layout (a sharding constraint splitting it over devices, see
    :mod:`stoixlite.run.sharding`); values are unchanged.
    """
    phases = make_update_phases(apply_fn, env, cfg, rollout_unroll, layout_minibatch)
    learn = make_learn_from(phases, cfg)

    def update(state: LearnerState) -> tuple[LearnerState, dict[str, jax.Array]]:
        state, data = phases.collect(state)
        return learn(state, data)

    return update


def make_learn_from(
    phases: UpdatePhases, cfg: PPOConfig
) -> Callable[[LearnerState, Collected], tuple[LearnerState, dict[str, jax.Array]]]:
    """``learn(state, collected) -> (state, metrics)``: the part of :func:`make_update` after
    the rollout (``prepare``, ``epochs``, the update's metrics and counters). The host envs'
    update (:mod:`stoixlite.run.host`) runs it on the rollout it collected on the host."""

    def learn(state: LearnerState, data: Collected) -> tuple[LearnerState, dict[str, jax.Array]]:
        sequences, target = phases.prepare(data, state.hyper)
        state, loss_metrics = phases.epochs(state, sequences)
        metrics = {k: v.mean() for k, v in loss_metrics.items()}
        # The rollout/replay identity: first minibatch of the first epoch.
        metrics["loss/first_ratio_max_dev"] = loss_metrics["loss/ratio_max_dev"][0, 0]
        metrics["loss/first_value_max_dev"] = loss_metrics["loss/value_max_dev"][0, 0]
        metrics["train/explained_variance"] = explained_variance(data.traj.value, target)
        metrics.update(episode_metrics(data.traj))
        episodes = push_finished(state.episodes, data.traj.episode_return, data.traj.last)
        metrics[LAST100_KEY] = window_mean(episodes)
        metrics[LAST100_COUNT_KEY] = episodes.count
        metrics[LAST100_READS_KEY] = reads_at(
            state.update_step, cfg.num_envs * cfg.rollout_length
        ).astype(jnp.int32)
        return state.replace(update_step=state.update_step + 1, episodes=episodes), metrics

    return learn


def make_learn_chunk(
    update: Callable[[LearnerState], tuple[LearnerState, dict[str, jax.Array]]], num_updates: int
) -> Callable[[LearnerState], tuple[LearnerState, dict[str, jax.Array]]]:
    """``lax.scan`` of ``num_updates`` updates (pure; the host jits it and donates the state).

    Metrics come back stacked ``[num_updates]``; nothing touches the host inside the chunk.
    """

    def learn_chunk(state: LearnerState) -> tuple[LearnerState, dict[str, jax.Array]]:
        return jax.lax.scan(lambda s, _: update(s), state, None, length=num_updates)

    return learn_chunk
