"""The POPGym table's numbers: each cell's models from the records, and how they stand.

A cell is one (env, difficulty); each of its records (one per model, ``model+variant`` for an
ablation) is a :class:`ModelCell`. Every cell is judged with the paper's statistic
(:data:`KEY`, ``mmer_paper``: the mean of the last 100 finished training episodes read every
65,536 steps, maximised over training; :mod:`stoixlite.ppo.episode_window`), mean over seeds.
The page (:mod:`stoixlite.results.popgym_page`) and the figure
(:mod:`stoixlite.results.popgym_figure`) only format what this module computes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from stoixlite.results.popgym_paper import (
    DIFFICULTIES,
    ENVS,
    PAPER,
    PaperCell,
    paper_best_networks,
)
from stoixlite.results.stats import SeedSummary, summarize_seeds

MEMORYLESS = ("mlp", "feedforward", "identity")
COLUMNS = ("mlp", "gru", "memoroid")  # the models every cell trains
SLACK = 0.02  # a cell "meets" the paper's GRU at or above its MMER minus this
CEILING = 0.99  # a mean at or above this is at the return's maximum (1.0): within 1 % of it
KEY = "mmer_paper"
# Marks a result trained with settings that have changed since (the record's settings_changed).
CHANGED = "†"


@dataclass
class ModelCell:
    """One model's record of one (env, difficulty)."""

    model: str
    record: dict

    @property
    def status(self) -> str:
        return str(self.record["status"])

    @property
    def steps(self) -> int:
        return int(self.record.get("steps") or 0)

    @property
    def budget(self) -> int:
        return int(self.record.get("budget") or 0)

    @property
    def partial(self) -> bool:
        """Interrupted with records: its MMER (a maximum over what it trained) is a lower bound."""
        return self.status == "interrupted" and bool(self.record["per_seed"])

    @property
    def scored(self) -> bool:
        return self.status in ("done", "interrupted") and self.summary(KEY).n > 0

    @property
    def variant(self) -> bool:
        return "+" in self.model

    @property
    def gpu(self) -> bool:
        """Whether its last attempt ran on a machine with a GPU."""
        return "GPU:" in str(self.last_attempt.get("machine", ""))

    @property
    def program(self) -> list[str]:
        """The cells of the fused program of its last attempt (itself included; empty when it
        trained alone)."""
        return list(self.last_attempt.get("program") or [])

    @property
    def jobs(self) -> int:
        """How many cells trained side by side with its last attempt (itself included): its
        runner's programs side by side (``jobs``) times the cells of its program."""
        return max(1, int(self.last_attempt.get("jobs") or 1)) * max(1, len(self.program))

    @property
    def last_attempt(self) -> dict:
        return self.record["attempts"][-1] if self.record["attempts"] else {}

    @property
    def machine(self) -> str:
        """``"GPU"`` or ``"CPU"`` where its last attempt ran, and the cells trained side by side."""
        where = "GPU" if self.gpu else "CPU"
        fused = f" ({len(self.program)} in one program)" if self.program else ""
        return f"{where}, {self.jobs} cells at once{fused}" if self.jobs > 1 else where

    @property
    def changed(self) -> list[str]:
        """The settings keys whose shipped value changed since it trained (``report`` sets
        ``settings_changed``; empty when the record is current)."""
        return list(self.record.get("settings_changed") or [])

    def summary(self, key: str) -> SeedSummary:
        return summarize_seeds(nan_if_none(s.get(key)) for s in self.record["per_seed"])

    def seeds(self) -> list[int]:
        return [int(s["seed"]) for s in self.record["per_seed"]]


def nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)


Cells = dict[tuple[str, str], dict[str, ModelCell]]


def load_cells(records: Iterable[dict]) -> Cells:
    """``{(env, difficulty): {model[+variant]: ModelCell}}`` of the records."""
    cells: Cells = {}
    for record in records:
        name = record["model"] + (f"+{record['variant']}" if record.get("variant") else "")
        cells.setdefault((record["env"], record["difficulty"]), {})[name] = ModelCell(name, record)
    return cells


def best_memory_model(models: dict[str, ModelCell]) -> ModelCell | None:
    """The model with memory trained with its shipped config (no ``+variant``) whose mean MMER
    (the paper's statistic) is highest, finished or interrupted with records."""
    scored = [
        m for m in models.values() if m.scored and not m.variant and m.model not in MEMORYLESS
    ]
    return max(scored, key=lambda m: m.summary(KEY).mean, default=None)


def published(cells: Cells) -> list[tuple[str, str]]:
    """The (env, difficulty) pairs with a paper number and a record, by difficulty."""
    return [(e, d) for d in DIFFICULTIES for e in PAPER if (e, d) in cells]


def above_best(cell: ModelCell, paper: PaperCell) -> bool:
    """Above the paper's best by more than the seeds' 95 % interval, and not at the ceiling."""
    s = cell.summary(KEY)
    return s.n >= 2 and s.lo > paper.best and s.mean < CEILING


@dataclass
class Standing:
    """How the published cells stand against the paper (:func:`standing`): the cells with a
    scored memory model (``run``), those where gru is scored, and the cells our gru or our best
    model meets (at or above the paper's GRU minus :data:`SLACK`), misses or beats (above the
    paper's best: :func:`above_best`)."""

    run: list[tuple[str, str]]
    gru_run: list[tuple[str, str]]
    gru_meets: list[tuple[str, str]]
    gru_below: list[tuple[str, str]]
    best_meets: list[tuple[str, str]]
    best_below: list[tuple[str, str]]
    above: list[tuple[str, str]]


def standing(cells: Cells) -> Standing:
    """:class:`Standing` of the published cells of ``cells``."""
    out = Standing([], [], [], [], [], [], [])
    for env, difficulty in published(cells):
        models = cells[(env, difficulty)]
        best = best_memory_model(models)
        if best is None:
            continue
        paper = PAPER[env][difficulty]
        out.run.append((env, difficulty))
        gru = models.get("gru")
        if gru is not None and gru.scored:
            out.gru_run.append((env, difficulty))
            meets = gru.summary(KEY).mean >= paper.gru - SLACK
            (out.gru_meets if meets else out.gru_below).append((env, difficulty))
        meets = best.summary(KEY).mean >= paper.gru - SLACK
        (out.best_meets if meets else out.best_below).append((env, difficulty))
        if above_best(best, paper):
            out.above.append((env, difficulty))
    return out


# The verdicts of an unpublished cell (memory_verdicts), each with how the summary counts it.
ABOVE = "memory above mlp"
AHEAD = "memory ahead, intervals overlap"
NONE = "no memory model above mlp"
VERDICT_COUNTS = {
    ABOVE: "a memory model above mlp by more than the seeds' intervals",
    AHEAD: "ahead of mlp, intervals overlapping",
    NONE: "no memory model above mlp",
}


@dataclass
class MemoryVerdict:
    """An unpublished cell: mlp, its best memory model and whether memory helps there."""

    env: str
    difficulty: str
    mlp: SeedSummary
    best: ModelCell
    verdict: str


def memory_verdicts(cells: Cells) -> list[MemoryVerdict]:
    """Per unpublished cell with mlp and a memory model scored: does a memory model beat mlp by
    more than the seeds' 95 % intervals (:data:`ABOVE`), lead with overlapping intervals
    (:data:`AHEAD`) or not lead (:data:`NONE`)? By difficulty, then env."""
    verdicts = []
    for difficulty in DIFFICULTIES:
        for env in ENVS:
            if env in PAPER or (env, difficulty) not in cells:
                continue
            models = cells[(env, difficulty)]
            mlp, best = models.get("mlp"), best_memory_model(models)
            if mlp is None or not mlp.scored or best is None:
                continue
            m, b = mlp.summary(KEY), best.summary(KEY)
            if b.n >= 2 and m.n >= 2 and b.lo > m.hi:
                verdict = ABOVE
            elif b.mean > m.mean:
                verdict = AHEAD
            else:
                verdict = NONE
            verdicts.append(MemoryVerdict(env, difficulty, m, best, verdict))
    return verdicts


def table_cells() -> list[tuple[str, str, str]]:
    """``(env, difficulty, model)`` of every cell the table's pages show, which ``train`` trains
    by default: :data:`COLUMNS` on all 48 cells, and on each published cell the ports of the
    paper's best model(s) (:func:`~stoixlite.results.popgym_paper.paper_best_networks`)."""
    return [
        (env, difficulty, model)
        for difficulty in DIFFICULTIES
        for env in ENVS
        for model in dict.fromkeys([*COLUMNS, *paper_best_networks(env, difficulty)])
    ]


@dataclass
class Cost:
    """What training a set of cells costs on one machine, from the records' wall times:
    ``hours`` of the machine (a cell's wall time divided by the cells that trained beside it),
    ``measured`` cells timed there, ``estimated`` cells at their model's median rate there (or,
    for a model never timed there, the median rate of every cell timed there: ``untimed``
    models), ``missing`` cells without a record (not counted), and the cells trained at once."""

    machine: str
    hours: float
    measured: int
    estimated: int
    untimed: list[str]
    missing: int
    jobs: list[int]
    steps: float  # env steps per seed of the cells counted, in all


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def machine_cost(cells: Cells, wanted: list[tuple[str, str, str]], gpu: bool) -> Cost | None:
    """:class:`Cost` of training ``wanted`` (``(env, difficulty, model)``; shipped configs) on
    the machine with a GPU (``gpu``) or without that the most records ran on; each cell for its
    record's budget. ``None`` when no record of a shipped config ran on such a machine."""
    timed = [
        m
        for models in cells.values()
        for m in models.values()
        if m.gpu == gpu and m.record.get("wall_s") and m.steps > 0
    ]
    machines = [str(m.last_attempt.get("machine")) for m in timed]
    if not machines:
        return None
    machine = max(sorted(set(machines)), key=machines.count)
    rates: dict[str, list[float]] = {}  # model: seconds of the machine per env step
    own: dict[tuple[str, str, str], float] = {}
    jobs = set()
    for m in timed:
        if str(m.last_attempt.get("machine")) != machine or m.variant:
            continue
        rate = float(m.record["wall_s"]) / m.jobs / m.steps
        rates.setdefault(m.model, []).append(rate)
        own[(m.record["env"], m.record["difficulty"], m.model)] = rate
        jobs.add(m.jobs)
    if not rates:
        return None  # only ablations (+variant) ran there
    every = _median([r for model_rates in rates.values() for r in model_rates])
    seconds, steps, measured, estimated, missing, untimed = 0.0, 0.0, 0, 0, 0, set()
    for env, difficulty, model in wanted:
        cell = cells.get((env, difficulty), {}).get(model)
        if cell is None or not cell.budget:
            missing += 1
            continue
        rate = own.get((env, difficulty, model))
        if rate is not None:
            measured += 1
        else:
            estimated += 1
            if model not in rates:
                untimed.add(model)
            rate = _median(rates[model]) if model in rates else every
        seconds += rate * cell.budget
        steps += cell.budget
    return Cost(machine, seconds / 3600, measured, estimated, sorted(untimed), missing,
                sorted(jobs), steps)  # fmt: skip
