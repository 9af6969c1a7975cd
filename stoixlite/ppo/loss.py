"""The clipped PPO loss over a minibatch of whole (or chunked) sequences."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from stoixlite.ppo.rollout import ApplyFn
from stoixlite.ppo.sequences import SequenceBatch
from stoixlite.ppo.types import Hyper, PPOConfig


def burned_in_carry(params: Any, apply_fn: ApplyFn, batch: SequenceBatch) -> Any:
    """The carry the trained part of each sequence starts from (see :class:`SequenceBatch`)."""
    if batch.burn_obs is None:
        return batch.init_carry
    carry, _ = apply_fn(params, batch.burn_carry, batch.burn_obs, batch.burn_start)
    carry = jax.lax.stop_gradient(carry)

    def select(burned: jax.Array, stored: jax.Array) -> jax.Array:
        valid = batch.burn_valid.reshape(batch.burn_valid.shape + (1,) * (stored.ndim - 1))
        return jnp.where(valid, burned, stored)

    return jax.tree.map(select, carry, batch.init_carry)


def ppo_loss(
    params: Any, apply_fn: ApplyFn, batch: SequenceBatch, cfg: PPOConfig, hyper: Hyper
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped surrogate + (optionally clipped) value loss - entropy bonus; ``hyper``'s
    ``clip_eps``, ``value_clip_eps`` (0: unclipped), ``vf_coef`` and ``ent_coef`` (traced
    values).

    Replays the sequences from the rollout's carries (after the optional burn-in), so on the first
    minibatch of the first epoch the replayed log-probs equal the behaviour log-probs
    (``ratio_max_dev`` ~ 0).
    """
    init_carry = burned_in_carry(params, apply_fn, batch)
    _, (dist, value) = apply_fn(params, init_carry, batch.obs, batch.start)
    log_prob = dist.log_prob(batch.action)
    log_ratio = log_prob - batch.log_prob
    ratio = jnp.exp(log_ratio)

    adv = batch.advantage
    if cfg.normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    clip_eps = hyper.clip_eps
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    policy_loss = -surrogate.mean()

    value_error = jnp.square(value - batch.target)
    value_clip_eps = hyper.value_clip_eps
    clipped = batch.value + jnp.clip(value - batch.value, -value_clip_eps, value_clip_eps)
    clipped_error = jnp.maximum(value_error, jnp.square(clipped - batch.target))
    value_error = jnp.where(value_clip_eps > 0, clipped_error, value_error)
    value_loss = 0.5 * value_error.mean()

    entropy = dist.entropy().mean()
    total = policy_loss + hyper.vf_coef * value_loss - hyper.ent_coef * entropy
    metrics = {
        "loss/total": total,
        "loss/policy": policy_loss,
        "loss/value": value_loss,
        "loss/entropy": entropy,
        "loss/approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "loss/clip_fraction": (jnp.abs(ratio - 1.0) > clip_eps).mean(),
        "loss/ratio_max_dev": jnp.abs(ratio - 1.0).max(),
        "loss/value_max_dev": jnp.abs(value - batch.value).max(),
    }
    return total, metrics
