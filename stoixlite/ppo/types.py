"""Data containers of the PPO core (flax struct dataclasses, so they pass through jit/scan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.envs.types import TimeStep
from stoixlite.ppo.episode_window import EpisodeWindow, empty_window


@struct.dataclass
class LearnerState:
    """Everything one update needs; the learn chunk donates and returns it.

    ``timestep`` is the latest timestep of each env ``[N]``; its observation is the next input and
    ``timestep.step_type != MID`` is that input's start flag (FIRST after the initial reset, LAST
    after an auto-reset). ``carry`` is the memory state *before* that observation is consumed.
    ``episodes`` holds the returns of the most recent finished training episodes
    (:mod:`stoixlite.ppo.episode_window`). ``hyper``: the values the update reads as inputs,
    not constants of the program (:class:`Hyper`).
    """

    params: Any
    opt_state: Any
    env_state: Any
    timestep: TimeStep
    carry: Any
    key: jax.Array
    update_step: jax.Array  # int32 scalar: updates done so far
    episodes: EpisodeWindow = struct.field(default_factory=empty_window)
    # The run's traced hyperparameters (:class:`Hyper`); ``None`` in a checkpoint's copy: they
    # come from the run's config (stoixlite.run.resume.checkpoint_tree).
    hyper: Hyper | None = None


@struct.dataclass
class Transition:
    """One rollout step for all envs, stacked by the rollout scan to ``[T, N, ...]``.

    Observations keep the env's shape and dtype (``obs_shape``: ``[F]`` for vectors,
    ``[H, W, C]`` for images, whose ``uint8`` frames stay ``uint8``: the network scales them).
    """

    obs: jax.Array  # [N, *obs_shape] input observation
    start: jax.Array  # [N] bool: obs is the first of an episode (memory resets before it)
    action: jax.Array  # [N] (or [N, A] continuous)
    log_prob: jax.Array  # [N] behaviour log-prob
    value: jax.Array  # [N] V(obs)
    reward: jax.Array  # [N]
    discount: jax.Array  # [N] 0 iff terminated
    last: jax.Array  # [N] bool: episode ended (terminated or truncated)
    episode_return: jax.Array  # [N] return of the episode that ended (valid where last)
    episode_length: jax.Array  # [N] length of the episode that ended (valid where last)
    invalid_action: jax.Array  # [N] bool: the action was out of range (docs/envs.md)
    # The env's own episode statistics {name: [N]} (``extras["episode_metrics"]``, valid where
    # last); empty for envs that provide none.
    episode_metrics: dict[str, jax.Array] = struct.field(default_factory=dict)
    # [N, *obs_shape] true next observation (the final one on LAST steps); recorded only on
    # request (``rollout(..., record_next_obs=True)``): training keeps just the ones it needs.
    next_obs: jax.Array | None = None


# The system keys that a run's program takes as inputs (Hyper's fields besides ``env``): runs
# that differ only in them (and in Hyper.env) share one compiled program.
HYPER_KEYS = (
    "lr",
    "ent_coef",
    "vf_coef",
    "clip_eps",
    "value_clip_eps",
    "gamma",
    "gae_lambda",
    "max_grad_norm",
    "adam_eps",
)


@struct.dataclass
class Hyper:
    """The hyperparameters an update reads as values (float32 scalars, or ``[L]`` with the
    leading lane axis of a run's seeds and members), not as constants compiled into the program:
    runs that differ only in them share one program (docs/experiments.md, "Sweeps as one
    program"). ``env``: the env's traced params by name (``Environment.traceable_params``; empty
    for envs without). ``lr`` is the initial rate (annealed linearly to 0 with
    ``PPOConfig.anneal_lr``); ``value_clip_eps`` 0 means an unclipped value loss."""

    lr: Any
    ent_coef: Any
    vf_coef: Any
    clip_eps: Any
    value_clip_eps: Any
    gamma: Any
    gae_lambda: Any
    max_grad_norm: Any
    adam_eps: Any
    env: dict[str, Any] = struct.field(default_factory=dict)

    def as_arrays(self) -> Hyper:
        """Every value as a float32 array (what a program takes)."""
        return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), self)


@dataclass(frozen=True)
class PPOConfig:
    """Static PPO settings (parsed by ``stoixlite.config``): what shapes the program. The values
    it reads as inputs are :class:`Hyper`."""

    num_envs: int
    rollout_length: int
    epochs: int
    num_minibatches: int
    bptt_length: int  # 0: whole rollout sequences; else contiguous chunks of this length
    anneal_lr: bool
    normalize_advantages: bool
    num_updates: int  # total updates of the run (for LR annealing)
    updates_per_chunk: int
    burn_in: int = 0  # steps replayed without gradient before each BPTT chunk (R2D2 burn-in)
    # Minibatches of shuffled single transitions (length-1 sequences) instead of sequences; only
    # equivalent for stateless networks, for which ``stoixlite.config.ppo_config`` sets it.
    transitions: bool = False
    # Carries the rollout stores: "every_step" ([T, N] carries, batched bootstrap), or
    # "sequence_starts" (only those the training sequences start from; bootstrap in the loop),
    # "auto": the latter for carries over sequences.COMPACT_CARRY_FLOATS floats per env.
    rollout_carries: str = "auto"
    # Rare work in the per-step loops (bootstrap values at truncations, kept carries): "skip"
    # (data-dependent branches that run it only when needed, a CPU's choice) or "mask" (computed
    # for every step and selected, or once after the loop: no data-dependent while/cond/switch,
    # an accelerator's choice). Resolved from arch.branching by stoixlite.config.plan.
    branching: str = "skip"
