"""How the POPGym table's pages write a cell's numbers: MMER with its marks, the paper's
numbers, and the verdicts against the paper (the thresholds are
:mod:`stoixlite.results.popgym_cells`')."""

from __future__ import annotations

import math

from stoixlite.results.popgym_cells import CHANGED, KEY, SLACK, ModelCell, above_best
from stoixlite.results.popgym_paper import PaperCell


def number(value: float | None, digits: int = 3) -> str:
    """A number to ``digits`` decimals; ``n/a`` for none or a non-finite one."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def mmer_text(cell: ModelCell | None) -> str:
    """A model's MMER as the pages give it: ``mean ± sd``; ``≥ ... (at <steps>)`` when it was
    interrupted, ``†`` when it trained with settings that have changed since."""
    if cell is None:
        return "not run"
    if not cell.scored:
        return cell.status
    text = cell.summary(KEY).fmt()
    text = f"≥ {text} (at {cell.steps / 1e6:.1f}M)" if cell.partial else text
    return f"{text} {CHANGED}" if cell.changed else text


def paper_text(paper: PaperCell | None) -> tuple[str, str]:
    """The paper's GRU and best (model) of a cell; dashes where it published none."""
    if paper is None:
        return "—", "—"
    return number(paper.gru), f"{number(paper.best)} ({paper.best_model})"


def gru_verdict(gru: ModelCell | None, paper: PaperCell | None) -> str:
    """Our gru against the paper's GRU: meets (within :data:`SLACK`), unfinished or below."""
    if gru is None or paper is None or not gru.scored:
        return ""
    mean = gru.summary(KEY).mean
    if mean >= paper.gru - SLACK:
        return f"meets ({mean - paper.gru:+.3f})"
    if gru.partial:
        return f"unfinished ({mean - paper.gru:+.3f} so far)"
    return f"**below** ({mean - paper.gru:+.3f})"


def best_verdict(best: ModelCell | None, paper: PaperCell | None) -> str:
    """A model against the paper's best: above (by more than the interval), level, meeting the
    paper's GRU, unfinished or below it."""
    if best is None or paper is None:
        return ""
    mean = best.summary(KEY).mean
    if above_best(best, paper):
        return f"above best ({mean - paper.best:+.3f})"
    if mean >= paper.best - SLACK:
        return f"level with best ({mean - paper.best:+.3f})"
    if mean >= paper.gru - SLACK:
        return f"meets GRU ({mean - paper.best:+.3f} to best)"
    if best.partial:
        return f"unfinished ({mean - paper.gru:+.3f} to GRU so far)"
    return f"**below GRU** ({mean - paper.gru:+.3f})"
