"""Learning-curve plots from JSON-lines metrics (matplotlib, Agg backend, no display needed).

Importing this module silences the loggers of matplotlib and Pillow (:data:`QUIET_LOGGERS`):
under Hydra's logging setup their info and debug lines (font cache, font matching, PNG chunks)
would otherwise leak into a run's output. Their errors still show.
"""

from __future__ import annotations

import logging
from pathlib import Path

# Before matplotlib is imported: its font cache warning is logged at import time.
QUIET_LOGGERS = {"matplotlib": logging.ERROR, "PIL": logging.ERROR}
for _name, _level in QUIET_LOGGERS.items():
    logging.getLogger(_name).setLevel(_level)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from stoixlite.tracking.jsonl import read_jsonl  # noqa: E402


def plot_learning_curve(metrics_path: str | Path, out_path: str | Path, title: str = "") -> Path:
    """Plot train and eval episode return against env steps; returns the PNG path."""
    records = read_jsonl(metrics_path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("train/episode_return", "train"), ("eval/episode_return", "eval")):
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if points:
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, label=label, marker="o", markersize=3)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path
