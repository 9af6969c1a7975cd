"""The clipped PPO loss over a minibatch of whole (or chunked) sequences."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.ppo.rollout import ApplyFn
from stoixlite.ppo.types import PPOConfig


@struct.dataclass
class SequenceBatch:
    """Training sequences, time-major ``[L, S, ...]``, each starting at ``init_carry [S, ...]``.

    With burn-in (``B > 0`` steps, R2D2-style), each sequence also carries the ``B`` steps that
    precede it in the rollout (``burn_obs [B, S, *obs_shape]``, ``burn_start [B, S]``) and the
    rollout's carry before them (``burn_carry [S, ...]``). The loss replays them with the current
    parameters and no gradient and starts the trained part from the result, instead of from the
    stored ``init_carry``, where ``burn_valid [S]`` (false for a rollout's first chunk, which has no
    earlier steps). Without burn-in these fields are ``None``.
    """

    obs: jax.Array
    start: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array  # GAE return (value target)
    init_carry: Any
    burn_obs: jax.Array | None = None
    burn_start: jax.Array | None = None
    burn_carry: Any = None
    burn_valid: jax.Array | None = None


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
    params: Any, apply_fn: ApplyFn, batch: SequenceBatch, cfg: PPOConfig
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped surrogate + (optionally clipped) value loss - entropy bonus.

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
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
    policy_loss = -surrogate.mean()

    value_error = jnp.square(value - batch.target)
    if cfg.value_clip_eps > 0:
        clipped = batch.value + jnp.clip(
            value - batch.value, -cfg.value_clip_eps, cfg.value_clip_eps
        )
        value_error = jnp.maximum(value_error, jnp.square(clipped - batch.target))
    value_loss = 0.5 * value_error.mean()

    entropy = dist.entropy().mean()
    total = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
    metrics = {
        "loss/total": total,
        "loss/policy": policy_loss,
        "loss/value": value_loss,
        "loss/entropy": entropy,
        "loss/approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "loss/clip_fraction": (jnp.abs(ratio - 1.0) > cfg.clip_eps).mean(),
        "loss/ratio_max_dev": jnp.abs(ratio - 1.0).max(),
        "loss/value_max_dev": jnp.abs(value - batch.value).max(),
    }
    return total, metrics
