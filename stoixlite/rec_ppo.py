"""Recurrent PPO entry point: ``python -m stoixlite.rec_ppo [overrides]``.

Composes the Hydra config (:data:`CONFIG_DIR`: shipped inside the package by a wheel, the
repository's ``configs/`` otherwise, so it works from any working directory), parses it into the
typed :class:`~stoixlite.run.config.RunConfig` (every mistake one line on stderr, exit code 2,
before anything compiles), then runs the host loop of :mod:`stoixlite.run.loop`: compiled learn
chunks, evaluation between chunks, JSON-lines metrics, W&B (``logger=wandb``), checkpoints,
progress bar, learning-curve plot. Returns the final mean evaluation return (what Hydra
sweepers optimise).

``resume=<run dir>`` continues an interrupted run in its own directory from its latest
checkpoint, with the config saved there (command-line overrides given with ``resume`` are
applied on top; a different network or env config is refused). In a multirun (``-m``) a failing
job writes its traceback to ``<job dir>/error.txt``, returns NaN (a failed trial for Optuna) and
the sweep goes on.
"""

from __future__ import annotations

import logging
import math
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from stoixlite.run.config import ConfigError, RunConfig, parse, parse_distributed

# The Hydra configs: inside the package in a wheel (copied by setup.py), else the repository's
# top-level configs/ (source tree, editable install).
_PACKAGED_CONFIGS = Path(__file__).resolve().parent / "configs"
CONFIG_DIR = (
    _PACKAGED_CONFIGS
    if _PACKAGED_CONFIGS.is_dir()
    else Path(__file__).resolve().parent.parent / "configs"
)
# `${slug:env.name}` in run directory names: "popgym/repeat_previous" -> "popgym-repeat_previous".
if not OmegaConf.has_resolver("slug"):
    OmegaConf.register_new_resolver("slug", lambda value: str(value).replace("/", "-"))

log = logging.getLogger("stoixlite")


def train(cfg: RunConfig | DictConfig, run_dir: Path, resume: bool = False) -> float:
    """Train one agent as configured, writing outputs to ``run_dir``; returns the final eval
    return (see :func:`stoixlite.run.loop.train`)."""
    from stoixlite.run.loop import train as run

    return run(cfg, run_dir, resume=resume)


def _job_failed(run_dir: Path, message: str) -> float:
    """Record a failed multirun job and let the sweep continue."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "error.txt").write_text(message)
    log.error(
        "job failed (details in %s): %s", run_dir / "error.txt", message.strip().splitlines()[-1]
    )
    return math.nan


@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    from stoixlite.run.distributed import DistributedError, initialize
    from stoixlite.run.resume import resume_config
    from stoixlite.tracking.checkpointing import CheckpointMismatchError

    logging.getLogger("jax").setLevel(logging.WARNING)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax is chatty at INFO
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        resume = OmegaConf.select(cfg, "resume", default=None)
        if resume:
            run_dir = Path(str(resume)).expanduser().resolve()
            cfg = resume_config(cfg, run_dir, list(hydra_cfg.overrides.task))
        initialize(parse_distributed(cfg))  # before parse: the registries start JAX
        return train(parse(cfg), run_dir, resume=bool(resume))
    except (ConfigError, CheckpointMismatchError, DistributedError, FileNotFoundError) as err:
        if multirun:
            return _job_failed(run_dir, f"{type(err).__name__}: {err}\n")
        kind = "config error" if isinstance(err, ConfigError) else "error"
        for line in str(err).splitlines():
            print(f"{kind}: {line}", file=sys.stderr)
        sys.exit(2)
    except Exception:
        if not multirun:
            raise
        return _job_failed(run_dir, traceback.format_exc())


if __name__ == "__main__":
    main()
