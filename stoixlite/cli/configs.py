"""Hydra's side of the command line: where the configs are, their resolvers, how a composed
config is read, the running sweep.

* :data:`CONFIG_DIR`: the Hydra configs, inside the package in a wheel (``setup.py`` copies
  them there), else the repository's top-level ``configs/`` (source tree, editable install), so
  ``python -m stoixlite.rec_ppo`` works from any directory.
* The ``slug`` resolver of run directory names (``${slug:env.name}``: ``popgym/repeat_previous``
  -> ``popgym-repeat_previous``), registered when this module is imported: every process that
  composes the configs (the entry point, a launcher's job, the tests) imports it first.
* :func:`read_config`: the one reading of a composed config by the entry points and the scripts
  (:func:`stoixlite.config.parse.parse`, after the processes of a multi-process run joined).
* :func:`sweep_name`: the W&B group of a multirun job, its sweep directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from stoixlite.config.schema import RunConfig

_PACKAGE = Path(__file__).resolve().parents[1]
_PACKAGED_CONFIGS = _PACKAGE / "configs"
CONFIG_DIR = _PACKAGED_CONFIGS if _PACKAGED_CONFIGS.is_dir() else _PACKAGE.parent / "configs"

if not OmegaConf.has_resolver("slug"):
    OmegaConf.register_new_resolver("slug", lambda value: str(value).replace("/", "-"))


def read_config(cfg: DictConfig, join_processes: bool = True) -> RunConfig:
    """The composed config, read once: parsed and checked (every mistake one line of one
    :class:`~stoixlite.config.strict.ConfigError`). With ``join_processes`` the processes of a
    multi-process run join first, from the ``distributed`` group alone (the registries that the
    parse consults start JAX); the trainer's entry point joins them, the scripts and the
    command line's early check (one process, nothing to join) do not."""
    from stoixlite.config.parse import parse, parse_distributed

    if join_processes:
        from stoixlite.run.distributed import initialize

        initialize(parse_distributed(cfg))
    return parse(cfg)


def sweep_name() -> str | None:
    """The sweep of this job: the last parts of the Hydra sweep directory in a multirun (e.g.
    ``multirun-2025-01-01-12-00-00``, the same for every job of one ``-m`` sweep), else
    ``None``."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
    except (ImportError, ValueError):
        return None
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    parts = Path(str(hydra_cfg.sweep.dir)).parts[-3:]
    return "-".join(p for p in parts if p not in ("", ".", "/"))
