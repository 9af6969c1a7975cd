"""docs/popgym_table.md and the README's POPGym block are exactly what the committed records in
``results/popgym_table/`` make: the page is rebuilt from the records alone and compared."""

from __future__ import annotations

import json
import shutil
from argparse import Namespace
from pathlib import Path

import pytest

from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS
from stoixlite.results.popgym_records import read_randoms, read_records
from stoixlite.results.popgym_report import write_report

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "results" / "popgym_table"


def test_committed_page_and_readme_block_are_rebuilt_from_the_records(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    doc = tmp_path / "docs" / "popgym_table.md"
    doc.parent.mkdir()
    args = Namespace(
        records=RECORDS,
        doc=doc,
        figure=tmp_path / "docs" / "img" / "popgym_table.png",
        readme=readme,
        random_episodes=0,
    )
    assert write_report(args) == 0
    assert doc.read_text() == (ROOT / "docs" / "popgym_table.md").read_text(), (
        "docs/popgym_table.md differs from the records: run python scripts/popgym_table.py report"
    )
    assert readme.read_text() == (ROOT / "README.md").read_text(), (
        "README.md's POPGym block differs from the records: run scripts/popgym_table.py report"
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
    args = Namespace(
        records=tmp_path, doc=tmp_path / "d.md", figure=tmp_path / "f.png", readme=None,
        random_episodes=0,
    )  # fmt: skip
    assert write_report(args) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and str(tmp_path / "a" / "easy" / "gru.json") in out[0], out
    assert not (tmp_path / "d.md").exists()
