"""Hydra's side of the command line: where the configs are, their resolvers, the running sweep.

* :data:`CONFIG_DIR`: the Hydra configs, inside the package in a wheel (``setup.py`` copies
  them there), else the repository's top-level ``configs/`` (source tree, editable install), so
  ``python -m stoixlite.rec_ppo`` works from any directory.
* The ``slug`` resolver of run directory names (``${slug:env.name}``: ``popgym/repeat_previous``
  -> ``popgym-repeat_previous``), registered when this module is imported: every process that
  composes the configs (the entry point, a launcher's job, the tests) imports it first.
* :func:`sweep_name`: the W&B group of a multirun job, its sweep directory.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

_PACKAGE = Path(__file__).resolve().parents[1]
_PACKAGED_CONFIGS = _PACKAGE / "configs"
CONFIG_DIR = _PACKAGED_CONFIGS if _PACKAGED_CONFIGS.is_dir() else _PACKAGE.parent / "configs"

if not OmegaConf.has_resolver("slug"):
    OmegaConf.register_new_resolver("slug", lambda value: str(value).replace("/", "-"))


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
