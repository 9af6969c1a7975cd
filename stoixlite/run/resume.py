"""Resuming and loading runs: the config of ``resume=<run dir>``, the host-loop state saved with
every checkpoint, and :func:`restore`, the one way a checkpoint comes back (the trainer resuming
and the evaluator loading a run both use it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
from omegaconf import DictConfig, OmegaConf

from stoixlite.run.build import Run, build_run
from stoixlite.run.config import ConfigError, parse
from stoixlite.tracking.checkpointing import Checkpointer, checkpoint_dir, config_fingerprint

CONFIG_FILE = "config.yaml"


@dataclass
class HostState:
    """Host-loop state saved with every checkpoint."""

    chunk: int = 0  # chunks completed
    logger_step: int = 0  # records written to metrics.jsonl
    best_eval_return: float | None = None
    elapsed_s: float = 0.0  # training wall-clock before this process (for time/elapsed_s)


def checkpoint_tree(state: Any, key: jax.Array) -> dict[str, Any]:
    """What a checkpoint's ``state`` item holds: the learner state and the host PRNG key."""
    return {"learner": state, "host_key": key}


def restore(
    run: Run, ckpt: Checkpointer, step: int | str | None = None
) -> tuple[Any, jax.Array, HostState, int]:
    """``(learner state, host key, host state, step)`` of checkpoint ``step`` (latest by
    default, or ``"best"``), restored into the structure of ``run``'s initial state."""
    tree, host, step = ckpt.restore(checkpoint_tree(*run.init()), step)
    return tree["learner"], tree["host_key"], HostState(**host), step


def resume_config(composed: DictConfig, run_dir: Path, overrides: list[str]) -> DictConfig:
    """The config of ``resume=<run_dir>``: the run's saved ``config.yaml`` with the values of
    the other command-line ``overrides`` taken from the ``composed`` config (a group override
    such as ``network=lstm`` replaces the whole group)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"resume={run_dir}: no config.yaml there (not a run directory)")
    cfg = OmegaConf.load(path)
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


def load_run(run_dir: str | Path, checkpoint: str | int = "latest") -> tuple[Run, Any, int]:
    """``(run, learner state, step)`` of a run directory's checkpoint (``latest``, ``best`` or a
    step): its saved config parsed and built like the trainer does, the state restored."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} not found: is {run_dir} a stoixlite run directory?")
    run = build_run(parse(OmegaConf.load(config_path)))
    fingerprint = config_fingerprint(run.config)
    with Checkpointer(checkpoint_dir(run_dir), fingerprint, read_only=True) as ckpt:
        step = checkpoint if checkpoint in ("latest", "best") else int(checkpoint)
        state, _, _, step = restore(run, ckpt, step)
    return run, state, step
