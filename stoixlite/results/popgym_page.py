"""The POPGym table's pages, made from the records alone: the table's page, the page of every
trained model and the README's summary block (Markdown text; the numbers come from
:mod:`stoixlite.results.popgym_cells`)."""

from __future__ import annotations

import math

from stoixlite.results.popgym_cells import (
    CEILING,
    CHANGED,
    COLUMNS,
    KEY,
    MEMORYLESS,
    NONE,
    SLACK,
    VERDICT_COUNTS,
    Cells,
    ModelCell,
    above_best,
    best_memory_model,
    memory_verdicts,
    standing,
)
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS, PAPER, PaperCell
from stoixlite.results.stats import LABEL


def number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def mmer_text(cell: ModelCell | None) -> str:
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
    return number(paper.gru), f"{number(paper.best)} ({paper.best_model})"


def _gru_verdict(gru: ModelCell | None, paper: PaperCell | None) -> str:
    if gru is None or paper is None or not gru.scored:
        return ""
    mean = gru.summary(KEY).mean
    if mean >= paper.gru - SLACK:
        return f"meets ({mean - paper.gru:+.3f})"
    if gru.partial:
        return f"unfinished ({mean - paper.gru:+.3f} so far)"
    return f"**below** ({mean - paper.gru:+.3f})"


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
            best_text = f"{mmer_text(best)} ({best.model})" if best else "not run"
            gru, paper_best = _paper(paper)
            columns = " | ".join(mmer_text(models.get(m)) for m in COLUMNS)
            lines.append(
                f"| {env} | {difficulty} | {number(randoms.get(f'{env}/{difficulty}'))} "
                f"| {columns} | {best_text} | {gru} | {paper_best} "
                f"| {_gru_verdict(models.get('gru'), paper)} | {_best_verdict(best, paper)} |"
            )
    return lines


# Where the misses are discussed (relative to docs/).
MISSES = "popgym_results.md#the-tables-misses-what-was-tried"


NAMED_TARGETS = (
    ("repeat_previous", "medium", 0.5),
    ("count_recall", "easy", 0.51),
    ("multiarmed_bandit", "easy", 0.62),
)


def target_lines(cells: Cells, docs: str = "") -> list[str]:
    """How the cells stand against the paper (:func:`~stoixlite.results.popgym_cells.standing`);
    ``docs``: the path of docs/ from the page they go in (``""`` from a page in docs/)."""
    all_published = [(e, d) for d in DIFFICULTIES for e in PAPER]
    now = standing(cells)
    gru_below, below, above = [], [], []
    for env, difficulty in now.gru_below:
        gru, paper = cells[(env, difficulty)]["gru"], PAPER[env][difficulty]
        note = " interrupted" if gru.partial else ""
        note += f" {CHANGED}" if gru.changed else ""
        mean = gru.summary(KEY).mean
        gru_below.append(f"{env} {difficulty} ({mean:.3f}{note} vs {paper.gru:.3f})")
    for env, difficulty in now.best_below:
        models, paper = cells[(env, difficulty)], PAPER[env][difficulty]
        best = best_memory_model(models)
        note = ", interrupted" if best.partial else ""
        note += f", {CHANGED} earlier settings" if best.changed else ""
        missing = [m for m in COLUMNS if m not in MEMORYLESS and m not in models]
        note += f"; {', '.join(missing)} not run yet" if missing else ""
        mean = best.summary(KEY).mean
        below.append(f"{env} {difficulty} ({best.model} {mean:.3f} vs {paper.gru:.3f}{note})")
    for env, difficulty in now.above:
        best, paper = best_memory_model(cells[(env, difficulty)]), PAPER[env][difficulty]
        mean = best.summary(KEY).mean
        above.append(f"{env} {difficulty} ({best.model} {mean:.3f} vs {paper.best:.3f})")
    lines = [
        f"- Published cells trained: {len(now.run)} of {len(all_published)}.",
        f"- Our **gru** alone at or above the paper's GRU minus {SLACK}: {len(now.gru_meets)} of "
        f"{len(now.gru_run)} trained with gru (target: 18 of 24).",
        f"- Some stoixlite model at or above the paper's GRU minus {SLACK}: "
        f"{len(now.best_meets)} of {len(now.run)} (target: 24 of 24).",
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


def memory_lines(cells: Cells) -> list[str]:
    """Per unpublished cell: does a memory model beat mlp by more than the seeds' intervals
    (:func:`~stoixlite.results.popgym_cells.memory_verdicts`)? A sentence counting each verdict
    (naming the cells where none does), then the table."""
    verdicts = memory_verdicts(cells)
    if not verdicts:
        return ["No unpublished cell has both mlp and a memory model trained yet."]
    lines = []
    for v in verdicts:
        shown = f"**{v.verdict}**" if v.verdict == NONE else v.verdict
        best = v.best.summary(KEY)
        lines.append(
            f"| {v.env} | {v.difficulty} | {v.mlp.fmt()} | {best.fmt()} ({v.best.model}) "
            f"| {shown} |"
        )
    counts = "; ".join(
        f"{label}: {sum(v.verdict == verdict for v in verdicts)}"
        for verdict, label in VERDICT_COUNTS.items()
    )
    none = [f"{v.env} {v.difficulty}" for v in verdicts if v.verdict == NONE]
    named = f" ({', '.join(none)})" if none else ""
    return [
        f"Of the {len(lines)} unpublished cells trained with mlp and a memory model: "
        f"{counts}{named}.",
        "",
        "| env | difficulty | mlp | best memory model | verdict (95 % intervals) |",
        "|---|---|---:|---|---|",
        *lines,
    ]


def _tree_note(tree: str) -> str:
    """What an attempt's ``tree`` adds to its commit: nothing for a clean checkout."""
    if tree == "clean":
        return ""
    return " (an installed package)" if tree == "installed" else f" ({tree}, uncommitted)"


def provenance(cells: Cells) -> list[str]:
    attempts = [
        a for models in cells.values() for m in models.values() for a in m.record["attempts"]
    ]
    trees = sorted({a.get("commit", "?") + _tree_note(a.get("tree", "clean")) for a in attempts})
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


INTRO = """\
# The POPGym table: stoixlite against the POPGym paper

Made by `python -m stoixlite.table report --docs` from the records in `results/popgym_table/`
(one JSON file per env x difficulty x model, committed with the repository), which
`python -m stoixlite.table train` writes when a cell finishes or is interrupted. Do not
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
        "`python -m stoixlite.table train` trains every cell without a finished record",
        "(mlp, gru and memoroid on all 48 cells, seeds 10-12) and writes the records; a record",
        "trained with other settings than the cell's shipped config today trains afresh;",
        "`python -m stoixlite.table report --docs` rebuilds this page. On one GPU,",
        "`python -m stoixlite.table train --jobs 6 --time-limit 540 --records DIR",
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


README_START = "<!-- popgym-table: made by python -m stoixlite.table report --docs; do not edit -->"
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
        best_text = f"{mmer_text(best)} ({best.model})" if best else "not run"
        mlp, gru = mmer_text(models.get("mlp")), mmer_text(models.get("gru"))
        lines.append(
            f"| {env} | {difficulty} | {mlp} | {gru} "
            f"| {best_text} | {number(paper.gru)} | {number(paper.best)} ({paper.best_model}) |"
        )
    lines += ["", *target_lines(cells, docs="docs/")]
    if image:
        lines += ["", f"![stoixlite against the POPGym paper, per cell]({image})"]
    lines.append(README_END)
    return "\n".join(lines)
