"""Training sequences: cutting a rollout's ``[T, N]`` data into ``[L, S]`` sequences that start
from the carries the rollout had, and splitting them into shuffled minibatches.

Sequences are whole per-env rollouts (``bptt_length = 0``) or contiguous chunks of
``bptt_length`` steps, each starting from the carry the rollout had at that step (no zero
padding, no strided chunks), optionally with R2D2-style burn-in steps before each chunk.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.ppo.types import PPOConfig, Transition


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


def carry_steps(length: int, bptt: int, burn_in: int = 0) -> tuple[list[int], list[int]]:
    """The steps whose carry-before the training sequences start from: ``(chunk starts, burn-in
    starts)`` (static lists; the second empty without burn-in). With ``bptt = 0`` (or T) one chunk
    per env; else chunk k starts at ``k bptt`` and its burn-in at ``max(k bptt - burn_in, 0)``."""
    seq = length if bptt in (0, length) else bptt
    chunk_starts = [k * seq for k in range(length // seq)]
    burn_starts = [max(t - burn_in, 0) for t in chunk_starts] if burn_in > 0 else []
    return chunk_starts, burn_starts


def make_sequences(
    traj: Transition,
    advantage: jax.Array,
    target: jax.Array,
    carries_before: Any,
    bptt: int,
    burn_in: int = 0,
) -> SequenceBatch:
    """Cut ``[T, N]`` data into ``[L, S]`` training sequences with their initial carries.

    ``carries_before[t]`` is the carry before step t (leaves ``[T, N, ...]``); the carries the
    sequences need (:func:`carry_steps`) are taken from it and :func:`cut_sequences` does the rest.
    """
    chunk_starts, burn_starts = carry_steps(traj.reward.shape[0], bptt, burn_in)
    burn_carry = carries_at(carries_before, burn_starts) if burn_in > 0 else None
    chunk_carry = carries_at(carries_before, chunk_starts)
    return cut_sequences(traj, advantage, target, chunk_carry, burn_carry, bptt, burn_in)


def carries_at(stored: Any, rows: list[int]) -> Any:
    """The carries in rows ``rows`` (static) of ``stored`` (leaves ``[K, N, ...]``): ``[len(rows),
    N, ...]``."""
    index = jnp.asarray(rows, jnp.int32)
    return jax.tree.map(lambda c: c[index], stored)


def cut_sequences(
    traj: Transition,
    advantage: jax.Array,
    target: jax.Array,
    chunk_carry: Any,
    burn_carry: Any,
    bptt: int,
    burn_in: int = 0,
) -> SequenceBatch:
    """Cut ``[T, N]`` data into ``[L, S]`` training sequences starting from given carries.

    ``chunk_carry`` (leaves ``[chunks, N, ...]``) holds the carry before each chunk's first step
    and ``burn_carry`` (same shape, or ``None`` without burn-in) the carry before its burn-in
    (:func:`carry_steps`). With ``bptt = 0`` (or T), L = T and S = N. Otherwise L = bptt,
    S = (T / L) * N, and sequence ``k * N + n`` covers steps ``[k L, (k+1) L)`` of env n.

    ``burn_in = B`` (``0 < B <= L``, chunks only) adds each chunk's preceding steps
    ``[k L - B, k L)`` and the carry before them; chunk 0 has none (``burn_valid`` false, its
    placeholder steps are never used).
    """
    t, n = traj.reward.shape
    length = t if bptt in (0, t) else bptt
    chunks = t // length

    def chunk(x: jax.Array) -> jax.Array:  # [T, N, ...] -> [L, S, ...]
        x = x.reshape((chunks, length, n) + x.shape[2:])
        return jnp.swapaxes(x, 0, 1).reshape((length, chunks * n) + x.shape[3:])

    def per_sequence(c: jax.Array) -> jax.Array:  # [chunks, N, ...] -> [S, ...]
        return c.reshape((chunks * n,) + c.shape[2:])

    starts, burn_list = carry_steps(t, bptt, burn_in)
    chunk_starts = jnp.asarray(starts)
    burn = {}
    if burn_in > 0:
        burn_starts = jnp.asarray(burn_list)  # [chunks]
        steps = burn_starts[None, :] + jnp.arange(burn_in)[:, None]  # [B, chunks]

        def burn_steps(x: jax.Array) -> jax.Array:  # [T, N, ...] -> [B, S, ...]
            return x[steps].reshape((burn_in, chunks * n) + x.shape[2:])

        burn = {
            "burn_obs": burn_steps(traj.obs),
            "burn_start": burn_steps(traj.start),
            "burn_carry": jax.tree.map(per_sequence, burn_carry),
            "burn_valid": jnp.repeat(chunk_starts >= burn_in, n),
        }
    return SequenceBatch(
        obs=chunk(traj.obs),
        start=chunk(traj.start),
        action=chunk(traj.action),
        log_prob=chunk(traj.log_prob),
        value=chunk(traj.value),
        advantage=chunk(advantage),
        target=chunk(target),
        init_carry=jax.tree.map(per_sequence, chunk_carry),
        **burn,
    )


# ``system.rollout_carries=auto`` keeps only the sequence-start carries (and bootstraps in the
# rollout loop) when the carry holds more floats per env than this: the attention caches (32k
# floats at the defaults), the matrix memories (4k); not the vector RNNs or memoroids (<= 1k).
COMPACT_CARRY_FLOATS = 2048


def keeps_sequence_starts(mode: str, carry: Any) -> bool:
    """Whether the rollout keeps only the carries the sequences start from
    (:func:`~stoixlite.ppo.rollout.rollout_keeping`) instead of every step's
    (``mode``: ``"auto" | "every_step" | "sequence_starts"``; ``carry`` leaves ``[N, ...]``)."""
    if mode != "auto":
        return mode == "sequence_starts"
    floats = sum(leaf.size // max(leaf.shape[0], 1) for leaf in jax.tree.leaves(carry))
    return floats > COMPACT_CARRY_FLOATS


def sequence_length(cfg: PPOConfig) -> int:
    """The ``bptt`` argument of :func:`make_sequences`: 1 (single transitions) for stateless
    networks, else ``cfg.bptt_length`` (0: whole rollouts)."""
    return 1 if cfg.transitions else cfg.bptt_length


# Fields of a SequenceBatch laid out per sequence ``[S, ...]``; the others are time-major.
BATCH_MAJOR_FIELDS = ("init_carry", "burn_carry", "burn_valid")


def take_minibatch(
    batch: SequenceBatch, perm: jax.Array, index: jax.Array, num_minibatches: int
) -> SequenceBatch:
    """Minibatch ``index`` of an epoch: the sequences ``perm[index B : (index + 1) B]`` of
    ``batch`` (``B = S / num_minibatches``; ``perm`` a permutation of the ``S`` sequences, ``index``
    traced), time-major fields ``[L, B, ...]``, per-sequence fields ``[B, ...]``.

    The epoch gathers each minibatch when it trains on it, so it holds one minibatch's copy of
    the rollout's data (its frames, for pixel envs) at a time, not a shuffled copy of all of it.
    """
    size = perm.shape[0] // num_minibatches
    rows = jax.lax.dynamic_slice_in_dim(perm, index * size, size)

    def take(name: str, x: jax.Array) -> jax.Array:
        return jnp.take(x, rows, axis=0 if name in BATCH_MAJOR_FIELDS else 1)

    fields = {k: jax.tree.map(lambda x, k=k: take(k, x), v) for k, v in vars(batch).items()}
    return SequenceBatch(**fields)
