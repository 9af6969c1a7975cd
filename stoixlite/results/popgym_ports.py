"""The POPGym table page's section on the paper's best models: on each published cell, the
port of the model the paper found best there against the paper's numbers."""

from __future__ import annotations

from stoixlite.results.popgym_cells import Cells
from stoixlite.results.popgym_paper import DIFFICULTIES, PAPER, paper_best_networks
from stoixlite.results.popgym_text import best_verdict, mmer_text, number


def ports_lines(cells: Cells) -> list[str]:
    """A row per published cell and port of the paper's best model there
    (:func:`~stoixlite.results.popgym_paper.paper_best_networks`) that has a record: its MMER,
    the paper's GRU and best, and how it stands (the verdict of the summary's last column)."""
    lines = [
        "On each published cell, stoixlite's port of the model the paper found best there",
        "(`--networks paper_best`), with that cell's shipped config, against the paper's numbers:",
        "",
        "| env | difficulty | model | stoixlite | paper GRU | paper best (model) | vs the paper |",
        "|---|---|---|---:|---:|---|---|",
    ]
    rows = 0
    for difficulty in DIFFICULTIES:
        for env in PAPER:
            paper = PAPER[env][difficulty]
            for model in paper_best_networks(env, difficulty):
                cell = cells.get((env, difficulty), {}).get(model)
                if cell is None:
                    continue
                rows += 1
                verdict = best_verdict(cell, paper) if cell.scored else ""
                lines.append(
                    f"| {env} | {difficulty} | {model} | {mmer_text(cell)} | {number(paper.gru)} "
                    f"| {number(paper.best)} ({paper.best_model}) | {verdict} |"
                )
    return lines if rows else ["No port of the paper's best models has a record yet."]
