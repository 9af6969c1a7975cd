"""Config schema and validation.

``validate(cfg)`` checks the composed Hydra config *before* anything is compiled and raises
:class:`ConfigError` with one line naming the offending key, the bad value and what is allowed.
``ppo_config(cfg)`` turns the ``arch`` and ``system`` groups into the static :class:`PPOConfig`.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from stoixlite.ppo.types import PPOConfig

# Keys of the `network` group read by the actor-critic; every other key must be accepted by the
# selected memory model's constructor.
ACTOR_CRITIC_KEYS = (
    "name",
    "embed_size",
    "encoder_layers",
    "head_size",
    "head_layers",
    "activation",
    "shared_memory",
)
ACTIVATIONS = ("relu", "tanh", "gelu", "silu", "elu")
DIFFICULTIES = ("easy", "medium", "hard")


class ConfigError(ValueError):
    """A configuration mistake; the message is a single line meant for the user."""


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {allowed}")


def _positive_int(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        key,
        value,
        "must be a positive integer",
    )


def _number(cfg: DictConfig, key: str, low: float, high: float, low_open: bool = False) -> None:
    value = OmegaConf.select(cfg, key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    bracket = "(" if low_open else "["
    _require(ok, key, value, f"must be a number in {bracket}{low}, {high}]")


def network_kwargs(net: DictConfig) -> dict[str, Any]:
    """Memory-model keyword arguments: every ``network`` key the actor-critic does not use."""
    container = OmegaConf.to_container(net, resolve=True)
    return {k: v for k, v in container.items() if k not in ACTOR_CRITIC_KEYS}


def _validate_env(cfg: DictConfig) -> None:
    from stoixlite.envs.registry import available_envs

    name = OmegaConf.select(cfg, "env.name")
    envs = available_envs()
    _require(name in envs, "env.name", name, f"choose one of {envs}")
    difficulty = OmegaConf.select(cfg, "env.difficulty")
    if name.startswith("popgym/"):
        _require(
            difficulty in DIFFICULTIES,
            "env.difficulty",
            difficulty,
            f"choose one of {list(DIFFICULTIES)}",
        )
    else:
        _require(
            difficulty is None,
            "env.difficulty",
            difficulty,
            f"{name} has no difficulty levels (use null)",
        )


def _validate_network(cfg: DictConfig) -> None:
    from stoixlite.networks.memory import available_memories, memory_fields

    name = OmegaConf.select(cfg, "network.name")
    models = available_memories()
    _require(name in models, "network.name", name, f"choose one of {models}")
    for key in ("hidden_size", "embed_size", "head_size"):
        _positive_int(cfg, f"network.{key}")
    for key in ("encoder_layers", "head_layers"):
        value = OmegaConf.select(cfg, f"network.{key}")
        _require(
            isinstance(value, int) and value >= 0,
            f"network.{key}",
            value,
            "must be an integer >= 0",
        )
    activation = OmegaConf.select(cfg, "network.activation")
    _require(
        activation in ACTIVATIONS,
        "network.activation",
        activation,
        f"choose one of {list(ACTIVATIONS)}",
    )
    accepted = memory_fields(name)
    for key in network_kwargs(cfg.network):
        _require(
            key in accepted,
            f"network.{key}",
            cfg.network[key],
            f"not a parameter of memory model {name!r} (accepted: {sorted(accepted)})",
        )
    scan = OmegaConf.select(cfg, "network.scan", default=None)
    if scan is not None:
        allowed = ("auto", "associative", "sequential")
        _require(scan in allowed, "network.scan", scan, f"choose one of {list(allowed)}")


def _validate_arch_system(cfg: DictConfig) -> None:
    for key in (
        "arch.total_timesteps",
        "arch.num_envs",
        "arch.num_eval_envs",
        "arch.num_evaluations",
        "arch.eval_max_steps",
        "system.rollout_length",
        "system.epochs",
        "system.num_minibatches",
        "system.rollout_unroll",
    ):
        _positive_int(cfg, key)
    _number(cfg, "system.lr", 0.0, float("inf"), low_open=True)
    _number(cfg, "system.gamma", 0.0, 1.0, low_open=True)
    _number(cfg, "system.gae_lambda", 0.0, 1.0)
    _number(cfg, "system.clip_eps", 0.0, float("inf"), low_open=True)
    _number(cfg, "system.value_clip_eps", 0.0, float("inf"))
    _number(cfg, "system.vf_coef", 0.0, float("inf"))
    _number(cfg, "system.ent_coef", 0.0, float("inf"))
    _number(cfg, "system.max_grad_norm", 0.0, float("inf"), low_open=True)
    _number(cfg, "system.adam_eps", 0.0, float("inf"), low_open=True)

    num_envs, minibatches = cfg.arch.num_envs, cfg.system.num_minibatches
    _require(
        num_envs % minibatches == 0,
        "system.num_minibatches",
        minibatches,
        f"must divide arch.num_envs={num_envs}",
    )
    rollout, bptt = cfg.system.rollout_length, cfg.system.bptt_length
    _require(
        isinstance(bptt, int) and bptt >= 0 and (bptt == 0 or rollout % bptt == 0),
        "system.bptt_length",
        bptt,
        f"must be 0 (whole rollout) or a divisor of system.rollout_length={rollout}",
    )
    burn_in = OmegaConf.select(cfg, "system.burn_in", default=0)
    _require(
        isinstance(burn_in, int)
        and not isinstance(burn_in, bool)
        and burn_in >= 0
        and (burn_in == 0 or 0 < bptt < rollout and burn_in <= bptt),
        "system.burn_in",
        burn_in,
        f"must be 0, or at most system.bptt_length={bptt} with 0 < bptt_length < "
        f"system.rollout_length={rollout} (burn-in precedes BPTT chunks)",
    )
    steps_per_update = num_envs * rollout
    num_updates = cfg.arch.total_timesteps // steps_per_update
    _require(
        num_updates >= cfg.arch.num_evaluations,
        "arch.total_timesteps",
        cfg.arch.total_timesteps,
        f"must be at least arch.num_evaluations x num_envs x rollout_length = "
        f"{cfg.arch.num_evaluations * steps_per_update}",
    )


def _validate_experiment(cfg: DictConfig) -> None:
    """Seeds, checkpoints and the W&B section (all optional in hand-written configs)."""
    target = OmegaConf.select(cfg, "arch.target_return", default=None)
    _require(
        target is None or (isinstance(target, (int, float)) and not isinstance(target, bool)),
        "arch.target_return",
        target,
        "must be a number (stop once the mean eval return reaches it) or null (off)",
    )
    transitions = OmegaConf.select(cfg, "system.stateless_transitions", default=True)
    _require(
        isinstance(transitions, bool), "system.stateless_transitions", transitions, "true or false"
    )
    if OmegaConf.select(cfg, "arch.num_seeds", default=None) is not None:
        _positive_int(cfg, "arch.num_seeds")
    if OmegaConf.select(cfg, "checkpoint", default=None) is not None:
        _positive_int(cfg, "checkpoint.every")
        _positive_int(cfg, "checkpoint.keep_last")
    mode = OmegaConf.select(cfg, "logger.wandb.mode", default=None)
    if mode is not None:
        allowed = ("auto", "online", "offline", "disabled")
        _require(mode in allowed, "logger.wandb.mode", mode, f"choose one of {list(allowed)}")


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` (one line) on the first invalid setting."""
    for group in ("arch", "system", "network", "env", "logger"):
        _require(group in cfg and cfg[group] is not None, group, None, "config group is missing")
    _validate_arch_system(cfg)
    _validate_experiment(cfg)
    _validate_env(cfg)
    _validate_network(cfg)


def ppo_config(cfg: DictConfig) -> PPOConfig:
    """The static PPO config; updates are split evenly into ``arch.num_evaluations`` chunks."""
    from stoixlite.networks.memory import is_stateless

    s, a = cfg.system, cfg.arch
    # Stateless networks train on shuffled single transitions (no sequences, no burn-in).
    transitions = bool(s.get("stateless_transitions", True)) and is_stateless(cfg.network.name)
    num_updates = a.total_timesteps // (a.num_envs * s.rollout_length)
    updates_per_chunk = max(1, num_updates // a.num_evaluations)
    return PPOConfig(
        num_envs=a.num_envs,
        rollout_length=s.rollout_length,
        epochs=s.epochs,
        num_minibatches=s.num_minibatches,
        bptt_length=s.bptt_length,
        gamma=float(s.gamma),
        gae_lambda=float(s.gae_lambda),
        clip_eps=float(s.clip_eps),
        value_clip_eps=float(s.value_clip_eps),
        vf_coef=float(s.vf_coef),
        ent_coef=float(s.ent_coef),
        lr=float(s.lr),
        anneal_lr=bool(s.anneal_lr),
        max_grad_norm=float(s.max_grad_norm),
        adam_eps=float(s.adam_eps),
        normalize_advantages=bool(s.normalize_advantages),
        num_updates=updates_per_chunk * a.num_evaluations,
        updates_per_chunk=updates_per_chunk,
        burn_in=0 if transitions else int(s.get("burn_in", 0) or 0),
        transitions=transitions,
    )
