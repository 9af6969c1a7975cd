"""The one reading of a composed config: :func:`parse` turns it into the typed, checked
:class:`~stoixlite.config.schema.RunConfig`, at the entry point, before anything compiles.

The strict rules of :mod:`stoixlite.config.strict` apply to every group of the schema, a run sized
for an accelerator is scaled (:mod:`stoixlite.config.scale`), then the checks of
:mod:`stoixlite.config.checks` (the memory model's and the env's own keys, the budget,
the device split); every mistake is one line of one :class:`~stoixlite.config.strict.ConfigError`.
:func:`parse_distributed` reads the ``distributed`` group alone, which must be known before JAX
starts; :func:`load_run_config` reads a run directory's saved ``config.yaml`` (for resuming).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from stoixlite.config.checks import (
    check_budget,
    check_encoder,
    check_env,
    check_host_run,
    network_section,
)
from stoixlite.config.scale import scaled
from stoixlite.config.schema import (
    ArchConfig,
    CheckpointConfig,
    DistributedConfig,
    EnvConfig,
    LoggerConfig,
    RunConfig,
    SystemConfig,
)
from stoixlite.config.strict import ConfigError, Errors, report_unknown, section

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
    errors = Errors()
    parsed = section(errors, DistributedConfig, given["distributed"], "distributed.")
    if errors:
        raise ConfigError(errors)
    return parsed


def parse(cfg: DictConfig | Mapping[str, Any]) -> RunConfig:
    """The typed, checked :class:`RunConfig` of a composed config. Raises :class:`ConfigError`
    listing every mistake, one line each."""
    given = resolved(cfg) if isinstance(cfg, DictConfig) else cfg
    errors = Errors()
    top = [f.name for f in dataclasses.fields(RunConfig)]
    for key in given:
        if key not in top:
            report_unknown(errors, "", str(key), given[key], top)
    parts: dict[str, Any] = {}
    for key, cls in _GROUPS.items():
        if key in _OPTIONAL_GROUPS and given.get(key) is None:
            continue
        parts[key] = section(errors, cls, given.get(key), f"{key}.")
    parts["network"] = network_section(errors, given.get("network"))
    resume = given.get("resume")
    parts["resume"] = None if resume is None else str(resume)
    if parts["env"] is not None:
        parts["env"] = check_env(errors, parts["env"])
    if parts["arch"] is not None:  # arch.scale_to_envs: the run sized for an accelerator
        parts["arch"] = scaled(parts["arch"])
    if errors:
        raise ConfigError(errors)
    run = RunConfig(**parts)
    check_budget(errors, run)
    check_encoder(errors, run)
    check_host_run(errors, run)
    if errors:
        raise ConfigError(errors)
    return run


def load_run_config(path: Path) -> DictConfig:
    """A run directory's saved ``config.yaml``; :class:`ConfigError` (one line) if unreadable."""
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # YAML syntax, binary garbage, permissions
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError([f"{path} is unreadable: {first}"]) from None
    if not isinstance(cfg, DictConfig) or "env" not in cfg or "network" not in cfg:
        raise ConfigError([f"{path} is not a stoixlite run config (no env or network section)"])
    return cfg
