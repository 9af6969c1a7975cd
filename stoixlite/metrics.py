"""Metric names, chunk summaries and the JSON-lines metrics writer.

Stable metric names (documented in README):

* ``train/episode_return``, ``train/episode_length``: mean over episodes finished during the chunk
* ``train/episodes``: number of episodes finished in the chunk
* ``train/invalid_actions``: fraction of rollout steps whose action was invalid (docs/envs.md)
* ``train/sps``: environment steps per second of the chunk (host wall-clock, excludes evaluation)
* ``train/explained_variance``
* ``loss/total``, ``loss/policy``, ``loss/value``, ``loss/entropy``, ``loss/approx_kl``,
  ``loss/clip_fraction``, ``loss/first_ratio_max_dev`` (rollout/replay identity, ~0)
* ``eval/episode_return``, ``eval/episode_return_std``, ``eval/episode_length``
* ``time/elapsed_s``; every record also has ``step`` (env steps so far) and ``update``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

_SUM_KEYS = ("train/episodes",)
_WEIGHTED_KEYS = ("train/episode_return", "train/episode_length")


def summarize_chunk(stacked: dict[str, Any]) -> dict[str, float]:
    """Reduce per-update metrics ``[U]`` of one learn chunk to floats.

    Episode statistics are weighted by the number of episodes finished in each update (NaN when
    none finished); counts are summed; everything else is averaged.
    """
    host = {k: np.asarray(v, dtype=np.float64) for k, v in stacked.items()}
    out: dict[str, float] = {}
    episodes = host.get("train/episodes")
    for key, value in host.items():
        if key in _SUM_KEYS:
            out[key] = float(value.sum())
        elif key in _WEIGHTED_KEYS and episodes is not None:
            total = episodes.sum()
            out[key] = float((value * episodes).sum() / total) if total > 0 else math.nan
        elif key == "loss/first_ratio_max_dev":
            out[key] = float(value.max())
        else:
            out[key] = float(value.mean())
    return out


def summarize_eval(result: dict[str, Any]) -> dict[str, float]:
    """Mean/std of the per-env eval episode returns and lengths."""
    returns = np.asarray(result["return"], dtype=np.float64)
    lengths = np.asarray(result["length"], dtype=np.float64)
    return {
        "eval/episode_return": float(returns.mean()),
        "eval/episode_return_std": float(returns.std()),
        "eval/episode_length": float(lengths.mean()),
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlWriter:
    """Appends one JSON object per line to ``path`` (flushed after every record)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of a JSON-lines metrics file (``None`` for non-finite values)."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
