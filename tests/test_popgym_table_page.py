"""docs/popgym_table.md, docs/popgym_table_runs.md and the README's POPGym block are exactly what
the committed records in ``results/popgym_table/`` make: the pages are rebuilt from the records
alone and compared."""

from __future__ import annotations

import json
import re
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
    source = "results/popgym_table"  # as `report --docs` names the committed records
    assert write_report(RECORDS, doc, figure, readme=readme, random_episodes=0, source=source) == 0
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


# A table cell named in prose: "<env> <difficulty>" (or "<env>[<difficulty>]", "<env>, <d>").
CELL_NAME = re.compile(rf"\b({'|'.join(ENVS)})(?: |\[|, )({'|'.join(DIFFICULTIES)})\b")
# A sentence about other runs than the table's: another seed range, named.
OTHER_SEEDS = re.compile(r"\bseeds? (?:0|1|2|100|101|102|103)\b|\bseeds? 0-2\b")


def sentences(text: str) -> list[str]:
    """Table rows and prose sentences (wrapped lines joined) of a Markdown page."""
    found = []
    for para in re.split(r"\n\s*\n", text):
        if para.lstrip().startswith("|"):
            found += para.splitlines()
        else:
            found += re.split(r"(?<=[.;:])\s+(?=[A-Z(])|; ", " ".join(para.split()))
    return found


def misquoted_prose(text: str, cells) -> list[str]:
    """Numbers quoted for the table's cells in prose: in a sentence (or table row) that names
    exactly one cell ("count_recall hard") and no other seeds, a model of that cell's records
    followed by a number ("positional_mlp -0.470", "gru ≥ 0.512 ± 0.004") must give the
    records' mean (and sd, where one follows), as the page writes them."""
    models = sorted({m for ms in cells.values() for m in ms if "+" not in m}, key=len, reverse=True)
    pair = re.compile(rf"\b({'|'.join(models)})\b:? (?:≥ )?(-?\d\.\d{{3}})(?: ± (\d\.\d{{3}}))?")
    wrong = []
    for sentence in sentences(text):
        named = set(CELL_NAME.findall(sentence))
        if len(named) != 1 or OTHER_SEEDS.search(sentence):
            continue
        ((env, difficulty),) = named
        for model, mean, sd in pair.findall(sentence):
            cell = cells.get((env, difficulty), {}).get(model)
            if cell is None or not cell.scored:
                continue
            want = cell.summary(KEY)
            if mean != f"{want.mean:.3f}" or (sd and sd != f"{want.sd:.3f}"):
                got = f"{mean} ± {sd}" if sd else mean
                wrong.append(f"{env} {difficulty} {model}: quoted {got}, the records give "
                             f"{want.fmt()}")  # fmt: skip
    return wrong


def test_docs_quote_the_tables_cells_as_the_records_give_them():
    """Every number the README and the docs quote for a cell of the POPGym table is the records'
    own: in tables after :data:`QUOTE_MARK` and in prose (:func:`misquoted_prose`); a retrained
    cell cannot leave an old number behind on another page."""
    cells = load_cells(read_records(RECORDS))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        _, wrong = misquoted(text, cells)
        wrong += misquoted_prose(text, cells)
        assert not wrong, f"{page.relative_to(ROOT)}: " + "; ".join(wrong)
    # the checks catch a changed number, a lost lower bound and a cell without a record
    row = "| multiarmed_bandit medium | tcn | {} | x |"
    table = f"{QUOTE_MARK}\n\n| cell | model | MMER | x |\n|---|---|---|---|\n"
    mab = cells[("multiarmed_bandit", "medium")]["tcn"].summary(KEY).fmt()
    assert misquoted(table + row.format(f"**{mab}**"), cells) == (1, [])
    for bad in ("0.123 ± 0.004", f"≥ {mab}"):
        assert len(misquoted(table + row.format(bad), cells)[1]) == 1, bad
    assert misquoted(table + "| autoencode easy | nope | 0.1 | x |", cells)[1] == [
        "autoencode easy nope: no record with results"
    ]
    hard = cells[("count_recall", "hard")]["positional_mlp"].summary(KEY)
    right = f"On count_recall hard our positional_mlp {hard.mean:.3f} beats the paper."
    assert misquoted_prose(right, cells) == []
    assert misquoted_prose(f"count_recall\nhard: positional_mlp {hard.fmt()}.", cells) == []
    wrong = "On count_recall hard our positional_mlp -0.470 ± 0.010 beats the paper."
    assert misquoted_prose(wrong, cells) == [
        f"count_recall hard positional_mlp: quoted -0.470 ± 0.010, the records give {hard.fmt()}"
    ]
    assert misquoted_prose("| count_recall hard | gru -0.100 at 8M | x |", cells) != []
    assert misquoted_prose("count_recall hard, seeds 100-102: gru -0.100.", cells) == []


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
