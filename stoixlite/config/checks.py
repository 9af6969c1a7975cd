"""The config's checks beyond single fields: the memory model's keyword arguments, the env's
registration and factory, the encoder against the env's observation, the budget and the device
split.

Each check asks the owner of what it checks (the memory registry and its shared field bounds,
:mod:`stoixlite.networks.memory.rules`; the env registry and the env's factory; the
actor-critic's set pooling) and adds one line per mistake to an :class:`~stoixlite.config.strict.
Errors`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stoixlite.config.schema import (
    ACTOR_CRITIC_KEYS,
    EnvConfig,
    NetworkConfig,
    RunConfig,
)
from stoixlite.config.strict import (
    ConfigError,
    Errors,
    field_value,
    nearest,
    report_unknown,
    section,
)
from stoixlite.rules import INT_LIMIT


def memory_section(errors: Errors, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The memory model's keyword arguments, typed by its dataclass fields."""
    from stoixlite.networks.memory import memory_class, memory_config_errors, memory_fields
    from stoixlite.networks.memory.rules import FIELD_RANGES, FIELD_RULES

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
        out[key] = field_value(
            errors, f"network.{key}", hints.get(key, Any), value, FIELD_RULES.get(key)
        )
    if len(errors) == before:
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for low, high in FIELD_RANGES:
            if low in accepted and high in accepted:
                lo, hi = out.get(low, defaults[low]), out.get(high, defaults[high])
                if lo > hi:
                    errors.add(f"network.{low}", lo, f"must be <= network.{high}={hi!r}")
    if len(errors) == before:
        for key, value, allowed in memory_config_errors(name, out):
            errors.add(f"network.{key}", value, allowed)
    return out


def network_section(errors: Errors, given: Any) -> NetworkConfig | None:
    from stoixlite.networks.memory import available_memories

    if not isinstance(given, Mapping):
        errors.add("network", given, "config group is missing")
        return None
    own = {k: v for k, v in given.items() if k in ACTOR_CRITIC_KEYS}
    net = section(errors, NetworkConfig, own, "network.", skip=("memory",))
    if net is None or net.name not in available_memories():
        return None
    memory = memory_section(errors, net.name, {k: v for k, v in given.items() if k not in own})
    return dataclasses.replace(net, memory=memory)


def check_env(errors: Errors, env: EnvConfig) -> EnvConfig:
    """Checks of the env against its registration; returns it with ``kwargs`` typed by the
    factory's signature. A factory that takes ``**kwargs`` (the gymnax-style adapters: fields of
    the env's parameters) gets the other keys untyped and refuses the unknown ones itself."""
    from stoixlite.envs.host import is_host_env
    from stoixlite.envs.registry import env_spec, missing_modules

    if is_host_env(env.name):
        return check_host_env(errors, env)
    if env.vector != "sync":
        errors.add(
            "env.vector",
            env.vector,
            f"{env.name} is a JAX env (sync only; async is for "
            "host envs: gymnasium/<id>, popgym_ref/<name>)",
        )
    spec = env_spec(env.name)
    missing = missing_modules(env.name)
    if missing:
        names = ", ".join(missing)
        errors.add(
            "env.name",
            env.name,
            f"needs {names}, which is not installed ({spec.install_command})",
        )
        return env
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
    params, open_kwargs = _factory_params(spec.factory) if env.kwargs else ({}, False)
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
        if key in params:
            kwargs[key] = field_value(errors, f"env.kwargs.{key}", params[key], value, None)
        elif open_kwargs:
            kwargs[key] = value
        else:
            report_unknown(errors, "env.kwargs.", str(key), value, list(params))
    env = dataclasses.replace(env, kwargs=kwargs)
    if kwargs and not errors:  # values the factory itself refuses (building an env is cheap)
        from stoixlite.envs.registry import make

        try:
            make(env.name, **env.factory_kwargs)
        except (ValueError, TypeError) as err:
            given = " ".join(f"env.kwargs.{k}={v!r}" for k, v in kwargs.items())
            errors.append(f"{given} is invalid: {env.name} refuses it ({err})")
    return env


def check_host_env(errors: Errors, env: EnvConfig) -> EnvConfig:
    """A host env (:mod:`stoixlite.envs.host`): its id or name, difficulty, ``kwargs`` and
    spaces, by making one env (:func:`~stoixlite.envs.host.sources.host_source`)."""
    from stoixlite.envs.host.sources import HostEnvError, host_source

    if env.obs_prev_reward and not env.obs_augment:
        errors.add("env.obs_prev_reward", True, "requires env.obs_augment=true")
    try:
        host_source(env.name, env.difficulty, dict(env.kwargs))
    except HostEnvError as err:
        errors.append(str(err))
    return env


def check_host_run(errors: Errors, run: RunConfig) -> None:
    """What the host envs' run does not do: several seeds in one run, several devices; and
    ``arch.host_overlap``, which only host envs have (a JAX env acts inside the compiled learn
    chunk)."""
    from stoixlite.envs.host import is_host_env

    if not is_host_env(run.env.name):
        if run.arch.host_overlap:
            errors.add(
                "arch.host_overlap",
                True,
                f"{run.env.name} is a JAX env: it acts inside the compiled learn chunk, so there "
                "is nothing to overlap (host envs only: gymnasium/<id>, popgym_ref/<name>)",
            )
        return
    if run.arch.num_seeds != 1:
        errors.add(
            "arch.num_seeds",
            run.arch.num_seeds,
            "host envs train one seed per run (a multirun over arch.seed trains several)",
        )
    if run.arch.num_devices not in (None, 1):
        errors.add("arch.num_devices", run.arch.num_devices, "host envs train on one device")
    if run.arch.scale_to_envs is not None:
        errors.add(
            "arch.scale_to_envs",
            run.arch.scale_to_envs,
            "host envs step on the CPU, one process or worker each: size them with arch.num_envs",
        )


def _factory_params(factory: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    """``({parameter: annotation}, open)`` of an env factory (a function, class or partial): its
    named parameters other than ``difficulty`` (``Any`` where unannotated), and whether it also
    takes ``**kwargs``."""
    target = factory.func if isinstance(factory, functools.partial) else factory
    target = target.__init__ if inspect.isclass(target) else target
    try:
        hints = typing.get_type_hints(target)
    except (NameError, TypeError):  # unresolvable annotations: untyped
        hints = {}
    parameters = inspect.signature(factory).parameters.values()
    named = {
        p.name: hints.get(p.name, Any)
        for p in parameters
        if p.name not in ("difficulty", "self")
        and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }
    return named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def env_specs(env_cfg: EnvConfig) -> Any:
    """An env with the specs of ``env_cfg`` (the raw env; a host env's specs)."""
    from stoixlite.envs.host import is_host_env
    from stoixlite.envs.registry import make

    if is_host_env(env_cfg.name):
        from stoixlite.envs.host.sources import host_source
        from stoixlite.envs.host.vector import HostSpecs

        return HostSpecs(host_source(env_cfg.name, env_cfg.difficulty, dict(env_cfg.kwargs)))
    return make(env_cfg.name, **env_cfg.factory_kwargs)


def check_encoder(errors: Errors, run: RunConfig) -> None:
    """The encoder against the env's observation: the set encoder needs an env with a set
    observation (``set_layout``) and its attention pooling ``embed_size`` divisible by the
    pooling heads; the cnn encoder needs image observations ``[H, W, C]``
    (:func:`stoixlite.specs.image_shape`) that its convolutions fit
    (:func:`stoixlite.networks.cnn.conv_layout_error`); and the observation augmentation, which
    appends to a flat vector, cannot apply to images."""
    from stoixlite.networks.actor_critic import SET_POOLING_HEADS
    from stoixlite.networks.cnn import conv_layout_error
    from stoixlite.specs import image_shape

    net, env_cfg = run.network, run.env
    env = env_specs(env_cfg)
    image = image_shape(env.observation_space)
    if image is not None and env_cfg.obs_augment:
        errors.add(
            "env.obs_augment",
            True,
            f"env {env_cfg.name} has image observations {list(image)} and the augmentation "
            "appends to a flat vector (use false)",
        )
    if net.encoder == "cnn":
        if image is None:
            shape = list(env.observation_space.shape)
            errors.add(
                "network.encoder",
                net.encoder,
                f"env {env_cfg.name} has no image observation (its observation is {shape}; cnn "
                "reads [height, width, channels]: use mlp, or an image env: pixel/colour_cue)",
            )
        elif found := conv_layout_error(image, net.cnn_channels, net.cnn_kernels, net.cnn_strides):
            key, allowed = found
            errors.add(f"network.{key}", list(getattr(net, key)), allowed)
    if net.encoder != "set":
        return
    if getattr(env, "set_layout", None) is None:
        errors.add(
            "network.encoder",
            net.encoder,
            f"env {env_cfg.name} has no set observation (use mlp, or a set env: sets/card_table)",
        )
    if net.set_pooling == "attention" and net.embed_size % SET_POOLING_HEADS:
        errors.add(
            "network.set_pooling",
            net.set_pooling,
            f"attention pooling needs network.embed_size divisible by {SET_POOLING_HEADS}, "
            f"got {net.embed_size}",
        )


def check_budget(errors: Errors, run: RunConfig) -> None:
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
    optimiser_steps = (
        max(arch.total_timesteps // run.steps_per_update, 1)
        * system.epochs
        * system.num_minibatches
    )
    if optimiser_steps > INT_LIMIT:
        errors.add(
            "system.epochs",
            system.epochs,
            f"the run's optimiser steps (updates x system.epochs x system.num_minibatches = "
            f"{optimiser_steps}) must stay <= {INT_LIMIT} (the optimiser counts them in int32)",
        )
    if arch.num_devices is not None and not errors:
        device_split_errors(errors, run, arch.num_devices)


def device_split_errors(errors: Errors, run: RunConfig, num_devices: int) -> None:
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


def check_device_split(run: RunConfig, num_devices: int) -> None:
    """One-line :class:`ConfigError` unless the envs and every minibatch's sequences split
    evenly over ``num_devices`` devices (all processes together)."""
    errors = Errors()
    device_split_errors(errors, run, num_devices)
    if errors:
        raise ConfigError(errors)


def wandb_dir_error(run: RunConfig) -> str | None:
    """One line when ``logger.wandb.dir`` cannot be created or written (W&B would fail only
    after its start-up, naming no key); checked by the trainer before anything is built. What
    this check creates it removes again."""
    wandb = run.logger.wandb
    if wandb is None or not wandb.dir:
        return None
    path = Path(wandb.dir).expanduser().absolute()
    created = [q for q in (path, *path.parents) if not q.exists()]
    probe = path / f".write-test-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as err:
        return f"logger.wandb.dir={wandb.dir} is invalid: cannot write it ({err.strerror or err})"
    finally:
        for directory in created:
            try:
                directory.rmdir()
            except OSError:
                break
    return None
