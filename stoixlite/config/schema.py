"""The run's config schema: one frozen dataclass per Hydra config group, and the whole run.

``arch``, ``system``, ``network`` (with ``memory``, the memory model's keyword arguments),
``env``, ``logger`` (with ``wandb``), ``checkpoint`` and ``distributed``, gathered in
:class:`RunConfig`. Each field says its type and, with :func:`~stoixlite.rules.rule`, what it
allows; allowed values owned elsewhere (the env and memory registries, the activation table, the
W&B logger's modes) are asked of their owners when a value is checked, never listed here.
:func:`stoixlite.config.parse.parse` fills these from a composed config; what a run derives from
them (chunks, PPO settings) is :mod:`stoixlite.config.plan`.

Adding a key is one line in one dataclass: a typed field, with :func:`~stoixlite.rules.rule` for
its constraint and a default when configs written before the key existed should still parse
(e.g. ``burn_in: int = rule(NON_NEGATIVE_INT, default=0)`` in :class:`SystemConfig`). The
``network`` group is flat in YAML: the actor-critic's keys are the fields of
:class:`NetworkConfig`, every other key belongs to the memory model.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stoixlite.rules import (
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    POSITIVE_INTS,
    Rule,
    choice,
    number_in,
    rule,
)

HOST_PORT = Rule(
    "must be host:port (a port number in [1, 65535]) or null",
    lambda v: (
        (m := re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):(\d+)", v)) is not None
        and 1 <= int(m.group(2)) <= 65535
    ),
)
# Upper bounds of the PPO hyperparameters: beyond them a setting is absurd (an Adam step above 1,
# a loss weight of 1e9), not merely unusual; every bound is far beyond what any PPO setting uses.
MAX_LR = 1.0
MAX_CLIP = 100.0
MAX_COEF = 1000.0
MAX_GRAD_NORM = 1e6
# What the host loop does with a learn chunk whose losses or parameters are not finite
# (stoixlite/run/divergence.py): stop with one line, or roll back to the newest checkpoint.
ON_NONFINITE = ("stop", "rollback")
ROLLOUT_CARRIES = ("auto", "every_step", "sequence_starts")
# How the learn chunk treats rare work in its per-step loops (auto-resets, bootstrap values at
# truncations, the invalid-action sweep, kept carries): skip it with a data-dependent branch, or
# compute it masked (config/plan.resolve_branching; auto: skip on CPUs, mask on accelerators).
BRANCHING = ("auto", "skip", "mask")


HOST_VECTORS = ("sync", "async")


def _env_names() -> list[str]:
    from stoixlite.envs.registry import available_envs

    return available_envs()


def _env_name_rule() -> Rule:
    """A registered JAX env, or a host env: ``gymnasium/<id>`` or ``popgym_ref/<name>``
    (checked against Gymnasium's registry and popgym by ``config.checks.check_env``)."""
    from stoixlite.envs.host import is_host_env

    return Rule(
        lambda: f"choose one of {_env_names()}, or a host env gymnasium/<id> or popgym_ref/<name>",
        lambda value: value in _env_names() or is_host_env(value),
        _env_name_refusal,
    )


def _env_name_refusal(value: Any) -> str:
    """What a refused ``env.name`` lacks: the id of a host env, the name within a family (the
    family's names), or a family."""
    from stoixlite.envs.host import HOST_SUITES

    family, _, rest = str(value).partition("/")
    if family == "gymnasium":
        return "the Gymnasium id is missing: gymnasium/<id> (any registered id, e.g. CartPole-v1)"
    if family in HOST_SUITES:
        ports = [n.split("/", 1)[1] for n in _env_names() if n.startswith("popgym/")]
        return f"the name is missing: choose {family}/<one of {ports}>"
    names = [n for n in _env_names() if n.split("/", 1)[0] == family]
    if names:
        missing = "the name is missing: " if not rest else ""
        return f"{missing}choose one of {names}"
    families = sorted({n.split("/", 1)[0] for n in _env_names()})
    what = f"no env family {family!r}" if family else "empty"
    return (
        f"{what}: choose <family>/<name> with a family of {families}, or a "
        "host env gymnasium/<id> or popgym_ref/<name>"
    )


def _memory_names() -> list[str]:
    from stoixlite.networks.memory import available_memories

    return available_memories()


def _activations() -> list[str]:
    from stoixlite.networks.actor_critic import ACTIVATIONS

    return list(ACTIVATIONS)


def _encoders() -> list[str]:
    from stoixlite.networks.actor_critic import ENCODERS

    return list(ENCODERS)


def _set_poolings() -> list[str]:
    from stoixlite.networks.actor_critic import SET_POOLINGS

    return list(SET_POOLINGS)


# --------------------------------------------------------------------------------------------
# The groups
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ArchConfig:
    """Budget, seeds and evaluation (``configs/arch``)."""

    seed: int = rule(NON_NEGATIVE_INT)
    num_seeds: int = rule(POSITIVE_INT, default=1)  # seeds trained together: seed, seed + 1, ...
    # devices per process the envs are split over (None: all of them)
    num_devices: int | None = rule(POSITIVE_INT, default=None)
    total_timesteps: int = rule(POSITIVE_INT)
    num_envs: int = rule(POSITIVE_INT)
    num_evaluations: int = rule(POSITIVE_INT)
    num_eval_envs: int = rule(POSITIVE_INT)
    eval_greedy: bool
    eval_max_steps: int = rule(POSITIVE_INT)
    # A chunk with a non-finite loss or parameter: stop (exit 1), or roll back to the newest
    # checkpoint with system.lr halved, at most max_rollbacks times.
    on_nonfinite: str = rule(choice(lambda: ON_NONFINITE), default="stop")
    max_rollbacks: int = rule(NON_NEGATIVE_INT, default=3)
    # Early stop: end the run (checkpointed) once the mean eval return reaches it; None: off.
    target_return: float | None = rule(
        Rule("must be a finite number or null (off)", math.isfinite), default=None
    )
    # Host envs only: an actor thread collects the next rollout, with parameters one update
    # stale, while the learner trains on the current one (docs/host_envs.md).
    host_overlap: bool = False
    # A run sized for an accelerator (preset=gpu; docs/scaling.md): num_envs and
    # total_timesteps both times scale_to_envs // num_envs, the config's updates kept
    # (config/scale.py, applied by config/parse.py); None: as configured.
    scale_to_envs: int | None = rule(POSITIVE_INT, default=None)
    # The envs preset=gpu scales this config to (its scale_to_envs): 4096, fewer where a
    # rollout's frames would not fit (the pixel envs' configs).
    gpu_envs: int = rule(POSITIVE_INT, default=4096)
    # Rare work in the learn chunk's loops: branches that skip it (a CPU's choice) or masked
    # computation without data-dependent control flow (an accelerator's); auto picks by device.
    branching: str = rule(choice(lambda: BRANCHING), default="auto")

    @property
    def seeds(self) -> list[int]:
        """The seeds of the run: ``seed + k`` for ``k < num_seeds``."""
        return [self.seed + k for k in range(self.num_seeds)]


# Equal chunks of whole updates rarely fit a budget exactly: the run keeps arch.num_evaluations
@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    """The PPO hyperparameters (``configs/system``); with the arch budget they make a
    :class:`~stoixlite.ppo.types.PPOConfig`."""

    rollout_length: int = rule(POSITIVE_INT)
    epochs: int = rule(POSITIVE_INT)
    num_minibatches: int = rule(POSITIVE_INT)
    bptt_length: int = rule(NON_NEGATIVE_INT)
    gamma: float = rule(number_in(0.0, 1.0, low_open=True))
    gae_lambda: float = rule(number_in(0.0, 1.0))
    clip_eps: float = rule(number_in(0.0, MAX_CLIP, low_open=True))
    value_clip_eps: float = rule(number_in(0.0, MAX_CLIP))
    vf_coef: float = rule(number_in(0.0, MAX_COEF))
    ent_coef: float = rule(number_in(0.0, MAX_COEF))
    lr: float = rule(number_in(0.0, MAX_LR, low_open=True))
    anneal_lr: bool
    max_grad_norm: float = rule(number_in(0.0, MAX_GRAD_NORM, low_open=True))
    adam_eps: float = rule(number_in(0.0, 1.0, low_open=True))
    normalize_advantages: bool
    rollout_unroll: int = rule(POSITIVE_INT, default=1)
    burn_in: int = rule(NON_NEGATIVE_INT, default=0)  # R2D2 burn-in before each BPTT chunk
    # Stateless networks (``is_stateless``: mlp, identity) train on shuffled single transitions.
    stateless_transitions: bool = True
    # Which memory carries the rollout stores (PPOConfig.rollout_carries; results are the same).
    rollout_carries: str = rule(choice(lambda: ROLLOUT_CARRIES), default="auto")


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    """The ``network`` group: the actor-critic's keys (``configs/actor_critic/default.yaml``) and
    ``name``, plus ``memory``, the memory model's keyword arguments (the keys of
    ``configs/network/<name>.yaml`` and any other key of the group, typed by the model's dataclass
    fields)."""

    name: str = rule(choice(_memory_names))
    embed_size: int = rule(POSITIVE_INT)
    encoder_layers: int = rule(NON_NEGATIVE_INT)
    head_size: int = rule(POSITIVE_INT)
    head_layers: int = rule(NON_NEGATIVE_INT)
    activation: str = rule(choice(_activations))
    shared_memory: bool
    encoder: str = rule(choice(_encoders), default="mlp")  # set: for envs with a set_layout
    set_pooling: str = rule(choice(_set_poolings), default="deepsets")  # of the set encoder
    # The cnn encoder's convolutions (networks/cnn.py; its DEFAULT_* are these): output channels,
    # square kernel sides and strides, one entry per convolution.
    cnn_channels: tuple[int, ...] = rule(POSITIVE_INTS, default=(16, 32))
    cnn_kernels: tuple[int, ...] = rule(POSITIVE_INTS, default=(3, 3))
    cnn_strides: tuple[int, ...] = rule(POSITIVE_INTS, default=(2, 2))
    # Frames the cnn encoder convolves at a time (0: all at once); results agree up to float
    # rounding, so it stays out of the checkpoint fingerprint (networks/cnn.in_slices).
    cnn_slice_frames: int = rule(NON_NEGATIVE_INT, default=256)
    memory: Mapping[str, Any] = field(default_factory=dict)


# Keys of the `network` group read by the actor-critic; every other key is the memory model's.
ACTOR_CRITIC_KEYS = tuple(f.name for f in dataclasses.fields(NetworkConfig) if f.name != "memory")
# Keys read only by the cnn encoder (network.encoder=cnn).
CNN_KEYS = ("cnn_channels", "cnn_kernels", "cnn_strides")
# Memory keys checked beyond their type, by name, for every model that has them (a model's own


@dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """The environment (``configs/env``): a registered name, for envs with difficulty levels the
    level, the observation augmentation, and ``kwargs``, further keyword arguments of the env's
    factory (typed by its signature)."""

    name: str = rule(_env_name_rule())
    # A level of the env's registration, or null: typed ``Any`` so that a non-string
    # (``env.difficulty=1``) is refused by ``config.checks.check_env`` with the env's levels.
    difficulty: Any = None
    obs_augment: bool
    obs_prev_reward: bool = False  # also append the previous reward (needs obs_augment)
    # The augmentation's previous action (POPGym's default); false keeps only the is-first flag
    # (and the previous reward if on). Tasks that do not need it (popgym's
    # obs_requires_prev_action is false) can learn a shortcut through it (docs/learning.md).
    obs_prev_action: bool = True
    # Checked mode: raise (one line naming the env, the action and the allowed range) on an
    # out-of-range action instead of playing it as an invalid move (docs/envs.md).
    check_actions: bool = False
    # Host envs (gymnasium/<id>, popgym_ref/<name>) only: "sync" steps them in this process,
    # "async" each in a worker process (docs/host_envs.md).
    vector: str = rule(choice(lambda: list(HOST_VECTORS)), default="sync")
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def factory_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the env's factory: ``kwargs`` and, if set, ``difficulty``."""
        level = {} if self.difficulty is None else {"difficulty": self.difficulty}
        return {**self.kwargs, **level}


def _wandb_modes() -> list[str]:
    from stoixlite.tracking.wandb_logger import MODES

    return list(MODES)


@dataclass(frozen=True, kw_only=True)
class WandbConfig:
    """``logger.wandb`` (``configs/logger/wandb.yaml``); ``None`` fields take W&B's defaults."""

    project: str = "stoixlite"
    entity: str | None = None
    group: str | None = None  # None: the Hydra sweep directory in a multirun
    tags: tuple[str, ...] = ()
    name: str | None = None  # None: the run name
    mode: str = rule(choice(_wandb_modes), default="auto")
    init_timeout: float = rule(POSITIVE, default=15.0)
    dir: str | None = None
    per_seed: bool = True


@dataclass(frozen=True, kw_only=True)
class LoggerConfig:
    """Local outputs (``configs/logger``) and, when present, W&B."""

    progress: bool
    jsonl: bool
    plot: bool
    wandb: WandbConfig | None = None


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Orbax checkpoints (``configs/checkpoint``; all defaults when the group is absent)."""

    enabled: bool = True
    every: int = rule(POSITIVE_INT, default=1)
    keep_last: int = rule(POSITIVE_INT, default=2)
    keep_best: bool = True


@dataclass(frozen=True, kw_only=True)
class DistributedConfig:
    """One run over several processes (``configs/distributed``; see docs/scaling.md): with
    ``enabled``, every process calls ``jax.distributed.initialize`` before anything else runs.
    ``None`` fields come from the cluster (SLURM, Open MPI, ``JAX_COORDINATOR_ADDRESS``)."""

    enabled: bool = False
    coordinator_address: str | None = rule(HOST_PORT, default=None)  # host:port of process 0
    num_processes: int | None = rule(POSITIVE_INT, default=None)
    process_id: int | None = rule(NON_NEGATIVE_INT, default=None)
    timeout_s: int = rule(POSITIVE_INT, default=300)  # for every process to join
    # a process that stops answering (killed, preempted, crashed) ends the others within this
    heartbeat_timeout_s: int = rule(POSITIVE_INT, default=60)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A whole run, parsed and checked."""

    arch: ArchConfig
    system: SystemConfig
    network: NetworkConfig
    env: EnvConfig
    logger: LoggerConfig
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    resume: str | None = None

    @property
    def steps_per_update(self) -> int:
        return self.arch.num_envs * self.system.rollout_length

    @property
    def sequences_per_env(self) -> int:
        """Training sequences cut from each env's rollout (1 for whole-rollout sequences)."""
        bptt = self.system.bptt_length
        return 1 if bptt in (0, self.system.rollout_length) else self.system.rollout_length // bptt

    def to_dict(self) -> dict[str, Any]:
        """The plain nested dict of the config as YAML writes it (``network`` flat again)."""
        out = dataclasses.asdict(self)
        network = out["network"]
        network.update(network.pop("memory"))
        for key in CNN_KEYS:
            network[key] = list(network[key])
        if out["logger"]["wandb"] is not None:
            out["logger"]["wandb"]["tags"] = list(out["logger"]["wandb"]["tags"])
        else:
            del out["logger"]["wandb"]
        return out
