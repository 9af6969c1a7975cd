"""The config of ``resume=<run dir>``: the run's saved config with the command line's overrides.

The entry point reads it (:func:`resume_config`) before it parses the config once; the resumed
run's directory, checkpoint and config match are checked by :mod:`stoixlite.run.resume`.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from stoixlite.config.parse import load_run_config
from stoixlite.config.strict import ConfigError
from stoixlite.tracking.files import CONFIG_FILE


def resume_config(composed: DictConfig, run_dir: Path, overrides: list[str]) -> DictConfig:
    """The config of ``resume=<run_dir>``: the run's saved ``config.yaml`` with the values of
    the other command-line ``overrides`` taken from the ``composed`` config (a group override
    such as ``network=lstm`` replaces the whole group)."""
    path = Path(run_dir) / CONFIG_FILE
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"resume={run_dir}: no such directory")
    if not path.exists():
        raise FileNotFoundError(f"resume={run_dir}: no config.yaml there (not a run directory)")
    cfg = load_run_config(path)
    missing = object()
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "resume" or key.startswith("hydra"):
            continue
        value = OmegaConf.select(composed, key, default=missing)
        if value is missing:  # a group of global keys, e.g. +protocol=popgym: not one key
            raise ConfigError(
                [
                    f"{override} is invalid with resume: it sets keys of several groups; "
                    "a resumed run keeps its saved config (start a new run instead)"
                ]
            )
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    cfg.resume = str(run_dir)
    return cfg
