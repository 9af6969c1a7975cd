"""Reading finished run directories: per-seed records, curves and the per-seed scores of a run.

A run directory holds ``config.yaml`` and ``metrics.jsonl`` (one record per learn chunk), plus
``metrics_per_seed.jsonl`` (records with a ``seed`` key) when ``arch.num_seeds > 1``. The scores
of one seed (:class:`SeedScores`):

* ``mmer``: the POPGym paper's *max mean episodic return*, the maximum over training of the mean
  return of the training episodes finished in one update (sampled actions), i.e. the maximum of
  ``train/episode_return_best_update`` over the run's records (NaN for runs logged before that
  metric existed);
* ``final_eval`` / ``best_eval``: the last and the best ``eval/episode_return`` (the evaluation's
  mean over its eval envs, greedy or sampled as the run was configured);
* ``steps``: env steps of the last record.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from stoixlite.tracking.jsonl import read_jsonl as _read_jsonl
from stoixlite.tracking.metrics import BEST_UPDATE_KEY

METRICS = "metrics.jsonl"
PER_SEED = "metrics_per_seed.jsonl"
EVAL_KEY = "eval/episode_return"


class RunReadError(ValueError):
    """A run's file cannot be read (one line naming the file)."""


def read_jsonl(path: Path) -> list[dict]:
    """The records of a metrics file; :class:`RunReadError` naming it when it is unreadable."""
    try:
        return _read_jsonl(path)
    except (OSError, ValueError) as err:
        raise RunReadError(f"{path} is unreadable: {str(err).splitlines()[0]}") from None


def run_dirs(root: Path) -> list[Path]:
    """Every run below ``root``: a directory with a ``metrics.jsonl`` and a ``config.yaml``."""
    found = (path.parent for path in sorted(root.rglob(METRICS)))
    return [run_dir for run_dir in found if (run_dir / "config.yaml").exists()]


def seed_records(run_dir: Path) -> list[list[dict]]:
    """The records of each seed of a run, in seed order (one list for a one-seed run)."""
    per_seed = run_dir / PER_SEED
    if per_seed.exists():
        by_seed: dict[int, list[dict]] = defaultdict(list)
        for record in read_jsonl(per_seed):
            by_seed[int(record["seed"])].append(record)
        return [records for _, records in sorted(by_seed.items())]
    records = read_jsonl(run_dir / METRICS)
    return [records] if records else []


def seeds_of(run_dir: Path) -> list[int]:
    """The seeds a run trained (``arch.seed`` .. ``arch.seed + arch.num_seeds - 1``; from 0 for
    a config without an ``arch`` section)."""
    arch = run_config(run_dir).get("arch") or {}
    first = int(arch.get("seed", 0) or 0)
    return list(range(first, first + int(arch.get("num_seeds", 1) or 1)))


def run_config(run_dir: Path):
    """The run's saved ``config.yaml`` (an OmegaConf node)."""
    path = run_dir / "config.yaml"
    try:
        return OmegaConf.load(path)
    except Exception as err:  # YAML syntax, binary garbage
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RunReadError(f"{path} is not a readable run config: {reason}") from None


Curve = tuple[np.ndarray, np.ndarray]  # steps [K], values [K] (NaN where missing)


def curve(records: list[dict], metric: str) -> Curve:
    """``(steps, values)`` of one metric over a seed's records (NaN where a record lacks it)."""
    steps = np.asarray([r["step"] for r in records], np.float64)
    values = np.asarray(
        [math.nan if r.get(metric) is None else r[metric] for r in records], np.float64
    )
    return steps, values


def _max(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else math.nan


def _last(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values[-1]) if values.size else math.nan


@dataclass(frozen=True)
class SeedScores:
    """The scores of one seed of a run (see the module docstring)."""

    seed: int
    mmer: float
    final_eval: float
    best_eval: float
    steps: int


def seed_scores(run_dir: Path) -> list[SeedScores]:
    """The scores of every seed of a run directory."""
    seeds = seeds_of(run_dir)
    scores = []
    for k, records in enumerate(seed_records(run_dir)):
        steps, evals = curve(records, EVAL_KEY)
        _, best_update = curve(records, BEST_UPDATE_KEY)
        fallback = seeds[k] if k < len(seeds) else k
        seed = int(records[0].get("seed", fallback)) if records else fallback
        scores.append(
            SeedScores(
                seed=seed,
                mmer=_max(best_update),
                final_eval=_last(evals),
                best_eval=_max(evals),
                steps=int(steps[-1]) if steps.size else 0,
            )
        )
    return scores


def run_wall_time(run_dir: Path) -> float:
    """Wall seconds of a run (compile included): ``time/elapsed_s`` of its last record."""
    records = read_jsonl(run_dir / METRICS)
    return float(records[-1].get("time/elapsed_s") or math.nan) if records else math.nan
