"""The POPGym table page: the trained cells of ``scripts/popgym_table.py`` against the paper.

Reads ``<out>/<env>/<difficulty>/<model>/`` (a run directory with the runner's ``cell.json``),
scores every seed (:func:`stoixlite.results.runs.seed_scores`), adds the random policy's return
(computed once per cell and cached in ``<out>/random.json``) and the paper's numbers
(:mod:`stoixlite.results.popgym_paper`), and writes a Markdown page and one figure.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS, PAPER, PaperCell
from stoixlite.results.runs import (
    RunReadError,
    SeedScores,
    run_config,
    run_wall_time,
    seed_scores,
)
from stoixlite.results.stats import LABEL, SeedSummary, summarize_seeds

CELL_FILE = "cell.json"
RANDOM_FILE = "random.json"
MEMORYLESS = ("mlp", "feedforward", "identity")
SLACK = 0.02  # a cell "matches" the paper's GRU at or above its MMER minus this


@dataclass
class ModelCell:
    """One model's run of one (env, difficulty): its seeds' scores and the runner's record."""

    model: str
    path: Path
    status: str
    scores: list[SeedScores] = field(default_factory=list)
    wall_s: float = math.nan
    attempts: list[dict] = field(default_factory=list)
    command: str = ""

    budget: int = 0

    @property
    def steps(self) -> int:
        """Env steps trained (per seed)."""
        return max((s.steps for s in self.scores), default=0)

    @property
    def partial(self) -> bool:
        """An interrupted cell with records: its MMER (a maximum over the updates trained) is a
        lower bound of the MMER its whole budget would give."""
        return self.status == "interrupted" and bool(self.scores)

    @property
    def scored(self) -> bool:
        """Finished, or interrupted with records."""
        return (self.status == "done" or self.partial) and bool(self.scores)

    @property
    def machine(self) -> str:
        """``"GPU"`` or ``"CPU"``: where its last attempt ran, with how many cells trained
        side by side there (``--jobs``) when more than one."""
        last = self.attempts[-1] if self.attempts else {}
        where = "GPU" if "GPU:" in last.get("machine", "") else "CPU"
        jobs = int(last.get("jobs", 1))
        return f"{where}, {jobs} cells at once" if jobs > 1 else where

    def stopped_early(self) -> bool:
        """Whether a finished run ended before its budget (an early stop at
        ``arch.target_return``): its MMER then covers only the steps trained."""
        return self.status == "done" and bool(self.scores) and self.steps < self.budget * 0.95

    def summary(self, key: str) -> SeedSummary:
        return summarize_seeds(getattr(s, key) for s in self.scores)


def load_cells(out: Path) -> dict[tuple[str, str], dict[str, ModelCell]]:
    """``{(env, difficulty): {model: ModelCell}}`` of every cell directory below ``out``."""
    cells: dict[tuple[str, str], dict[str, ModelCell]] = {}
    for marker in sorted(out.glob(f"*/*/*/{CELL_FILE}")):
        path = marker.parent
        env, difficulty, model = path.parts[-3:]
        record = json.loads(marker.read_text())
        cell = ModelCell(
            model=model,
            path=path,
            status=record.get("status", "unknown"),
            attempts=record.get("attempts", []),
            command=record.get("command", ""),
        )
        if cell.status in ("done", "interrupted"):
            try:
                cell.scores = seed_scores(path)
                cell.wall_s = run_wall_time(path)
                cell.budget = int(float(run_config(path).arch.total_timesteps))
            except (RunReadError, OSError, KeyError) as err:
                cell.scores = []
                if cell.status == "done":
                    cell.status = f"unreadable ({err})"
        cells.setdefault((env, difficulty), {})[model] = cell
    return cells


def random_baselines(out: Path, keys: Iterable[tuple[str, str]], episodes: int) -> dict:
    """``{"env/difficulty": mean return}`` of the random policy, cached in ``random.json``."""
    path = out / RANDOM_FILE
    cache = json.loads(path.read_text()) if path.exists() else {}
    missing = [k for k in keys if f"{k[0]}/{k[1]}" not in cache]
    if missing and episodes > 0:
        from stoixlite.results.random_policy import random_returns

        for env, difficulty in missing:
            returns = random_returns(f"popgym/{env}", difficulty, episodes)
            cache[f"{env}/{difficulty}"] = float(returns.mean())
        path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    elif missing:
        print(f"random policy not computed for {len(missing)} cell(s) (--random-episodes 0)")
    return cache


def best_memory_model(models: dict[str, ModelCell]) -> ModelCell | None:
    """The model with memory, trained with its shipped config (no ``+variant``), whose mean
    MMER is highest, finished or interrupted with records (``None`` when none)."""
    scored = [
        m for m in models.values() if m.scored and "+" not in m.model and m.model not in MEMORYLESS
    ]
    scored = [m for m in scored if m.summary("mmer").n]
    return max(scored, key=lambda m: m.summary("mmer").mean, default=None)


def _num(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _mmer(cell: ModelCell | None) -> str:
    if cell is None:
        return "not run"
    if cell.partial:
        return f"≥ {cell.summary('mmer').fmt()} (interrupted at {cell.steps / 1e6:.1f}M)"
    if cell.status != "done":
        return cell.status
    return cell.summary("mmer").fmt() + (" (stopped early)" if cell.stopped_early() else "")


def _paper(paper: PaperCell | None) -> tuple[str, str]:
    if paper is None:
        return "—", "—"
    return _num(paper.gru), f"{_num(paper.best)} ({paper.best_model})"


def _verdict(best: ModelCell | None, paper: PaperCell | None) -> str:
    if best is None or paper is None or not best.summary("mmer").n:
        return ""
    mean = best.summary("mmer").mean
    if mean > paper.best:
        return f"above best ({mean - paper.best:+.3f})"
    if mean >= paper.gru - SLACK:
        return f"at or above GRU ({mean - paper.gru:+.3f})"
    if best.partial:  # a lower bound below the paper says nothing yet
        return f"unfinished ({mean - paper.gru:+.3f} so far)"
    return f"**below GRU** ({mean - paper.gru:+.3f})"


def summary_table(cells, randoms) -> list[str]:
    lines = [
        "| env | difficulty | random | mlp | gru | best stoixlite (model) | paper GRU "
        "| paper best (model) | ours vs paper |",
        "|---|---|---:|---:|---:|---|---:|---|---|",
    ]
    for difficulty in DIFFICULTIES:
        for env in ENVS:
            models = cells.get((env, difficulty), {})
            paper = PAPER.get(env, {}).get(difficulty)
            best = best_memory_model(models)
            best_text = f"{_mmer(best)} ({best.model})" if best else "not run"
            random = randoms.get(f"{env}/{difficulty}", math.nan)
            gru, paper_best = _paper(paper)
            lines.append(
                f"| {env} | {difficulty} | {_num(random)} | {_mmer(models.get('mlp'))} "
                f"| {_mmer(models.get('gru'))} | {best_text} | {gru} | {paper_best} "
                f"| {_verdict(best, paper)} |"
            )
    return lines


def detail_table(cells) -> list[str]:
    lines = [
        "| env | difficulty | model | seeds | steps | MMER | MMER 95 % CI | final eval "
        "| final eval 95 % CI | best eval | wall s | on |",
        "|---|---|---|---|---:|---:|---|---:|---|---:|---:|---|",
    ]
    for difficulty in DIFFICULTIES:
        for env in ENVS:
            for model, cell in sorted(cells.get((env, difficulty), {}).items()):
                if not cell.scored:
                    lines.append(
                        f"| {env} | {difficulty} | {model} | | | {cell.status} | | | | | | |"
                    )
                    continue
                mmer, final, best = (cell.summary(k) for k in ("mmer", "final_eval", "best_eval"))
                seeds = ",".join(str(s.seed) for s in cell.scores)
                stop = f" of {cell.budget:.2e} (stopped early)" if cell.stopped_early() else ""
                stop = f" of {cell.budget:.2e} (interrupted)" if cell.partial else stop
                lines.append(
                    f"| {env} | {difficulty} | {model} | {seeds} | {cell.steps:.2e}{stop} "
                    f"| {mmer.fmt()} | {mmer.fmt_ci()} | {final.fmt()} | {final.fmt_ci()} "
                    f"| {best.fmt()} | {_num(cell.wall_s, 0)} | {cell.machine} |"
                )
    return lines


def target_lines(cells) -> list[str]:
    """How the published cells stand against the paper (computed, not written by hand)."""
    published = [(e, d) for e in PAPER for d in DIFFICULTIES]
    run = [(e, d) for e, d in published if best_memory_model(cells.get((e, d), {}))]
    matched = above = 0
    below, unfinished = [], []
    for env, difficulty in run:
        best = best_memory_model(cells[(env, difficulty)])
        paper = PAPER[env][difficulty]
        mean = best.summary("mmer").mean
        matched += mean >= paper.gru - SLACK
        above += mean > paper.best
        if mean < paper.gru - SLACK:
            text = f"{env} {difficulty} ({best.model} {mean:.3f} vs {paper.gru:.3f})"
            (unfinished if best.partial else below).append(text)
    partial = sum(best_memory_model(cells[key]).partial for key in run)
    lines = [
        f"- Published cells trained: {len(run)} of {len(published)}"
        + (f" ({partial} of them interrupted before their budget)." if partial else "."),
        f"- At or above the paper's GRU minus {SLACK}: {matched} of {len(run)}.",
        f"- Above the paper's best model: {above} of {len(run)}.",
    ]
    if below:
        lines.append("- Below the paper's GRU: " + "; ".join(below) + ".")
    if unfinished:
        lines.append("- Below so far, interrupted: " + "; ".join(unfinished) + ".")
    return lines


def provenance(cells) -> list[str]:
    attempts = [a for models in cells.values() for m in models.values() for a in m.attempts]
    commits = sorted({a.get("commit", "?") for a in attempts})
    machines = sorted({a.get("machine", "?") for a in attempts})
    dates = sorted(a.get("started", "") for a in attempts)
    span = f"{dates[0]} to {dates[-1]}" if dates else "n/a"
    return [
        f"- Commit(s) the runs were trained at: {', '.join(commits) or 'n/a'}.",
        f"- Machine(s): {'; '.join(machines) or 'n/a'} (JAX on the CPU unless named).",
        f"- Runs started {span} (UTC).",
    ]


def figure(cells, path: Path) -> bool:
    """Grouped bars per published cell that was run: our gru and best model, the paper's GRU
    and best. ``False`` when there is nothing to draw."""
    rows = []
    for difficulty in DIFFICULTIES:
        for env in PAPER:
            models = cells.get((env, difficulty), {})
            best = best_memory_model(models)
            if best is None:
                continue
            gru = models.get("gru")
            gru_mean = gru.summary("mmer").mean if gru and gru.scored else math.nan
            paper = PAPER[env][difficulty]
            rows.append(
                (f"{env}\n{difficulty}", gru_mean, best.summary("mmer").mean, paper.gru, paper.best)
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
        values = [r[k + 1] for r in rows]
        ax.bar(x + (k - 1.5) * width, values, width, label=label, color=colour)
    ax.set_xticks(x, [r[0] for r in rows], fontsize=7, rotation=0)
    ax.set_ylabel("MMER (mean of seeds)")
    ax.set_ylim(-1.0, 1.05)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", ncol=4, loc="lower center")
    ax.set_title("POPGym: stoixlite vs the POPGym paper (MMER)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _portable(command: str) -> str:
    """The command with its interpreter's path shown as ``python`` and this checkout's path
    left out (run from the repository root)."""
    head, _, rest = command.partition(" ")
    root = str(Path(__file__).resolve().parents[2]) + "/"
    return ("python " + rest if head.endswith(("python", "python3")) else command).replace(root, "")


def render(cells, randoms, figure_rel: str | None) -> str:
    commands = sorted({_portable(m.command) for models in cells.values() for m in models.values()})
    parts = [
        "# The POPGym table: stoixlite against the POPGym paper",
        "",
        "Made by `python scripts/popgym_table.py report` from the run directories that",
        "`python scripts/popgym_table.py train` trained with the shipped configs (every seed of a",
        "cell in one program, the config's budget). Do not edit by hand: re-run the report.",
        "A cell marked *stopped early* ended when its greedy evaluation reached",
        "`arch.target_return` (see its command): its MMER covers only the steps it trained,",
        "and the sampled training episodes lag the greedy policy, so it understates the cell.",
        "A cell marked *interrupted* (≥) was stopped before its budget and not yet resumed:",
        "its MMER, a maximum over the updates it trained, is a lower bound of the whole run's.",
        "Cells named `model+variant` ran with the overrides in their command (ablations); the",
        "summary columns use the shipped configs only.",
        "",
        "**MMER** (the paper's measure): the maximum over training of the mean return of the",
        "training episodes finished in one update (sampled actions); per cell the mean over",
        "seeds. **final eval**: the last evaluation (64 episodes, greedy or sampled as the env's",
        "config says). **random**: the uniformly random policy (512 episodes of the JAX port).",
        "The paper's numbers: POPGym (Morad et al., ICLR 2023), appendix MMER table, 3 trials,",
        "15M steps, "
        'RLlib PPO; "best" is the best of its 13 memory models; no number where the paper has',
        "none (—). Statistics: " + LABEL + ".",
        "",
        *provenance(cells),
        "",
        "## Where the published cells stand",
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
        "## Every trained model",
        "",
        "wall s: the run's own clock (`time/elapsed_s` of its last record: compile and",
        "evaluations included, summed over resumes). on: where the last attempt ran (the",
        "machines are listed above) and how many cells trained side by side on it.",
        "",
        *detail_table(cells),
        "",
        "## Commands",
        "",
        "Each cell's command as the runner issued it (an interrupted cell was resumed with",
        "`resume=<its directory>`):",
        "",
        "```",
        *commands,
        "```",
        "",
    ]
    return "\n".join(parts)


def write_report(args) -> int:
    """``scripts/popgym_table.py report``: write ``args.doc`` and ``args.figure``."""
    cells = load_cells(args.out)
    if not cells:
        print(f"error: no cells below {args.out} (train some first)")
        return 2
    keys = [(e, d) for e in ENVS for d in DIFFICULTIES]  # all 48 cells, run or not
    randoms = random_baselines(args.out, keys, args.random_episodes)
    drawn = figure(cells, args.figure)
    rel = None
    if drawn:
        try:
            rel = str(args.figure.resolve().relative_to(args.doc.resolve().parent))
        except ValueError:
            rel = str(args.figure)
    args.doc.write_text(render(cells, randoms, rel))
    print(f"wrote {args.doc}" + (f" and {args.figure}" if drawn else ""))
    return 0
