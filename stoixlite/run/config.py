"""The typed run config: the composed Hydra config, parsed once at the boundary.

``parse(cfg) -> RunConfig`` turns the composed config (a ``DictConfig`` or plain mapping) into
frozen dataclasses, one per group (``arch``, ``system``, ``network``, ``env``, ``logger``,
``checkpoint``, ``distributed``). Every module below the entry points takes these typed pieces;
nothing else reads a ``DictConfig``. Parsing is strict and reports every mistake before anything
compiles, one line per error (:class:`ConfigError`), each
``<key>=<value> is invalid: <what is allowed>``:

* booleans accept only ``true``/``false`` (``env.obs_augment=no`` is an error);
* integers accept integral floats and scientific notation (``arch.total_timesteps=5e6``) and
  refuse fractions (``arch.seed=1.5``);
* an unknown key (also a ``+key`` override) is an error naming the nearest valid key;
* allowed values come from their owners (the env and memory registries, the activation table,
  the scan strategies), never from a list kept here; the W&B modes are declared here, with
  :class:`WandbConfig`.

Adding a key is one line in one dataclass: a typed field, with :func:`rule` for its constraint
and a default when configs written before the key existed should still parse (e.g.
``burn_in: int = rule(NON_NEGATIVE_INT, default=0)`` in :class:`SystemConfig`). The ``network``
group is flat in YAML: the actor-critic's keys are the fields of :class:`NetworkConfig`, every
other key belongs to the memory model and is typed by that model's own dataclass fields.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from stoixlite.ppo.types import PPOConfig


class ConfigError(ValueError):
    """Configuration mistakes, one line each (``str`` joins them with newlines)."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


# --------------------------------------------------------------------------------------------
# Rules: what a field allows
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A field's constraint: ``ok(value)`` on the converted value, ``allowed`` says it in words
    (a callable for lists owned elsewhere, read only when an error is reported)."""

    allowed: str | Callable[[], str]
    ok: Callable[[Any], bool] = lambda value: True

    def describe(self) -> str:
        return self.allowed if isinstance(self.allowed, str) else self.allowed()


def rule(check: Rule, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field checked by ``check`` (with an optional default)."""
    return field(default=default, metadata={"rule": check})


def choice(options: Callable[[], Sequence[Any]]) -> Rule:
    """One of ``options()`` (asked of the owner of the list when checked)."""
    return Rule(lambda: f"choose one of {list(options())}", lambda value: value in options())


def number_in(low: float, high: float, low_open: bool = False) -> Rule:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``): NaN and +-inf are
    refused whatever the bounds."""
    bracket = "(" if low_open else "["
    return Rule(
        f"must be a finite number in {bracket}{float(low)}, {float(high)}]",
        lambda v: math.isfinite(v) and (v > low if low_open else v >= low) and v <= high,
    )


# Sizes, counts and seeds become int32 array dimensions, loop bounds or PRNG seeds: larger
# integers overflow there (or build absurd arrays) instead of failing here.
INT_LIMIT = 2**31 - 1
POSITIVE_INT = Rule(f"must be a positive integer <= {INT_LIMIT}", lambda v: 0 < v <= INT_LIMIT)
NON_NEGATIVE_INT = Rule(f"must be an integer in [0, {INT_LIMIT}]", lambda v: 0 <= v <= INT_LIMIT)
POSITIVE = number_in(0.0, math.inf, low_open=True)
HOST_PORT = Rule(
    "must be host:port (a port number in [1, 65535]) or null",
    lambda v: (
        (m := re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):(\d+)", v)) is not None
        and 1 <= int(m.group(2)) <= 65535
    ),
)
CHRONO = Rule(
    "must be 0 (off) or a finite number > 1 (the longest initial retention, in steps)",
    lambda v: v == 0 or (math.isfinite(v) and v > 1),
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


def _env_names() -> list[str]:
    from stoixlite.envs.registry import available_envs

    return available_envs()


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


def _scan_strategies() -> list[str]:
    from stoixlite.networks.memory.scan import STRATEGIES

    return list(STRATEGIES)


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

    @property
    def seeds(self) -> list[int]:
        """The seeds of the run: ``seed + k`` for ``k < num_seeds``."""
        return [self.seed + k for k in range(self.num_seeds)]


# Equal chunks of whole updates rarely fit a budget exactly: the run keeps arch.num_evaluations
# while that trains at least this share of the budget's updates, else takes fewer chunks.
KEPT_BUDGET_SHARE = 0.95


def chunk_split(num_updates: int, max_chunks: int) -> tuple[int, int]:
    """``(chunks, updates per chunk)``: ``num_updates`` whole updates (>= 1) in at most
    ``max_chunks`` equal chunks, the most chunks that train at least :data:`KEPT_BUDGET_SHARE`
    of them (``max_chunks`` whenever it does). E.g. 36 updates, at most 20 chunks: 18 x 2
    (20 x 1 would train 20); 244 updates: 20 x 12 = 240; 6 updates: 6 x 1."""
    for chunks in range(min(max_chunks, num_updates), 1, -1):
        if chunks * (num_updates // chunks) >= KEPT_BUDGET_SHARE * num_updates:
            return chunks, num_updates // chunks
    return 1, max(1, num_updates)  # below one update: refused by the parser's budget check


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
    memory: Mapping[str, Any] = field(default_factory=dict)


# Keys of the `network` group read by the actor-critic; every other key is the memory model's.
ACTOR_CRITIC_KEYS = tuple(f.name for f in dataclasses.fields(NetworkConfig) if f.name != "memory")
# Memory keys checked beyond their type, by name, for every model that has them (a model's own
# ``config_errors`` checks what is particular to it, e.g. the bounds of memory_length, conv_size
# and frames, and runs once these pass).
_MEMORY_RULES = {
    "hidden_size": POSITIVE_INT,
    "num_layers": POSITIVE_INT,
    "state_size": POSITIVE_INT,  # or null where the model allows it (lru, s5: hidden_size)
    "trace_size": POSITIVE_INT,
    "context_size": POSITIVE_INT,
    "unroll": POSITIVE_INT,
    "num_heads": POSITIVE_INT,
    "key_size": POSITIVE_INT,
    "chunk_size": POSITIVE_INT,
    "expand": POSITIVE_INT,
    "ff_size": POSITIVE_INT,
    "dt_rank": POSITIVE_INT,
    "eps": POSITIVE,
    "scan": choice(_scan_strategies),
    "chrono_period": CHRONO,
    "min_period": POSITIVE,
    "max_period": POSITIVE,
    "dt_min": POSITIVE,
    "dt_max": POSITIVE,
    "r_min": Rule("must be a finite number in [0, 1)", lambda v: 0 <= v < 1),
    "r_max": Rule("must be a finite number in (0, 1)", lambda v: 0 < v < 1),
    "max_phase": POSITIVE,
}
# Ranges given by two memory keys: the first must not exceed the second.
_MEMORY_RANGES = (("min_period", "max_period"), ("dt_min", "dt_max"), ("r_min", "r_max"))


@dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """The environment (``configs/env``): a registered name, for envs with difficulty levels the
    level, the observation augmentation, and ``kwargs``, further keyword arguments of the env's
    factory (typed by its signature)."""

    name: str = rule(choice(_env_names))
    # A level of the env's registration, or null: typed ``Any`` so that a non-string
    # (``env.difficulty=1``) is refused by :func:`_check_env` with the env's list of levels.
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
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def factory_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the env's factory: ``kwargs`` and, if set, ``difficulty``."""
        level = {} if self.difficulty is None else {"difficulty": self.difficulty}
        return {**self.kwargs, **level}


# W&B modes (stoixlite.tracking.wandb_logger resolves "auto" to online or offline).
WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclass(frozen=True, kw_only=True)
class WandbConfig:
    """``logger.wandb`` (``configs/logger/wandb.yaml``); ``None`` fields take W&B's defaults."""

    project: str = "stoixlite"
    entity: str | None = None
    group: str | None = None  # None: the Hydra sweep directory in a multirun
    tags: tuple[str, ...] = ()
    name: str | None = None  # None: the run name
    mode: str = rule(choice(lambda: WANDB_MODES), default="auto")
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

    def check_device_split(self, num_devices: int) -> None:
        """One-line :class:`ConfigError` unless the envs and every minibatch's sequences split
        evenly over ``num_devices`` devices (all processes together)."""
        errors = _Errors()
        _check_device_split(errors, self, num_devices)
        if errors:
            raise ConfigError(errors)

    @property
    def num_updates(self) -> int:
        """Whole updates in ``arch.total_timesteps``."""
        return self.arch.total_timesteps // self.steps_per_update

    @property
    def num_chunks(self) -> int:
        """Compiled learn chunks of the run (an evaluation after each): ``arch.num_evaluations``
        unless fewer equal chunks keep more of the budget (:func:`chunk_split`)."""
        return chunk_split(self.num_updates, self.arch.num_evaluations)[0]

    @property
    def ppo(self) -> PPOConfig:
        """The static PPO config; the budget's whole updates in :attr:`num_chunks` equal chunks."""
        num_chunks, updates_per_chunk = chunk_split(self.num_updates, self.arch.num_evaluations)
        from stoixlite.networks.memory import is_stateless

        given = {f.name: getattr(self.system, f.name) for f in dataclasses.fields(self.system)}
        # Stateless networks train on shuffled single transitions (no sequences, no burn-in).
        transitions = self.system.stateless_transitions and is_stateless(self.network.name)
        if transitions:
            given["burn_in"] = 0
        return PPOConfig(
            **{f.name: given[f.name] for f in dataclasses.fields(PPOConfig) if f.name in given},
            transitions=transitions,
            num_envs=self.arch.num_envs,
            num_updates=updates_per_chunk * num_chunks,
            updates_per_chunk=updates_per_chunk,
        )

    @property
    def total_steps(self) -> int:
        """Environment steps the run actually trains: whole updates in whole chunks."""
        return self.ppo.num_updates * self.steps_per_update

    def budget_note(self) -> str | None:
        """One line when ``arch.total_timesteps`` does not divide into whole updates and chunks
        (the run then trains :attr:`total_steps`) or runs fewer chunks than
        ``arch.num_evaluations``, else ``None``."""
        fewer = self.num_chunks != self.arch.num_evaluations
        if self.total_steps == self.arch.total_timesteps and not fewer:
            return None
        evaluations, updates, why = self.arch.num_evaluations, self.num_updates, ""
        if updates < evaluations:
            why = f"; the budget holds {updates} whole updates, fewer than arch.num_evaluations"
        elif fewer:
            kept = updates // evaluations * evaluations * self.steps_per_update
            why = f"; arch.num_evaluations={evaluations} equal chunks would train {kept} steps"
        return (
            f"arch.total_timesteps={self.arch.total_timesteps} runs {self.total_steps} steps: "
            f"{self.chunking} (arch.num_envs x system.rollout_length){why}"
        )

    @property
    def chunking(self) -> str:
        """``"<chunks> chunks x <updates per chunk> updates x <steps per update> steps"``."""
        return (
            f"{self.num_chunks} chunks x {self.ppo.updates_per_chunk} updates x "
            f"{self.steps_per_update} steps"
        )

    @property
    def name(self) -> str:
        """``"<env>[<difficulty>] <network> seed=<seed or first..last>"``."""
        seeds = self.arch.seeds
        seed = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
        return f"{self.env.name}[{self.env.difficulty or '-'}] {self.network.name} seed={seed}"

    def to_dict(self) -> dict[str, Any]:
        """The plain nested dict of the config as YAML writes it (``network`` flat again)."""
        out = dataclasses.asdict(self)
        network = out["network"]
        network.update(network.pop("memory"))
        if out["logger"]["wandb"] is not None:
            out["logger"]["wandb"]["tags"] = list(out["logger"]["wandb"]["tags"])
        else:
            del out["logger"]["wandb"]
        return out


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


class _Errors(list):
    def add(self, path: str, value: Any, allowed: str) -> None:
        self.append(f"{path}={value!r} is invalid: {allowed}")


def nearest(key: str, valid: Sequence[str]) -> str | None:
    """The valid key equal to ``key`` up to case, else the closest by spelling (difflib, cutoff
    0.5), else ``None``."""
    for candidate in valid:
        if candidate.lower() == key.lower():
            return candidate
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return close[0] if close else None


def unknown_key_hint(prefix: str, key: str, valid: Sequence[str], suffix: str = "") -> str:
    """``unknown key (did you mean <prefix><nearest><suffix>?)``, or the valid keys when none is
    close (``suffix``: the rest of a dotted path below the unknown key)."""
    near = nearest(key, valid)
    hint = f"did you mean {prefix}{near}{suffix}?" if near else f"valid keys: {sorted(valid)}"
    return f"unknown key ({hint})"


def _unknown(errors: _Errors, prefix: str, key: str, value: Any, valid: Sequence[str]) -> None:
    errors.add(f"{prefix}{key}", value, unknown_key_hint(prefix, key, valid))


_TYPE_NOUNS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _type_noun(tp: Any) -> str:
    """``tp`` in words: ``str | None`` -> "a string or null", ``tuple[str, ...]`` -> "a list of
    strings"."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        words = [_type_noun(a) for a in args if a is not type(None)]
        return " or ".join(words + (["null"] if type(None) in args else []))
    if origin is tuple:
        inner = {str: "strings", int: "integers", float: "numbers"}.get(args[0], "values")
        return f"a list of {inner}"
    return _TYPE_NOUNS.get(tp, getattr(tp, "__name__", str(tp)))


def _type_words(tp: Any) -> str:
    return f"must be {_type_noun(tp)}"


def _convert(tp: Any, value: Any) -> tuple[bool, Any]:
    """``(ok, converted)`` for ``value`` read as type ``tp`` (strict, see the module doc)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return True, None
        for arg in args:
            if arg is not type(None):
                ok, out = _convert(arg, value)
                if ok:
                    return True, out
        return False, value
    if tp is bool:
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if tp is int:
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return True, int(value)
        return False, value
    if tp is float:
        ok = isinstance(value, (int, float))
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    if origin is tuple:
        ok = isinstance(value, (list, tuple)) and all(_convert(args[0], v)[0] for v in value)
        return ok, tuple(value) if ok else value
    return True, value  # Any, Mapping: taken as given


def _field_value(errors: _Errors, path: str, tp: Any, value: Any, check: Rule | None) -> Any:
    ok, out = _convert(tp, value)
    if ok and check is not None and out is not None:
        ok = check.ok(out)
    if not ok:
        errors.add(path, value, check.describe() if check is not None else _type_words(tp))
    return out


def _section(errors: _Errors, cls: type, given: Any, prefix: str, skip: Sequence[str] = ()) -> Any:
    """Parse ``given`` (a mapping) into dataclass ``cls``; ``None`` when it has errors."""
    if not isinstance(given, Mapping):
        errors.add(prefix.rstrip("."), given, "config group is missing")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    before = len(errors)
    values: dict[str, Any] = {}
    for key, value in given.items():
        if key not in fields:
            _unknown(errors, prefix, str(key), value, list(fields))
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp) or _optional_dataclass(tp):
            inner = _optional_dataclass(tp) or tp
            values[key] = (
                None if value is None else _section(errors, inner, value, f"{prefix}{key}.")
            )
            continue
        values[key] = _field_value(
            errors, prefix + key, tp, value, fields[key].metadata.get("rule")
        )
    for key, f in fields.items():
        missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if key not in values and missing and not any(e.startswith(prefix + key) for e in errors):
            check = f.metadata.get("rule")
            words = check.describe() if check is not None else _type_words(hints[key])
            errors.append(f"{prefix}{key} is missing: {words}")
    return cls(**values) if len(errors) == before else None


def _optional_dataclass(tp: Any) -> type | None:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def _memory_section(errors: _Errors, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The memory model's keyword arguments, typed by its dataclass fields."""
    from stoixlite.networks.memory import memory_class, memory_config_errors, memory_fields

    before = len(errors)
    cls = memory_class(name)
    accepted = memory_fields(name)
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in given.items():
        if key not in accepted:
            near = nearest(key, sorted(accepted) + list(ACTOR_CRITIC_KEYS))
            hint = f"did you mean network.{near}?" if near else f"accepted: {sorted(accepted)}"
            errors.add(
                f"network.{key}",
                value,
                f"not a parameter of memory model {name!r} or the actor-critic ({hint})",
            )
            continue
        out[key] = _field_value(
            errors, f"network.{key}", hints.get(key, Any), value, _MEMORY_RULES.get(key)
        )
    if len(errors) == before:
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for low, high in _MEMORY_RANGES:
            if low in accepted and high in accepted:
                lo, hi = out.get(low, defaults[low]), out.get(high, defaults[high])
                if lo > hi:
                    errors.add(f"network.{low}", lo, f"must be <= network.{high}={hi!r}")
    if len(errors) == before:
        for key, value, allowed in memory_config_errors(name, out):
            errors.add(f"network.{key}", value, allowed)
    return out


def _network(errors: _Errors, given: Any) -> NetworkConfig | None:
    if not isinstance(given, Mapping):
        errors.add("network", given, "config group is missing")
        return None
    own = {k: v for k, v in given.items() if k in ACTOR_CRITIC_KEYS}
    net = _section(errors, NetworkConfig, own, "network.", skip=("memory",))
    if net is None or net.name not in _memory_names():
        return None
    memory = _memory_section(errors, net.name, {k: v for k, v in given.items() if k not in own})
    return dataclasses.replace(net, memory=memory)


def _check_env(errors: _Errors, env: EnvConfig) -> EnvConfig:
    """Checks of the env against its registration; returns it with ``kwargs`` typed by the
    factory's signature."""
    from stoixlite.envs.registry import env_spec

    spec = env_spec(env.name)
    levels = spec.difficulties
    if levels and env.difficulty not in levels:
        errors.add("env.difficulty", env.difficulty, f"choose one of {list(levels)}")
    elif not levels and env.difficulty is not None:
        errors.add(
            "env.difficulty", env.difficulty, f"{env.name} has no difficulty levels (use null)"
        )
    if env.obs_prev_reward and not env.obs_augment:
        errors.add(
            "env.obs_prev_reward",
            True,
            "requires env.obs_augment=true (the previous reward is part of the augmentation)",
        )
    params = _factory_params(spec.factory) if env.kwargs else {}
    if not isinstance(env.kwargs, Mapping):
        errors.add(
            "env.kwargs",
            env.kwargs,
            f"must be a mapping of {env.name}'s keyword arguments (env.kwargs.<name>=<value>, "
            f"<name> one of {list(params)})",
        )
        return env
    kwargs = {}
    for key, value in env.kwargs.items():
        if key not in params:
            _unknown(errors, "env.kwargs.", str(key), value, list(params))
            continue
        kwargs[key] = _field_value(errors, f"env.kwargs.{key}", params[key], value, None)
    env = dataclasses.replace(env, kwargs=kwargs)
    if kwargs and not errors:  # values the factory itself refuses (building an env is cheap)
        from stoixlite.envs.registry import make

        try:
            make(env.name, **env.factory_kwargs)
        except (ValueError, TypeError) as err:
            given = " ".join(f"env.kwargs.{k}={v!r}" for k, v in kwargs.items())
            errors.append(f"{given} is invalid: {env.name} refuses it ({err})")
    return env


def _factory_params(factory: Callable[..., Any]) -> dict[str, Any]:
    """``{parameter: annotation}`` of an env factory (a function, class or partial) other than
    ``difficulty``; ``Any`` where it has no annotation."""
    target = factory.func if isinstance(factory, functools.partial) else factory
    target = target.__init__ if inspect.isclass(target) else target
    try:
        hints = typing.get_type_hints(target)
    except (NameError, TypeError):  # unresolvable annotations: untyped
        hints = {}
    names = inspect.signature(factory).parameters
    return {name: hints.get(name, Any) for name in names if name not in ("difficulty", "self")}


def _check_encoder(errors: _Errors, run: RunConfig) -> None:
    """The set encoder needs an env with a set observation (``set_layout``); its attention
    pooling needs ``embed_size`` divisible by the pooling heads."""
    from stoixlite.envs.registry import make
    from stoixlite.networks.actor_critic import SET_POOLING_HEADS

    net = run.network
    if net.encoder != "set":
        return
    if getattr(make(run.env.name, **run.env.factory_kwargs), "set_layout", None) is None:
        errors.add(
            "network.encoder",
            net.encoder,
            f"env {run.env.name} has no set observation (use mlp, or a set env: sets/card_table)",
        )
    if net.set_pooling == "attention" and net.embed_size % SET_POOLING_HEADS:
        errors.add(
            "network.set_pooling",
            net.set_pooling,
            f"attention pooling needs network.embed_size divisible by {SET_POOLING_HEADS}, "
            f"got {net.embed_size}",
        )


def _check_budget(errors: _Errors, run: RunConfig) -> None:
    """Checks across keys (run only when every key is valid on its own)."""
    arch, system = run.arch, run.system
    if arch.num_envs % system.num_minibatches:
        errors.add(
            "system.num_minibatches",
            system.num_minibatches,
            f"must divide arch.num_envs={arch.num_envs}",
        )
    bptt = system.bptt_length
    if bptt and system.rollout_length % bptt:
        errors.add(
            "system.bptt_length",
            bptt,
            f"must be 0 (whole rollout) or a divisor of system.rollout_length="
            f"{system.rollout_length}",
        )
    rollout = system.rollout_length
    if system.burn_in and not (0 < bptt < rollout and system.burn_in <= bptt):
        errors.add(
            "system.burn_in",
            system.burn_in,
            f"must be 0, or at most system.bptt_length={bptt} with 0 < bptt_length < "
            f"system.rollout_length={rollout} (burn-in precedes BPTT chunks)",
        )
    if arch.seed + arch.num_seeds - 1 > INT_LIMIT:
        errors.add(
            "arch.num_seeds",
            arch.num_seeds,
            f"the seeds arch.seed + k for k < arch.num_seeds must stay <= {INT_LIMIT}",
        )
    if arch.total_timesteps < run.steps_per_update:
        errors.add(
            "arch.total_timesteps",
            arch.total_timesteps,
            f"must be at least one update of arch.num_envs x system.rollout_length = "
            f"{run.steps_per_update} steps",
        )
    if arch.num_devices is not None and not errors:
        _check_device_split(errors, run, arch.num_devices)


def _check_device_split(errors: _Errors, run: RunConfig, num_devices: int) -> None:
    arch, system = run.arch, run.system
    per_minibatch = arch.num_envs * run.sequences_per_env // system.num_minibatches
    if arch.num_envs % num_devices or per_minibatch % num_devices:
        errors.add(
            "arch.num_envs",
            arch.num_envs,
            f"must split over {num_devices} devices (arch.num_devices={arch.num_devices!r}): "
            f"num_envs and the {per_minibatch} sequences of each of the "
            f"system.num_minibatches={system.num_minibatches} minibatches must be multiples of "
            f"{num_devices}",
        )


_GROUPS = {
    "arch": ArchConfig,
    "system": SystemConfig,
    "env": EnvConfig,
    "logger": LoggerConfig,
    "checkpoint": CheckpointConfig,
    "distributed": DistributedConfig,
}
# Groups a config may lack (configs saved before they existed): all defaults.
_OPTIONAL_GROUPS = ("checkpoint", "distributed")


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """``cfg`` as a plain dict with its interpolations resolved; :class:`ConfigError` (one line
    naming the key, its value and why) for one that does not resolve (an unset environment
    variable in ``${oc.env:...}``, a key that does not exist in ``${a.b}``)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as err:
        key = str(getattr(err, "full_key", "") or "") or "an interpolation"
        try:
            raw: Any = OmegaConf.to_container(cfg, resolve=False)
            for part in key.split("."):
                raw = raw[part]
        except (KeyError, TypeError, IndexError):
            raw = "?"
        why = str(getattr(err, "msg", "") or str(err)).strip().splitlines()[0]
        why = why.removeprefix("KeyError raised while resolving interpolation: ").strip('"')
        raise ConfigError(
            [f"{key}={raw} is invalid: the interpolation does not resolve ({why})"]
        ) from None


def parse_distributed(cfg: DictConfig | Mapping[str, Any]) -> DistributedConfig:
    """The ``distributed`` group alone (all defaults when absent): what must be known before
    JAX starts, i.e. before :func:`parse`, whose env and memory registries import JAX code."""
    given = resolved(cfg) if isinstance(cfg, DictConfig) else cfg
    if given.get("distributed") is None:
        return DistributedConfig()
    errors = _Errors()
    section = _section(errors, DistributedConfig, given["distributed"], "distributed.")
    if errors:
        raise ConfigError(errors)
    return section


def parse(cfg: DictConfig | Mapping[str, Any] | RunConfig) -> RunConfig:
    """The typed, checked :class:`RunConfig` of a composed config (a ``RunConfig`` is returned
    as it is). Raises :class:`ConfigError` listing every mistake, one line each."""
    if isinstance(cfg, RunConfig):
        return cfg
    given = resolved(cfg) if isinstance(cfg, DictConfig) else cfg
    errors = _Errors()
    top = [f.name for f in dataclasses.fields(RunConfig)]
    for key in given:
        if key not in top:
            _unknown(errors, "", str(key), given[key], top)
    parts: dict[str, Any] = {}
    for key, cls in _GROUPS.items():
        if key in _OPTIONAL_GROUPS and given.get(key) is None:
            continue
        parts[key] = _section(errors, cls, given.get(key), f"{key}.")
    parts["network"] = _network(errors, given.get("network"))
    resume = given.get("resume")
    parts["resume"] = None if resume is None else str(resume)
    if parts["env"] is not None:
        parts["env"] = _check_env(errors, parts["env"])
    if errors:
        raise ConfigError(errors)
    run = RunConfig(**parts)
    _check_budget(errors, run)
    _check_encoder(errors, run)
    if errors:
        raise ConfigError(errors)
    return run
