"""docs/popgym_table.md, docs/popgym_table_runs.md and the README's POPGym block are exactly what
the committed records in ``results/popgym_table/`` make: the pages are rebuilt from the records
alone and compared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stoixlite.results.popgym_cells import KEY, load_cells
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS
from stoixlite.results.popgym_records import read_randoms, read_records
from stoixlite.table.report import write_report

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "results" / "popgym_table"
# A docs table that quotes the POPGym table's cells follows this line: rows of
# `| <env> <difficulty> | <model> | <MMER> | ...`, the MMER as the page gives it (mean ± sample
# sd; "≥ " before an interrupted cell's; bold allowed).
QUOTE_MARK = "<!-- quotes results/popgym_table: | env difficulty | model | MMER | -->"


def misquoted(text: str, cells) -> tuple[int, list[str]]:
    """The rows of the tables after :data:`QUOTE_MARK` in ``text``: how many, and those whose
    MMER is not the one the records give (or whose cell has no record), each named."""
    rows, wrong, lines = 0, [], text.splitlines()
    for start in (i for i, line in enumerate(lines) if line.strip() == QUOTE_MARK):
        table = []
        for line in lines[start + 1 :]:
            if not line.startswith("|"):
                if table:
                    break
                continue
            table.append(line)
        for line in table[2:]:  # after the header and its rule
            first, model, quoted = (c.strip() for c in line.strip("|").split("|")[:3])
            env, difficulty = first.split()
            rows += 1
            cell = cells.get((env, difficulty), {}).get(model.strip("`"))
            if cell is None or not cell.scored:
                wrong.append(f"{first} {model}: no record with results")
                continue
            want = cell.summary(KEY).fmt()
            want = f"≥ {want}" if cell.partial else want
            if quoted.replace("*", "").strip() != want:
                wrong.append(f"{first} {model}: quoted {quoted}, the records give {want}")
    return rows, wrong


def test_committed_page_and_readme_block_are_rebuilt_from_the_records(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    doc = tmp_path / "docs" / "popgym_table.md"
    doc.parent.mkdir()
    figure = tmp_path / "docs" / "img" / "popgym_table.png"
    assert write_report(RECORDS, doc, figure, readme=readme, random_episodes=0) == 0
    for page in ("popgym_table.md", "popgym_table_runs.md"):
        assert (doc.parent / page).read_text() == (ROOT / "docs" / page).read_text(), (
            f"docs/{page} differs from the records: run python -m stoixlite.table report --docs"
        )
    assert readme.read_text() == (ROOT / "README.md").read_text(), (
        "README.md's POPGym block differs from the records: "
        "run python -m stoixlite.table report --docs"
    )


def test_records_are_complete_and_small():
    randoms = read_randoms(RECORDS)
    assert set(randoms) == {f"{e}/{d}" for e in ENVS for d in DIFFICULTIES}
    records = read_records(RECORDS)
    for record in records:
        assert record["env"] in ENVS and record["difficulty"] in DIFFICULTIES
        assert len(record["per_seed"]) == len(record["seeds"]) >= 3
        assert all(a.get("tree") == "clean" for a in record["attempts"]), record["command"]
        for seed in record["per_seed"]:
            assert len(seed["curve"]["step"]) <= 300
    size = sum(p.stat().st_size for p in RECORDS.rglob("*") if p.is_file())
    assert size < 8 * 2**20, f"results/popgym_table holds {size} bytes"


@pytest.mark.parametrize("garble", ["{not json", json.dumps({"env": "x"})])
def test_a_garbled_record_is_named_in_one_line(tmp_path, garble, capsys):
    (tmp_path / "a" / "easy").mkdir(parents=True)
    (tmp_path / "a" / "easy" / "gru.json").write_text(garble)
    assert write_report(tmp_path, tmp_path / "d.md", tmp_path / "f.png", random_episodes=0) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and str(tmp_path / "a" / "easy" / "gru.json") in out[0], out
    assert not (tmp_path / "d.md").exists()


def test_docs_quote_the_tables_cells_as_the_records_give_them():
    """Pages that quote cells of the POPGym table (a table after :data:`QUOTE_MARK`) give the
    records' numbers: a retrained cell cannot leave an old number behind on another page."""
    cells = load_cells(read_records(RECORDS))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    counted = {}
    for page in pages:
        rows, wrong = misquoted(page.read_text(), cells)
        assert not wrong, f"{page.relative_to(ROOT)}: " + "; ".join(wrong)
        counted[page.name] = rows
    assert counted["popgym_baselines.md"] >= 9, counted
    # the check catches a changed number, a lost lower bound and a cell without a record
    row = "| multiarmed_bandit medium | tcn | {} | x |"
    table = f"{QUOTE_MARK}\n\n| cell | model | MMER | x |\n|---|---|---|---|\n"
    mab = cells[("multiarmed_bandit", "medium")]["tcn"].summary(KEY).fmt()
    assert misquoted(table + row.format(f"**{mab}**"), cells) == (1, [])
    for bad in ("0.123 ± 0.004", f"≥ {mab}"):
        assert len(misquoted(table + row.format(bad), cells)[1]) == 1, bad
    assert misquoted(table + "| autoencode easy | nope | 0.1 | x |", cells)[1] == [
        "autoencode easy nope: no record with results"
    ]


def test_an_unwritable_runs_page_is_named_in_one_line(tmp_path, capsys):
    """``report --runs-doc`` naming a folder: one line naming the option, exit 2."""
    doc, figure = tmp_path / "d.md", tmp_path / "f.png"
    assert write_report(RECORDS, doc, figure, runs_doc=tmp_path, random_episodes=0) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"error: cannot write --runs-doc {tmp_path}: Is a directory"], out


def test_the_unpublished_cells_verdicts_are_counted_and_the_misses_named():
    """The sentence above the unpublished cells' table counts the rows of each verdict and names
    every cell where no memory model is above mlp."""
    from stoixlite.results.popgym_page import memory_lines

    lines = memory_lines(load_cells(read_records(RECORDS)))
    rows = [line for line in lines if line.startswith("| ") and "verdict" not in line]
    summary = lines[0]
    assert summary.startswith(f"Of the {len(rows)} unpublished cells"), summary
    for verdict, label in (
        ("| memory above mlp |", "above mlp by more than the seeds' intervals"),
        ("| memory ahead, intervals overlap |", "intervals overlapping"),
        ("| **no memory model above mlp** |", "no memory model above mlp"),
    ):
        assert f"{label}: {sum(row.endswith(verdict) for row in rows)}" in summary, summary
    for row in rows:
        if row.endswith("| **no memory model above mlp** |"):
            env, difficulty = (c.strip() for c in row.strip("|").split("|")[:2])
            assert f"{env} {difficulty}" in summary.split("above mlp: ")[-1], (row, summary)
