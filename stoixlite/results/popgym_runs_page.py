"""The POPGym table's page of every trained model: one row per record (seeds, steps, both
MMERs and their difference, the interval, evaluations, wall time, where it ran), then the
``train`` commands the records came from. Made from the records alone, like the table's page
(:mod:`stoixlite.results.popgym_page`)."""

from __future__ import annotations

from collections.abc import Iterable

from stoixlite.results.popgym_cells import CHANGED, KEY, Cells, nan_if_none
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS
from stoixlite.results.popgym_text import number
from stoixlite.results.stats import summarize_seeds


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
                    nan_if_none(s.get(KEY)) - nan_if_none(s.get("mmer_update"))
                    for s in cell.record["per_seed"]
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
                    f"| {number(diff.mean)} | {final.fmt()} | {best.fmt()} "
                    f"| {number(cell.record.get('wall_s'), 0)} | {cell.machine} |"
                )
    return lines


# The runner's command before it moved into the package (older records name it; it still runs,
# as a wrapper of the one below).
OLD_RUNNER = "python scripts/popgym_table.py"
RUNNER = "python -m stoixlite.table"


def current_command(command: str) -> str:
    """A record's ``train`` command as it is typed today (:data:`OLD_RUNNER` as :data:`RUNNER`)."""
    return RUNNER + command[len(OLD_RUNNER) :] if command.startswith(OLD_RUNNER) else command


def grouped_commands(commands: Iterable[str]) -> list[str]:
    """The records' ``train`` commands (:func:`current_command`), those that differ only in
    ``--networks`` merged into one (``--networks gru memoroid mlp``), sorted."""
    networks: dict[tuple[str, str], list[str]] = {}
    for command in commands:
        words = current_command(command).split()
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


COLUMN_NOTES = (
    "difference: the paper's statistic minus the per-update MMER (mean over seeds). wall s:",
    "the run's own clock (compile and evaluations included, summed over resumes). on: where",
    "the last attempt ran and how many cells trained side by side there.",
)


def render_runs(cells: Cells, page_rel: str, source: str) -> str:
    """The page of every trained model (``page_rel``: the table's page, linked back; ``source``:
    the records folder): one row per record, then the ``train`` commands the records came
    from."""
    commands = grouped_commands(
        m.record["command"] for models in cells.values() for m in models.values()
    )
    return "\n".join(
        [
            "# The POPGym table: every trained model",
            "",
            f"Made with [{page_rel}]({page_rel}) by `python -m stoixlite.table report` from the",
            f"records in `{source}`; do not edit by hand. MMER, statistics and marks (≥, †) as",
            f"on [{page_rel}]({page_rel}).",
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
