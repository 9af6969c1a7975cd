"""The POPGym table's figure: per published cell, our gru and best model against the paper."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from stoixlite.results.popgym_cells import KEY, Cells, best_memory_model, published
from stoixlite.results.popgym_paper import PAPER


def figure(cells: Cells, path: Path) -> bool:
    """Grouped bars per published cell trained: our gru and best model, the paper's GRU and
    best (MMER, the paper's statistic), written to ``path`` (PNG). ``False`` when there is
    nothing to draw (nothing written)."""
    rows = []
    for env, difficulty in published(cells):
        models = cells[(env, difficulty)]
        best = best_memory_model(models)
        if best is None:
            continue
        gru = models.get("gru")
        gru_mean = gru.summary(KEY).mean if gru and gru.scored else math.nan
        paper = PAPER[env][difficulty]
        rows.append(
            (f"{env}\n{difficulty}", gru_mean, best.summary(KEY).mean, paper.gru, paper.best)
        )
    if not rows:
        return False
    for name in ("matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    x = np.arange(len(rows))
    width = 0.2
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows)), 4.5))
    labels = ("stoixlite gru", "stoixlite best", "paper GRU", "paper best")
    colours = ("tab:blue", "tab:green", "tab:gray", "tab:orange")
    for k, (label, colour) in enumerate(zip(labels, colours, strict=True)):
        ax.bar(x + (k - 1.5) * width, [r[k + 1] for r in rows], width, label=label, color=colour)
    ax.set_xticks(x, [r[0] for r in rows], fontsize=7, rotation=0)
    ax.set_ylabel("MMER (last 100 episodes, mean of seeds)")
    ax.set_ylim(-1.0, 1.05)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", ncol=4, loc="lower center")
    ax.set_title("POPGym: stoixlite vs the POPGym paper (MMER)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True
