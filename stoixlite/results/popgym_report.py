"""The POPGym table page, built from the committed records alone (no run directory needed).

Reads every record below ``results/popgym_table/`` (:mod:`stoixlite.results.popgym_records`),
the random policy's returns kept beside them (``random.json``, computed once per cell) and the
paper's numbers (:mod:`stoixlite.results.popgym_paper`), and writes a Markdown page and one
figure. Every cell is judged with the paper's statistic (``mmer_paper``: the mean of the last 100
finished training episodes read every 65,536 steps, maximised over training); the per-update MMER
is shown beside it with their difference.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS, PAPER, PaperCell
from stoixlite.results.popgym_records import read_randoms, read_records
from stoixlite.results.stats import LABEL, SeedSummary, summarize_seeds

MEMORYLESS = ("mlp", "feedforward", "identity")
COLUMNS = ("mlp", "gru", "memoroid")  # the models every cell trains
SLACK = 0.02  # a cell "meets" the paper's GRU at or above its MMER minus this
CEILING = 0.99  # a mean at or above this is at the return's maximum (1.0): within 1 % of it
# Targets named for single cells: (env, difficulty, threshold).
NAMED_TARGETS = (
    ("repeat_previous", "medium", 0.5),
    ("count_recall", "easy", 0.51),
    ("multiarmed_bandit", "easy", 0.62),
)
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
    def machine(self) -> str:
        """``"GPU"`` or ``"CPU"`` where its last attempt ran, and the cells trained side by side."""
        last = self.record["attempts"][-1] if self.record["attempts"] else {}
        where = "GPU" if "GPU:" in str(last.get("machine", "")) else "CPU"
        jobs = int(last.get("jobs") or 1)
        return f"{where}, {jobs} cells at once" if jobs > 1 else where

    @property
    def changed(self) -> list[str]:
        """The settings keys whose shipped value changed since it trained (``report`` sets
        ``settings_changed``; empty when the record is current)."""
        return list(self.record.get("settings_changed") or [])

    def summary(self, key: str) -> SeedSummary:
        return summarize_seeds(_nan(s.get(key)) for s in self.record["per_seed"])

    def seeds(self) -> list[int]:
        return [int(s["seed"]) for s in self.record["per_seed"]]


def _nan(value: float | None) -> float:
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


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _mmer(cell: ModelCell | None) -> str:
    if cell is None:
        return "not run"
    if not cell.scored:
        return cell.status
    text = cell.summary(KEY).fmt()
    text = f"≥ {text} (at {cell.steps / 1e6:.1f}M)" if cell.partial else text
    return f"{text} {CHANGED}" if cell.changed else text


def _paper(paper: PaperCell | None) -> tuple[str, str]:
    if paper is None:
        return "—", "—"
    return _num(paper.gru), f"{_num(paper.best)} ({paper.best_model})"


def _gru_verdict(gru: ModelCell | None, paper: PaperCell | None) -> str:
    if gru is None or paper is None or not gru.scored:
        return ""
    mean = gru.summary(KEY).mean
    if mean >= paper.gru - SLACK:
        return f"meets ({mean - paper.gru:+.3f})"
    if gru.partial:
        return f"unfinished ({mean - paper.gru:+.3f} so far)"
    return f"**below** ({mean - paper.gru:+.3f})"


def above_best(cell: ModelCell, paper: PaperCell) -> bool:
    """Above the paper's best by more than the seeds' 95 % interval, and not at the ceiling."""
    s = cell.summary(KEY)
    return s.n >= 2 and s.lo > paper.best and s.mean < CEILING


def _best_verdict(best: ModelCell | None, paper: PaperCell | None) -> str:
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


def summary_table(cells: Cells, randoms: dict[str, float]) -> list[str]:
    lines = [
        "| env | difficulty | random | mlp | gru | memoroid | best stoixlite (model) "
        "| paper GRU | paper best (model) | our gru vs paper GRU | our best vs paper |",
        "|---|---|---:|---:|---:|---:|---|---:|---|---|---|",
    ]
    for difficulty in DIFFICULTIES:
        for env in ENVS:
            models = cells.get((env, difficulty), {})
            paper = PAPER.get(env, {}).get(difficulty)
            best = best_memory_model(models)
            best_text = f"{_mmer(best)} ({best.model})" if best else "not run"
            gru, paper_best = _paper(paper)
            columns = " | ".join(_mmer(models.get(m)) for m in COLUMNS)
            lines.append(
                f"| {env} | {difficulty} | {_num(randoms.get(f'{env}/{difficulty}'))} "
                f"| {columns} | {best_text} | {gru} | {paper_best} "
                f"| {_gru_verdict(models.get('gru'), paper)} | {_best_verdict(best, paper)} |"
            )
    return lines


def detail_table(cells: Cells) -> list[str]:
    lines = [
        "| env | difficulty | model | seeds | steps | MMER | 95 % CI | per-update MMER "
        "| difference | final eval | best eval | wall s | on |",
        "|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for difficulty in DIFFICULTIES:
        for env in ENVS:
            for model, cell in sorted(cells.get((env, difficulty), {}).items()):
                if not cell.scored:
                    lines.append(
                        f"| {env} | {difficulty} | {model} | | | {cell.status} | | | | | | | |"
                    )
                    continue
                paper, update = cell.summary(KEY), cell.summary("mmer_update")
                final, best = cell.summary("final_eval"), cell.summary("best_eval")
                diff = summarize_seeds(
                    _nan(s.get(KEY)) - _nan(s.get("mmer_update")) for s in cell.record["per_seed"]
                )
                steps = f"{cell.steps:.2e}"
                if cell.changed:
                    shown = ", ".join(cell.changed[:3]) + (", ..." if len(cell.changed) > 3 else "")
                    steps += f" {CHANGED} ({shown})"
                if cell.partial:
                    steps += f" of {cell.budget:.2e} (interrupted)"
                elif cell.steps < 0.95 * cell.budget:
                    steps += f" of {cell.budget:.2e} (stopped early)"
                lines.append(
                    f"| {env} | {difficulty} | {model} | {','.join(map(str, cell.seeds()))} "
                    f"| {steps} | {paper.fmt()} | {paper.fmt_ci()} | {update.fmt()} "
                    f"| {_num(diff.mean)} | {final.fmt()} | {best.fmt()} "
                    f"| {_num(cell.record.get('wall_s'), 0)} | {cell.machine} |"
                )
    return lines


# Where the misses are discussed (relative to docs/).
MISSES = "popgym_results.md#the-tables-misses-what-was-tried"


def _published(cells: Cells) -> list[tuple[str, str]]:
    return [(e, d) for d in DIFFICULTIES for e in PAPER if (e, d) in cells]


def target_lines(cells: Cells, docs: str = "") -> list[str]:
    """How the cells stand against the paper and the table's targets (computed); ``docs``: the
    path of docs/ from the page they go in (``""`` from a page in docs/)."""
    all_published = [(e, d) for d in DIFFICULTIES for e in PAPER]
    run = [key for key in _published(cells) if best_memory_model(cells[key])]
    gru_meets, gru_below, best_meets, above, below = [], [], [], [], []
    gru_run = 0
    for env, difficulty in run:
        paper = PAPER[env][difficulty]
        models = cells[(env, difficulty)]
        best = best_memory_model(models)
        gru = models.get("gru")
        if gru is not None and gru.scored:
            gru_run += 1
            gru_mean = gru.summary(KEY).mean
            if gru_mean >= paper.gru - SLACK:
                gru_meets.append((env, difficulty))
            else:
                note = " interrupted" if gru.partial else ""
                note += f" {CHANGED}" if gru.changed else ""
                gru_below.append(f"{env} {difficulty} ({gru_mean:.3f}{note} vs {paper.gru:.3f})")
        mean = best.summary(KEY).mean
        if mean >= paper.gru - SLACK:
            best_meets.append((env, difficulty))
        else:
            note = ", interrupted" if best.partial else ""
            note += f", {CHANGED} earlier settings" if best.changed else ""
            missing = [m for m in COLUMNS if m not in MEMORYLESS and m not in models]
            note += f"; {', '.join(missing)} not run yet" if missing else ""
            below.append(f"{env} {difficulty} ({best.model} {mean:.3f} vs {paper.gru:.3f}{note})")
        if above_best(best, paper):
            above.append(f"{env} {difficulty} ({best.model} {mean:.3f} vs {paper.best:.3f})")
    lines = [
        f"- Published cells trained: {len(run)} of {len(all_published)}.",
        f"- Our **gru** alone at or above the paper's GRU minus {SLACK}: {len(gru_meets)} of "
        f"{gru_run} trained with gru (target: 18 of 24).",
        f"- Some stoixlite model at or above the paper's GRU minus {SLACK}: {len(best_meets)} "
        f"of {len(run)} (target: 24 of 24).",
        f"- Above the paper's best model by more than the seeds' 95 % interval, not at the 1.0 "
        f"ceiling (a mean of {CEILING} or more): {len(above)} (target: 8)"
        + (": " + "; ".join(above) if above else "")
        + ".",
    ]
    if gru_below:
        lines.append("- Our gru below the paper's GRU: " + "; ".join(gru_below) + ".")
    if below:
        lines.append("- **Below the paper's GRU** (misses): " + "; ".join(below) + ".")
    if gru_below or below:
        lines.append(
            f"- What was tried on each miss, and why it misses where known: "
            f"[popgym_results.md]({docs}{MISSES})."
        )
    for env, difficulty, threshold in NAMED_TARGETS:
        best = best_memory_model(cells.get((env, difficulty), {}))
        state = "not run"
        if best is not None:
            mean = best.summary(KEY).mean
            state = f"{best.model} {mean:.3f}: " + ("met" if mean >= threshold else "**missed**")
        lines.append(f"- Target {env} {difficulty} ≥ {threshold}: {state}.")
    return lines


# The verdicts of an unpublished cell (memory_lines), each with how the summary sentence counts it.
ABOVE = "memory above mlp"
AHEAD = "memory ahead, intervals overlap"
NONE = "no memory model above mlp"
VERDICT_COUNTS = {
    ABOVE: "a memory model above mlp by more than the seeds' intervals",
    AHEAD: "ahead of mlp, intervals overlapping",
    NONE: "no memory model above mlp",
}


def memory_lines(cells: Cells) -> list[str]:
    """Per unpublished cell: does a memory model beat mlp by more than the seeds' intervals? A
    sentence counting each verdict (naming the cells where none does), then the table."""
    lines = []
    verdicts: dict[str, list[str]] = {verdict: [] for verdict in VERDICT_COUNTS}
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
            shown = f"**{verdict}**" if verdict == NONE else verdict
            lines.append(
                f"| {env} | {difficulty} | {m.fmt()} | {b.fmt()} ({best.model}) | {shown} |"
            )
            verdicts[verdict].append(f"{env} {difficulty}")
    if not lines:
        return ["No unpublished cell has both mlp and a memory model trained yet."]
    counts = "; ".join(f"{label}: {len(verdicts[v])}" for v, label in VERDICT_COUNTS.items())
    named = f" ({', '.join(verdicts[NONE])})" if verdicts[NONE] else ""
    return [
        f"Of the {len(lines)} unpublished cells trained with mlp and a memory model: "
        f"{counts}{named}.",
        "",
        "| env | difficulty | mlp | best memory model | verdict (95 % intervals) |",
        "|---|---|---:|---|---|",
        *lines,
    ]


def provenance(cells: Cells) -> list[str]:
    attempts = [
        a for models in cells.values() for m in models.values() for a in m.record["attempts"]
    ]
    trees = sorted(
        {
            a.get("commit", "?")
            + ("" if a.get("tree", "clean") == "clean" else f" ({a['tree']}, uncommitted)")
            for a in attempts
        }
    )
    machines = sorted({str(a.get("machine", "?")) for a in attempts})
    dates = sorted(str(a.get("started", "")) for a in attempts)
    seeds = sorted({tuple(m.seeds()) for models in cells.values() for m in models.values()})
    return [
        f"- Records: {sum(len(m) for m in cells.values())} (`results/popgym_table/`).",
        f"- Seeds: {'; '.join(','.join(map(str, s)) for s in seeds) or 'n/a'}.",
        f"- Commit(s) the runs were trained at: {', '.join(trees) or 'n/a'}.",
        f"- Machine(s): {'; '.join(machines) or 'n/a'} (JAX on the CPU unless a GPU is named).",
        f"- Runs started {dates[0] if dates else 'n/a'} to {dates[-1] if dates else 'n/a'} (UTC).",
    ]


def figure(cells: Cells, path: Path) -> bool:
    """Grouped bars per published cell trained: our gru and best model, the paper's GRU and
    best (MMER, the paper's statistic). ``False`` when there is nothing to draw."""
    rows = []
    for env, difficulty in _published(cells):
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


INTRO = """\
# The POPGym table: stoixlite against the POPGym paper

Made by `python scripts/popgym_table.py report` from the records in `results/popgym_table/`
(one JSON file per env x difficulty x model, committed with the repository), which
`python scripts/popgym_table.py train` writes when a cell finishes or is interrupted. Do not
edit by hand: re-run the report. A test rebuilds this page from the records and checks it is
the one committed.

**MMER** is measured the paper's way: the mean return of the last 100 finished training
episodes (sampled actions), read at the end of every 65,536 env steps, maximised over training
(RLlib's `episode_reward_mean`, which the paper reports); per cell the mean over seeds. Beside
it, the **per-update MMER** (the mean return of the episodes finished in one update, maximised)
and the difference of the two per cell: the per-update maximum is noisier, so it reads higher on
short noisy episodes and lower where few episodes end in an update. **final eval**: the last
evaluation (64 episodes, greedy or sampled as the env's config says). **random**: the uniformly
random policy (512 episodes of the JAX port). A cell marked *interrupted* (≥) was stopped before
its budget: its MMER is a lower bound. A result marked † was trained with settings that have
changed since (the keys are in its record and on [{runs}]({runs})): `train` trains it again.
Cells named `model+variant` ran with the overrides in
their record (ablations); the summary columns use the shipped configs only.

Statistics: {label}.

## What differs from the paper

- **Source of the paper's numbers**: POPGym (Morad et al., ICLR 2023), appendix table of MMER
  (3 trials, 15M env steps, RLlib PPO); "paper best" is the best of its 13 memory models; no
  number where the paper has none (—). The paper calls `position_only_cartpole`
  "StatelessCartPole" and `noisy_position_only_cartpole` "NoisyStatelessCartPole".
- **Budgets**: each cell trains the budget its shipped config gives (`arch.total_timesteps`,
  {budgets}), not the paper's 15M.
- **Batch sizes and settings**: stoixlite's PPO defaults (64 envs x 128 steps = 8,192 steps per
  update, 4 epochs x 4 minibatches, whole-rollout BPTT, lr 2.5e-4 annealed; per-env and
  per-(env, model) defaults in `configs/env/popgym/` and `configs/env_network/popgym/`), where the
  paper ran RLlib with 65,536-step iterations, 30 epochs, lr 5e-5 and 1,024-step BPTT
  (`+protocol=popgym` sets those). The memory sizes are stoixlite's (`configs/network/`), not the
  paper's 256-wide memory with 128-wide embeddings.
- **Episode horizon**: the paper's RLlib runs cut every episode at 1,024 steps; stoixlite keeps
  each env's own episode length.
- **Env fixes since the paper**: the ports equal popgym 1.0.7 (docs/envs.md), whose
  count_recall action space and minesweeper episode length changed after the paper, so those
  cells are not the paper's task exactly.
- **Seeds**: the table reports seeds 10, 11 and 12 (the runner's default). The shipped configs
  were chosen in experiments on seeds 0-2; seeds 10-12 were never used to choose a setting.

## Where the records came from
"""


def wall_lines(cells: Cells) -> list[str]:
    """The recorded wall time of the finished cells per kind of machine, the machine time they
    used (a cell's wall time divided by the cells that trained beside it) and, at that rate, the
    machine time the 144 mlp/gru/memoroid cells not yet finished would take."""
    walls: dict[str, list[float]] = {}
    shares: dict[str, list[float]] = {}
    steps: dict[str, float] = {}
    for models in cells.values():
        for cell in models.values():
            wall = cell.record.get("wall_s")
            if cell.status != "done" or wall is None:
                continue
            last = cell.record["attempts"][-1] if cell.record["attempts"] else {}
            kind = cell.machine.split(",")[0]
            walls.setdefault(kind, []).append(float(wall))
            shares.setdefault(kind, []).append(float(wall) / max(1, int(last.get("jobs") or 1)))
            steps[kind] = steps.get(kind, 0.0) + float(cell.record["steps"])
    left = sum(
        1
        for env in ENVS
        for difficulty in DIFFICULTIES
        for model in ("gru", "memoroid", "mlp")
        if not (
            model in cells.get((env, difficulty), {})
            and cells[(env, difficulty)][model].status == "done"
        )
    )
    lines = []
    for kind in sorted(walls):
        per_2m = sum(shares[kind]) / steps[kind] * 2e6
        lines.append(
            f"Recorded so far on {kind}: {len(walls[kind])} finished cells, "
            f"{sum(walls[kind]) / 3600:.1f} h of cell wall time in all (median "
            f"{sorted(walls[kind])[len(walls[kind]) // 2]:.0f} s per cell), "
            f"{sum(shares[kind]) / 3600:.1f} h of the machine (each cell's wall time divided by "
            f"the cells that trained beside it): {per_2m:.0f} s of the machine per 2M-step cell. "
            f"At that rate the {left} of the 144 mlp/gru/memoroid cells not finished yet take "
            f"about {left * per_2m / 3600:.1f} h of one such machine at 2M steps each "
            "(battleship's budget is 6M, repeat_first's 8M)."
        )
    return lines


def budget_text(cells: Cells) -> str:
    """The budgets of the records, in millions of steps."""
    budgets = sorted({m.budget for models in cells.values() for m in models.values()})
    if not budgets:
        return "in each record"
    low, high = budgets[0] / 1e6, budgets[-1] / 1e6
    span = f"{low:g}M" if low == high else f"{low:g}M to {high:g}M steps"
    return f"{span} among the records here"


def grouped_commands(commands: Iterable[str]) -> list[str]:
    """The records' ``train`` commands, those that differ only in ``--networks`` merged into one
    (``--networks gru memoroid mlp``), sorted."""
    networks: dict[tuple[str, str], list[str]] = {}
    for command in commands:
        words = command.split()
        if "--networks" not in words:
            networks.setdefault((command, ""), [])
            continue
        at = words.index("--networks")
        end = next((i for i in range(at + 1, len(words)) if words[i].startswith("--")), len(words))
        key = (" ".join(words[: at + 1]), " ".join(words[end:]))
        networks.setdefault(key, []).extend(words[at + 1 : end])
    return sorted(
        " ".join(part for part in (head, *sorted(set(models)), tail) if part)
        for (head, tail), models in networks.items()
    )


def render(cells: Cells, randoms: dict[str, float], figure_rel: str | None, runs_rel: str) -> str:
    """The table's page: provenance, targets, the summary per cell and how to rebuild it;
    ``runs_rel`` links the page of every trained model (:func:`render_runs`)."""
    parts = [
        INTRO.format(label=LABEL, budgets=budget_text(cells), runs=runs_rel),
        *provenance(cells),
        "",
        "## Where the cells stand",
        "",
        *target_lines(cells),
        "",
    ]
    if figure_rel:
        parts += [f"![ours vs the paper per cell]({figure_rel})", ""]
    parts += [
        "## All cells (MMER, mean ± sample sd over seeds)",
        "",
        *summary_table(cells, randoms),
        "",
        "## Does memory help where the paper published nothing?",
        "",
        *memory_lines(cells),
        "",
        "## Every trained model",
        "",
        "Per model and cell (ablations and the other memory models included): seeds, steps, both",
        "MMERs and their difference, the 95 % interval, final and best evaluation, wall time and",
        f"where it ran, and the command that trained it: [{runs_rel}]({runs_rel}).",
        "",
        "## Rebuilding the table",
        "",
        "`python scripts/popgym_table.py train` trains every cell without a finished record",
        "(mlp, gru and memoroid on all 48 cells, seeds 10-12) and writes the records; a record",
        "trained with other settings than the cell's shipped config today trains afresh;",
        "`python scripts/popgym_table.py report` rebuilds this page. On one GPU,",
        "`python scripts/popgym_table.py train --jobs 6 --time-limit 540 --records DIR",
        "--networks gru memoroid mlp paper_best` trains as many pending cells as fit in 9",
        "minutes (published cells first; `paper_best`: the port of the paper's best model of each",
        "published cell), choosing them by the wall times recorded here scaled to the cells",
        "trained at once, and writes their records to DIR (copy them into",
        "`results/popgym_table/`). On one H200, 3 to 13 cells at once each came to 20-25 s",
        "of the GPU per 2M-step cell: the GPU, not the host, sets the pace.",
        "Several `train` commands may share one `--out` on one machine (say one per terminal,",
        "each with its own `--envs`): a runner locks each cell while it trains it, and skips a",
        "cell another runner holds or finished since it started.",
        *wall_lines(cells),
        "",
    ]
    return "\n".join(parts)


COLUMN_NOTES = (
    "difference: the paper's statistic minus the per-update MMER (mean over seeds). wall s:",
    "the run's own clock (compile and evaluations included, summed over resumes). on: where",
    "the last attempt ran and how many cells trained side by side there.",
)


def render_runs(cells: Cells, page_rel: str) -> str:
    """The page of every trained model (``page_rel``: the table's page, linked back): one row
    per record, then the ``train`` commands the records came from."""
    commands = grouped_commands(
        m.record["command"] for models in cells.values() for m in models.values()
    )
    return "\n".join(
        [
            "# The POPGym table: every trained model",
            "",
            f"Made with [{page_rel}]({page_rel}) by `python scripts/popgym_table.py report` from",
            "the records in `results/popgym_table/`; do not edit by hand. MMER, statistics and",
            f"marks (≥, †) as on [{page_rel}]({page_rel}).",
            "",
            *COLUMN_NOTES,
            "",
            *detail_table(cells),
            "",
            "## The commands",
            "",
            "The cells here came from:",
            "",
            "```",
            *commands,
            "```",
            "",
        ]
    )


def _link(target: Path, page: Path) -> str:
    """``target`` as a link from ``page``: relative to the page's folder where it lies below it."""
    try:
        return str(target.resolve().relative_to(page.resolve().parent))
    except ValueError:
        return str(target)


def runs_page(args) -> Path:
    """Where the page of every trained model goes: ``args.runs_doc`` where given, else beside
    ``args.doc`` as ``<doc>_runs.md`` (docs/popgym_table.md -> docs/popgym_table_runs.md)."""
    if args.runs_doc is not None:
        return args.runs_doc
    return args.doc.with_name(f"{args.doc.stem}_runs.md")


def write_report(args) -> int:
    """``scripts/popgym_table.py report``: write ``args.doc``, the page of every trained model
    (:func:`runs_page`) and ``args.figure`` from the records below ``args.records``. Exit 2 with
    one line when there is nothing to report or a file cannot be read or written."""
    from stoixlite.results.popgym_records import RecordError, write_randoms

    try:
        cells = load_cells(read_records(args.records))
        randoms = read_randoms(args.records)
    except RecordError as err:
        print(f"error: {err}")
        return 2
    if not args.records.is_dir():
        print(f"error: --records {args.records} is not a directory")
        return 2
    missing = [(e, d) for e in ENVS for d in DIFFICULTIES if f"{e}/{d}" not in randoms]
    if missing and args.random_episodes > 0:
        from stoixlite.results.random_policy import random_returns

        for env, difficulty in missing:
            returns = random_returns(f"popgym/{env}", difficulty, args.random_episodes)
            randoms[f"{env}/{difficulty}"] = float(returns.mean())
        error = write_randoms(args.records, randoms)
        if error:
            print(f"error: {error}")
            return 2
    try:
        drawn = figure(cells, args.figure)
        if not drawn and args.figure.exists():
            args.figure.unlink()  # a figure of records no longer there
    except OSError as err:
        print(f"error: cannot write --figure {args.figure}: {err.strerror or err}")
        return 2
    rel = _link(args.figure, args.doc) if drawn else None
    runs_doc = runs_page(args)
    try:
        args.doc.write_text(render(cells, randoms, rel, _link(runs_doc, args.doc)))
    except OSError as err:
        print(f"error: cannot write --doc {args.doc}: {err.strerror or err}")
        return 2
    try:
        runs_doc.write_text(render_runs(cells, _link(args.doc, runs_doc)))
    except OSError as err:
        print(f"error: cannot write --runs-doc {runs_doc}: {err.strerror or err}")
        return 2
    wrote = [str(args.doc), str(runs_doc)] + ([str(args.figure)] if drawn else [])
    if args.readme is not None:
        image = _link(args.figure, args.readme) if drawn else None
        error = update_readme(args.readme, readme_block(cells, image))
        if error:
            print(f"error: {error}")
            return 2
        wrote.append(str(args.readme))
    print("wrote " + ", ".join(wrote))
    return 0


README_START = "<!-- popgym-table: made by scripts/popgym_table.py report; do not edit -->"
README_END = "<!-- popgym-table: end -->"


def readme_block(cells: Cells, image: str | None = None) -> str:
    """The README's summary of the published cells (between :data:`README_START` and
    :data:`README_END`), made from the same records as the page; ``image``: the figure's path
    relative to the README, shown when given."""
    lines = [
        README_START,
        "| env | difficulty | mlp | our gru | our best (model) | paper GRU | paper best |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    for env, difficulty in [(e, d) for d in DIFFICULTIES for e in PAPER]:
        models = cells.get((env, difficulty), {})
        best = best_memory_model(models)
        paper = PAPER[env][difficulty]
        best_text = f"{_mmer(best)} ({best.model})" if best else "not run"
        lines.append(
            f"| {env} | {difficulty} | {_mmer(models.get('mlp'))} | {_mmer(models.get('gru'))} "
            f"| {best_text} | {_num(paper.gru)} | {_num(paper.best)} ({paper.best_model}) |"
        )
    lines += ["", *target_lines(cells, docs="docs/")]
    if image:
        lines += ["", f"![stoixlite against the POPGym paper, per cell]({image})"]
    lines.append(README_END)
    return "\n".join(lines)


def update_readme(path: Path, block: str) -> str | None:
    """Replace the block between the markers in ``path``; ``None``, or one line saying why not."""
    try:
        text = path.read_text()
    except OSError as err:
        return f"cannot read --readme {path}: {err.strerror or err}"
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return f"--readme {path} has no block between {README_START!r} and {README_END!r}"
    try:
        path.write_text(text[:start] + block + text[end + len(README_END) :])
    except OSError as err:
        return f"cannot write --readme {path}: {err.strerror or err}"
    return None
