"""The table from a fresh clone: ``train --records <new folder>`` trains the cells of the
committed records (by default every model the pages show), one cell reproduced with the
README's command, and ``report`` writes nothing outside its output folder unless asked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import TINY
from test_popgym_table import table_here

from stoixlite.results.popgym_cells import (
    COLUMNS,
    best_memory_model,
    load_cells,
    table_cells,
)
from stoixlite.results.popgym_page import README_END, README_START
from stoixlite.results.popgym_records import (
    changed_settings,
    read_record,
    read_records,
    record_settings,
)
from stoixlite.table import checkout

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "results" / "popgym_table"
# 3 chunks of one update of 4 envs x 64 steps: the cell's shipped config, tiny
TINY_CELL = [*TINY, "system.rollout_length=64", "arch.total_timesteps=768"]
TINY_CELL += ["arch.num_evaluations=3", "logger.plot=false"]


def readme_train_command() -> list[str]:
    """The README's command that trains the table into a new records folder."""
    found = re.findall(r"`(python -m stoixlite\.table train --records \S+)`",
                       (ROOT / "README.md").read_text())  # fmt: skip
    assert found, "README.md names no `python -m stoixlite.table train --records DIR`"
    return found[0].split()


def test_train_covers_every_model_the_pages_show(tmp_path, capsys):
    """By default ``train`` into an empty folder trains mlp, gru, memoroid on every cell and the
    ports of the paper's best models: every model behind a column or an "our best" cell of the
    committed records, and only cells the committed records hold."""
    run = table_here(capsys, "train", "--records", str(tmp_path / "new"),
                     "--out", str(tmp_path / "out"), "--dry-run")  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    started = {tuple(line.split(": ")[0].split("] ")[1].split()) for line in out.splitlines()}
    assert started == set(table_cells())
    cells = load_cells(read_records(RECORDS))
    shown = {(e, d, m) for (e, d), models in cells.items() for m in COLUMNS if m in models}
    shown |= {(e, d, best_memory_model(models).model) for (e, d), models in cells.items()}
    assert shown <= started, sorted(shown - started)
    committed = {(e, d, m) for (e, d), models in cells.items() for m in models}
    assert started <= committed, sorted(started - committed)
    assert not (tmp_path / "new").exists() and not (tmp_path / "out").exists()


def test_a_fresh_records_folder_reproduces_a_cell(tmp_path):
    """The README's command, narrowed to one cell and run with a tiny budget, trains into a new
    records folder a record of the same cell as the committed one: the same seeds and the same
    command and settings but for the tiny overrides."""
    records = tmp_path / "my_records"
    cmd = [sys.executable if w == "python" else w for w in readme_train_command()]
    cmd[cmd.index("--records") + 1] = str(records)
    cell = ["--envs", "repeat_previous", "--difficulties", "easy", "--networks", "mlp"]
    run = subprocess.run(
        [*cmd, *cell, "--out", str(tmp_path / "out"), "--allow-changes", "--variant", "tiny",
         "--", *TINY_CELL],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    new = read_record(records / "repeat_previous" / "easy" / "mlp+tiny.json")
    old = read_record(RECORDS / "repeat_previous" / "easy" / "mlp.json")
    assert new["status"] == "done" and new["steps"] == new["budget"] == 768
    for key in ("env", "difficulty", "model", "seeds"):
        assert new[key] == old[key], key
    words = new["run_command"].split()
    tiny = [w for w in words if w in TINY_CELL]
    assert tiny == TINY_CELL

    def drop(ws: list[str]) -> list[str]:  # the tiny overrides and the run directory
        return [w for w in ws if w not in TINY_CELL and not w.startswith("hydra.run.dir=")]

    assert drop(words) == drop(old["run_command"].split())
    changed = set(changed_settings(old, record_settings(new)))
    named = {override.split("=")[0] for override in TINY_CELL}
    named |= {key.replace("network.", "network.memory.") for key in named}  # the model's own keys
    assert changed and changed <= named, changed - named


def test_report_writes_the_checkouts_docs_and_readme_only_when_asked(tmp_path, capsys,
                                                                    monkeypatch):  # fmt: skip
    """In a checkout, ``report`` writes its pages and figure into
    ``outputs/popgym_table_report/`` and leaves the docs and README.md alone; ``report --docs``
    rewrites the docs pages, the figure and the README's block, and names every file."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    readme = f"# stoixlite\n\n{README_START}\nold\n{README_END}\n\nmore\n"
    (repo / "README.md").write_text(readme)
    (repo / "docs" / "popgym_table.md").write_text("old page\n")
    monkeypatch.setattr(checkout, "CHECKOUT", repo)
    args = ["report", "--records", str(RECORDS), "--random-episodes", "0", "--no-settings-check"]
    run = table_here(capsys, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    made = repo / "outputs" / "popgym_table_report"
    files = ["popgym_table.md", "popgym_table_runs.md", "img/popgym_table.png"]
    assert out.strip() == "wrote " + ", ".join(str(made / f) for f in files), out
    assert (repo / "README.md").read_text() == readme
    assert (repo / "docs" / "popgym_table.md").read_text() == "old page\n"
    assert sorted(p.name for p in (repo / "docs").iterdir()) == ["popgym_table.md"]

    run = table_here(capsys, *args, "--docs")
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    wrote = [str(repo / "docs" / f) for f in files] + [str(repo / "README.md")]
    assert out.strip() == "wrote " + ", ".join(wrote), out
    assert (repo / "docs" / "popgym_table.md").read_text() == (made / "popgym_table.md").read_text()
    text = (repo / "README.md").read_text()
    assert text.startswith(f"# stoixlite\n\n{README_START}\n| env |"), text[:200]
    assert text.endswith(f"{README_END}\n\nmore\n")
