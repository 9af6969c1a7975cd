"""The POPGym table's pages, made from the records alone: the table's page, the page of every
trained model and the README's summary block (Markdown text; the numbers come from
:mod:`stoixlite.results.popgym_cells`)."""

from __future__ import annotations

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
    best_memory_model,
    memory_verdicts,
    standing,
)
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS, PAPER
from stoixlite.results.popgym_ports import ports_lines
from stoixlite.results.popgym_rebuild import cost_lines, rebuild_lines
from stoixlite.results.popgym_settings import settings_lines
from stoixlite.results.popgym_text import (
    best_verdict,
    gru_verdict,
    mmer_text,
    number,
    paper_text,
)
from stoixlite.results.stats import LABEL


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
            gru, paper_best = paper_text(paper)
            columns = " | ".join(mmer_text(models.get(m)) for m in COLUMNS)
            lines.append(
                f"| {env} | {difficulty} | {number(randoms.get(f'{env}/{difficulty}'))} "
                f"| {columns} | {best_text} | {gru} | {paper_best} "
                f"| {gru_verdict(models.get('gru'), paper)} | {best_verdict(best, paper)} |"
            )
    return lines


# Where the misses are discussed (relative to docs/).
MISSES = "learning.md#the-tables-misses-what-was-tried"


def target_lines(cells: Cells, docs: str = "") -> list[str]:
    """How the published cells stand against the paper
    (:func:`~stoixlite.results.popgym_cells.standing`);
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
        f"{len(now.gru_run)} trained with gru.",
        f"- Some stoixlite model at or above the paper's GRU minus {SLACK}: "
        f"{len(now.best_meets)} of {len(now.run)}.",
        f"- Above the paper's best model by more than the seeds' 95 % interval, not at the 1.0 "
        f"ceiling (a mean of {CEILING} or more): {len(above)}"
        + (": " + "; ".join(above) if above else "")
        + ".",
    ]
    if gru_below:
        lines.append("- Our gru below the paper's GRU: " + "; ".join(gru_below) + ".")
    if below:
        lines.append("- **Below the paper's GRU** (misses): " + "; ".join(below) + ".")
    if gru_below or below:
        lines.append(
            f"- What was tried on each cell below the paper's GRU, and why it stays there where "
            "known: "
            f"[learning.md]({docs}{MISSES})."
        )
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


def provenance(cells: Cells, source: str) -> list[str]:
    """Where the records came from: how many (in ``source``, the records folder), seeds,
    commits, machines and dates."""
    attempts = [
        a for models in cells.values() for m in models.values() for a in m.record["attempts"]
    ]
    trees = sorted({a.get("commit", "?") + _tree_note(a.get("tree", "clean")) for a in attempts})
    machines = sorted({str(a.get("machine", "?")) for a in attempts})
    dates = sorted(str(a.get("started", "")) for a in attempts)
    seeds = sorted({tuple(m.seeds()) for models in cells.values() for m in models.values()})
    return [
        f"- Records: {sum(len(m) for m in cells.values())} (`{source}`).",
        f"- Seeds: {'; '.join(','.join(map(str, s)) for s in seeds) or 'n/a'}.",
        f"- Commit(s) the runs were trained at: {', '.join(trees) or 'n/a'}.",
        f"- Machine(s): {'; '.join(machines) or 'n/a'} (JAX on the CPU unless a GPU is named).",
        f"- Runs started {dates[0] if dates else 'n/a'} to {dates[-1] if dates else 'n/a'} (UTC).",
    ]


INTRO = """\
# The POPGym table: stoixlite against the POPGym paper

Made by `python -m stoixlite.table report` from the records in `{source}`
(one JSON file per env x difficulty x model), which `python -m stoixlite.table train` writes
when a cell finishes or is interrupted; every number here is computed from them. Do not edit
by hand: re-run the report (`--docs` for this page in a checkout; a test rebuilds it from the
committed records and checks it is the one committed).

**MMER** is measured the paper's way: the mean return of the last 100 finished training
episodes (sampled actions), read at the end of every 65,536 env steps, maximised over training
(RLlib's `episode_reward_mean`, which the paper reports); per cell the mean over seeds. Beside
it, the **per-update MMER** (the mean return of the episodes finished in one update, maximised)
and the difference of the two per cell: the per-update maximum is noisier, so it reads higher on
short noisy episodes and lower where few episodes end in an update. **final eval**: the last
evaluation (64 episodes, greedy or sampled as the env's config says). **random**: the uniformly
random policy (512 episodes of the JAX port). A cell marked *interrupted* (≥) was stopped before
its budget: its MMER is a lower bound. A result marked † was trained with settings that have
changed since (the keys are in its record and on [{runs}]({runs})): `train` trains it
again. Cells named `model+variant` ran with the overrides in their record (ablations); the
summary columns use the shipped configs only.

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
- **Seeds**: the table reports seeds 10, 11 and 12 (the runner's default), none of the seeds
  the settings were chosen on: the per-(env, network) configs in `configs/env_network/popgym/`
  on seeds 100-102 (position_only_cartpole's gru on 100-108; repeat_first's chrono
  initialisation of gru and lstm earlier, on seeds 0-2), the per-env configs on seeds 0-2 or
  100-102; each file's comments name the runs that chose it, and
  [learning.md](learning.md#what-the-defaults-are-and-why) gives them.

## Where the records came from
"""


def budget_text(cells: Cells) -> str:
    """The budgets of the records, in millions of steps."""
    budgets = sorted({m.budget for models in cells.values() for m in models.values()})
    if not budgets:
        return "in each record"
    low, high = budgets[0] / 1e6, budgets[-1] / 1e6
    span = f"{low:g}M" if low == high else f"{low:g}M to {high:g}M steps"
    return f"{span} among the records here"


def render(
    cells: Cells, randoms: dict[str, float], figure_rel: str | None, runs_rel: str, source: str
) -> str:
    """The table's page: how it is measured, where the records came from, how the cells stand,
    every cell, the ports of the paper's best models, memory on the unpublished cells, the
    settings, and how to rebuild it; ``runs_rel`` links the page of every trained model,
    ``source`` names the records folder."""
    parts = [
        INTRO.format(label=LABEL, budgets=budget_text(cells), runs=runs_rel, source=source),
        *provenance(cells, source),
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
        "## The paper's best models, ported",
        "",
        *ports_lines(cells),
        "",
        "## Does memory help where the paper published nothing?",
        "",
        *memory_lines(cells),
        "",
        "## The settings",
        "",
        "What each record trained with, from its config: the budget (`arch.total_timesteps`, env",
        "steps per seed), learning rate, discount, GAE λ, entropy coefficient and rollout length,",
        "and any other setting that differs from most records (a memory model's own setting: from",
        "the model's default). Every other setting is stoixlite's default (\"What differs from",
        'the paper" above). Why each env and model has its settings:',
        "[learning.md](learning.md#what-the-defaults-are-and-why).",
        "",
        *settings_lines(cells),
        "",
        "## Every trained model",
        "",
        "Per model and cell (ablations and the other memory models included): seeds, steps, both",
        "MMERs and their difference, the 95 % interval, final and best evaluation, wall time and",
        f"where it ran, and the command that trained it: [{runs_rel}]({runs_rel}).",
        "",
        "## Rebuilding the table",
        "",
        *rebuild_lines(cells),
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
    lines += [
        "",
        "Reproduce it from a clone: `python -m stoixlite.table train --records my_records`, then",
        "`python -m stoixlite.table report --records my_records` (the pages, into",
        "`outputs/popgym_table_report/`). What the whole table costs, from the records' wall",
        "times:",
        "",
        *cost_lines(cells),
    ]
    if image:
        lines += ["", f"![stoixlite against the POPGym paper, per cell]({image})"]
    lines.append(README_END)
    return "\n".join(lines)
