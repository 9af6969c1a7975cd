"""Metric names and the reduction of a chunk's device metrics to one record (and one per seed).

Stable metric names (documented in README):

* ``train/episode_return``, ``train/episode_length``: mean over episodes finished during the chunk
* ``train/episodes``: number of episodes finished in the chunk
* ``train/episode_return_best_update``: the highest mean return of the episodes finished in one
  update of the chunk (updates in which no episode finished are skipped; NaN when none did).
  Its maximum over a run is the per-update MMER (max mean episodic return)
* ``train/episode_return_last100``: RLlib's ``episode_reward_mean``, the mean return of the 100
  most recent finished training episodes at the end of the chunk (NaN until one finished;
  :mod:`stoixlite.ppo.episode_window`)
* ``train/episode_return_last100_best_read``: the highest ``train/episode_return_last100`` read
  at the end of a 65,536-step training iteration within the chunk (NaN when the chunk holds no
  reading point). Its maximum over a run is the POPGym paper's MMER, measured its way
* ``train/invalid_actions``: fraction of rollout steps whose action was invalid (docs/envs.md)
* ``train/env/<name>``: the env's own episode statistics (``extras["episode_metrics"]``, e.g.
  Craftax's ``train/env/achievements`` and ``train/env/achievement/<name>``), mean over the
  episodes finished during the chunk, like the return
* ``train/sps``: environment steps per second of the chunk (host wall-clock, excludes evaluation)
* ``train/explained_variance``
* ``loss/total``, ``loss/policy``, ``loss/value``, ``loss/entropy``, ``loss/approx_kl``,
  ``loss/clip_fraction``, ``loss/first_ratio_max_dev`` (rollout/replay identity, ~0; with
  ``arch.host_overlap``, how far one update moved the policy)
* ``eval/episode_return``, ``eval/episode_return_std``, ``eval/episode_length``
* ``time/elapsed_s``; every record also has ``step`` (env steps so far) and ``update``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from stoixlite.metric_keys import (
    ENV_METRIC_PREFIX,
    LAST100_COUNT_KEY,
    LAST100_KEY,
    LAST100_READS_KEY,
)

_SUM_KEYS = ("train/episodes",)
# Returns whose spread over seeds is logged as ``<key>_seed_std`` when several seeds train together.
SEED_STD_KEYS = ("eval/episode_return", "train/episode_return")
_WEIGHTED_KEYS = ("train/episode_return", "train/episode_length")
BEST_UPDATE_KEY = "train/episode_return_best_update"
# The highest window mean read at a 65,536-step iteration's end within the chunk (from the
# learner's window keys, stoixlite.metric_keys).
LAST100_READ_KEY = "train/episode_return_last100_best_read"


def _per_episode(key: str) -> bool:
    """The metric is a mean over the episodes finished in an update."""
    return key in _WEIGHTED_KEYS or key.startswith(ENV_METRIC_PREFIX)


def summarize_chunk(stacked: dict[str, Any]) -> dict[str, float]:
    """Reduce per-update metrics ``[U]`` of one learn chunk to floats.

    Episode statistics (return, length, ``train/env/*``) are weighted by the number of episodes
    finished in each update (NaN when none finished); counts are summed; everything else is
    averaged. ``train/episode_return`` also gives ``train/episode_return_best_update``, the
    maximum of its per-update values over the updates in which an episode finished; the episode
    window's per-update values give :data:`LAST100_KEY` and :data:`LAST100_READ_KEY`.
    """
    host = {k: np.asarray(v, dtype=np.float64) for k, v in stacked.items()}
    out: dict[str, float] = {}
    if LAST100_KEY in host:
        out.update(
            _last100(
                host.pop(LAST100_KEY), host.pop(LAST100_COUNT_KEY), host.pop(LAST100_READS_KEY)
            )
        )
    episodes = host.get("train/episodes")
    for key, value in host.items():
        if key in _SUM_KEYS:
            out[key] = float(value.sum())
        elif _per_episode(key) and episodes is not None:
            total = episodes.sum()
            out[key] = float((value * episodes).sum() / total) if total > 0 else math.nan
            if key == "train/episode_return":
                finished = value[episodes > 0]
                out[BEST_UPDATE_KEY] = float(finished.max()) if finished.size else math.nan
        elif key == "loss/first_ratio_max_dev":
            out[key] = float(value.max())
        else:
            out[key] = float(value.mean())
    return out


def _last100(mean: np.ndarray, count: np.ndarray, reads: np.ndarray) -> dict[str, float]:
    """:data:`LAST100_KEY` at the chunk's end and :data:`LAST100_READ_KEY` from the per-update
    window means ``[U]``, the episodes they held ``[U]`` and the reading flags ``[U]``."""
    held = count > 0
    read = mean[held & (reads > 0)]
    return {
        LAST100_KEY: float(mean[-1]) if held[-1] else math.nan,
        LAST100_READ_KEY: float(read.max()) if read.size else math.nan,
    }


def summarize_eval(result: dict[str, Any]) -> dict[str, float]:
    """Mean/std of the per-env eval episode returns and lengths."""
    returns = np.asarray(result["return"], dtype=np.float64)
    lengths = np.asarray(result["length"], dtype=np.float64)
    return {
        "eval/episode_return": float(returns.mean()),
        "eval/episode_return_std": float(returns.std()),
        "eval/episode_length": float(lengths.mean()),
    }


def _nan_stat(values: list[float], fn: Callable[[np.ndarray], float]) -> float:
    arr = np.asarray(values, np.float64)
    arr = arr[np.isfinite(arr)]
    return float(fn(arr)) if arr.size else math.nan


def summarize(
    chunk_metrics: dict[str, Any], eval_result: dict[str, Any], seeds: int
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """``(record, per_seed_records)`` of one chunk: the metrics of every seed (arrays with a
    leading ``[S]`` axis when ``seeds > 1``) and their mean over seeds, plus ``*_seed_std`` of
    :data:`SEED_STD_KEYS`. With one seed the record is the seed's and ``per_seed`` is empty."""
    if seeds == 1:
        return {**summarize_chunk(chunk_metrics), **summarize_eval(eval_result)}, []
    per_seed = [
        {
            **summarize_chunk(jax.tree.map(lambda x, k=k: x[k], chunk_metrics)),
            **summarize_eval(jax.tree.map(lambda x, k=k: x[k], eval_result)),
        }
        for k in range(seeds)
    ]
    record = {key: _nan_stat([r[key] for r in per_seed], np.mean) for key in per_seed[0]}
    for key in SEED_STD_KEYS:
        record[f"{key}_seed_std"] = _nan_stat([r[key] for r in per_seed], np.std)
    return record, per_seed
