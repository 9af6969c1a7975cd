"""``python -m stoixlite.table train`` trains cells that share one compiled program as one
program (variants of a cell that change only values the program takes as inputs): each cell's
record is the record of the cell trained alone (up to float rounding), its attempt names the
program's cells; cells that cannot share a program train alone with one line saying why;
``--no-fuse`` trains every cell alone; Ctrl-C stops a fused program cleanly, recording every
cell, and the next ``train`` resumes each cell alone."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from test_popgym_table import CELL, ROOT, TINY_CELL, _locked, table, table_here

from stoixlite.cli.args import checked_run_config
from stoixlite.results.popgym_records import read_record
from stoixlite.table.cells import shipped_overrides
from stoixlite.tracking.jsonl import read_jsonl

EASY = ("repeat_previous", "easy")
PROGRAM = [f"{EASY[0]}/{EASY[1]}/gru+lo", f"{EASY[0]}/{EASY[1]}/gru+hi"]


def train_args(out, records, *variants: str) -> list[str]:
    return ["train", *CELL, "--networks", "gru", "--out", str(out), "--records", str(records),
            "--allow-changes", "--variant", *variants]  # fmt: skip


@pytest.fixture(scope="module")
def fused_and_alone(tmp_path_factory):
    """Two variants of the gru cell (``system.lr`` 0.001 and 0.003: one program) trained by one
    ``train``, and the first of them trained alone by another; returns their records folders
    and the fused run's output."""
    root = tmp_path_factory.mktemp("fused")
    fused = table(*train_args(root / "out", root / "rec", "lo", "hi"), "--",
                  *TINY_CELL, "system.lr=0.001,0.003")  # fmt: skip
    assert fused.returncode == 0, fused.stdout + fused.stderr
    alone = table(*train_args(root / "out1", root / "rec1", "lo"), "--",
                  *TINY_CELL, "system.lr=0.001")  # fmt: skip
    assert alone.returncode == 0, alone.stdout + alone.stderr
    return root / "rec", root / "rec1", fused.stdout


def _close(a, b, path: str = "") -> None:
    """``a`` and ``b`` (records' JSON) equal, numbers within float rounding (the records keep
    6 decimals)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{k}]")
    elif isinstance(a, float) and not isinstance(b, str):
        assert b is not None and math.isclose(a, b, rel_tol=1e-5, abs_tol=2e-6), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_a_fused_cell_records_what_the_cell_alone_records(fused_and_alone):
    fused_records, alone_records, stdout = fused_and_alone
    assert "gru+lo, gru+hi: train as one program" in stdout, stdout
    fused = read_record(fused_records / EASY[0] / EASY[1] / "gru+lo.json")
    alone = read_record(alone_records / EASY[0] / EASY[1] / "gru+lo.json")
    assert fused["status"] == alone["status"] == "done"
    assert fused["steps"] == fused["budget"] == 768
    same = ["schema", "env", "difficulty", "model", "variant", "overrides", "status", "command",
            "budget", "steps", "seeds", "config"]  # fmt: skip
    assert {k: fused[k] for k in same} == {k: alone[k] for k in same}
    # the command that trains it alone, in its own directory
    assert fused["run_command"].replace("/out/", "/out1/") == alone["run_command"]
    _close(fused["per_seed"], alone["per_seed"])
    assert len(fused["per_seed"]) == 2 and len(fused["per_seed"][0]["curve"]["step"]) == 3
    other = read_record(fused_records / EASY[0] / EASY[1] / "gru+hi.json")
    assert other["config"]["system"]["lr"] == 0.003 and other["overrides"][-1] == "system.lr=0.003"
    # its own lr: the returns of 3 tiny updates may not tell, the losses do
    runs = fused_records.parent / "out" / EASY[0] / EASY[1]
    lo, hi = (read_jsonl(runs / name / "metrics.jsonl")[-1] for name in ("gru+lo", "gru+hi"))
    assert lo["loss/value"] != hi["loss/value"]


def test_the_record_names_the_program_that_trained_it(fused_and_alone):
    fused_records, alone_records, _ = fused_and_alone
    for name in ("gru+lo", "gru+hi"):
        record = read_record(fused_records / EASY[0] / EASY[1] / f"{name}.json")
        (attempt,) = record["attempts"]
        assert attempt["program"] == PROGRAM and attempt["exit"] == 0
        assert attempt["command"].startswith("python -m stoixlite.table.fused_cells --results ")
        # the command that trains this cell again (alone, its own variant)
        assert record["command"].endswith(f"--variant {name[4:]} -- " + " ".join(
            record["overrides"]))  # fmt: skip
    (alone,) = read_record(alone_records / EASY[0] / EASY[1] / "gru+lo.json")["attempts"]
    assert "program" not in alone  # a cell alone: its record as before
    assert alone["command"].startswith("python -m stoixlite.rec_ppo ")


def test_the_page_of_every_model_says_which_cells_shared_a_program(fused_and_alone):
    """The "on" column of popgym_table_runs.md: a fused cell's program counts among the cells
    trained at once, and is named; a cell alone reads as before."""
    from stoixlite.results.popgym_cells import ModelCell

    fused_records, alone_records, _ = fused_and_alone
    fused = read_record(fused_records / EASY[0] / EASY[1] / "gru+lo.json")
    alone = read_record(alone_records / EASY[0] / EASY[1] / "gru+lo.json")
    where = ModelCell("gru+lo", alone).machine  # CPU or GPU: where the tests run
    assert ModelCell("gru+lo", fused).machine == f"{where}, 2 cells at once (2 in one program)"
    assert ModelCell("gru+lo", fused).jobs == 2 and ModelCell("gru+lo", alone).jobs == 1
    assert where in ("CPU", "GPU")


def test_cells_that_cannot_share_a_program_train_alone_with_one_line(tmp_path, capsys):
    out, records = tmp_path / "o", tmp_path / "r"
    # other hidden sizes: other shapes, other programs; the lr variants share one
    run = table_here(capsys, *train_args(out, records, "a", "b", "c"), "--dry-run", "--",
                     *TINY_CELL, "network.hidden_size=8,8,16")  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "[1,2] repeat_previous easy gru+a, gru+b: train as one program" in lines, lines
    assert ("[3] repeat_previous easy gru+c: trains alone: no other pending cell shares its "
            "program (its settings change the compiled program)") in lines  # fmt: skip
    assert sum("stoixlite.table.fused_cells" in line for line in lines) == 1
    assert sum("stoixlite.rec_ppo" in line and "gru+c" in line for line in lines) == 1
    # --no-fuse: every cell its own process
    run = table_here(capsys, *train_args(out, records, "a", "b"), "--no-fuse", "--dry-run",
                     "--", *TINY_CELL, "system.lr=0.001,0.003")  # fmt: skip
    assert "fused_cells" not in run.stdout and run.stdout.count("stoixlite.rec_ppo") == 2
    # cells of different networks never share one: one line for all
    (records / EASY[0] / EASY[1]).mkdir(parents=True)
    for network, variant, lr in (("gru", "b", "0.003"), ("mlp", "a", "0.001")):  # finished
        overrides = [*shipped_overrides(*EASY, network), "arch.seed=0", "arch.num_seeds=2",
                     "arch.target_return=null", *TINY_CELL, f"system.lr={lr}"]  # fmt: skip
        cfg, error = checked_run_config(overrides)
        done = {"env": EASY[0], "difficulty": EASY[1], "status": "done", "seeds": [0, 1],
                "per_seed": [], "attempts": [], "budget": 1, "model": network,
                "config": cfg.to_dict()}  # fmt: skip
        path = records / EASY[0] / EASY[1] / f"{network}+{variant}.json"
        path.write_text(json.dumps(done))
    run = table_here(capsys, "train", *CELL, "--networks", "gru", "mlp", "--out", str(out),
                     "--records", str(records), "--allow-changes", "--variant", "a", "b",
                     "--dry-run", "--", *TINY_CELL, "system.lr=0.001,0.003")  # fmt: skip
    assert "each cell trains alone: no two pending cells have the same env" in run.stdout
    assert run.stdout.count("stoixlite.rec_ppo") == 2, run.stdout
    assert not any(out.iterdir()) if out.exists() else True


def test_variant_names_must_match_the_combinations(tmp_path, capsys):
    for names, overrides, key in (
        (["a", "b"], ["system.lr=0.001,0.003", "system.ent_coef=0,0.01"], "2 name(s) for the 4"),
        (["a", "a"], ["system.lr=0.001,0.003"], "each name once"),
        (["a", "b"], ["system.lr=interval(0,1)"], "an interval is not a list of values"),
    ):
        bad = table_here(capsys, *train_args(tmp_path, tmp_path, *names), "--dry-run", "--",
                         *overrides)  # fmt: skip
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and key in lines[0], bad.stderr


@pytest.mark.slow(reason="a fused program interrupted mid-training; its records are tested by "
                  "the other tests here")  # fmt: skip
def test_ctrl_c_stops_a_fused_program_and_each_cell_resumes(tmp_path, capsys):
    """SIGINT to the runner: the fused program saves every cell's checkpoint and stops; each
    cell is recorded as interrupted (exit 130) with its program, its lock released; the same
    command resumes each cell alone from its checkpoint."""
    out, records = tmp_path / "cells", tmp_path / "records"
    many = [*TINY_CELL, "arch.total_timesteps=76800", "arch.num_evaluations=100"]
    args = train_args(out, records, "lo", "hi")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stoixlite.table", *args, "--", *many, "system.lr=0.001,0.003"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    cells = [out / EASY[0] / EASY[1] / name for name in ("gru+lo", "gru+hi")]
    deadline = time.monotonic() + 600
    while not all(any((c / "checkpoints").glob("*")) for c in cells):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.5)
    assert all(_locked(c.with_name(c.name + ".lock")) for c in cells)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, stdout
    for cell in cells:
        assert not _locked(cell.with_name(cell.name + ".lock"))
        book = json.loads((cell / "cell.json").read_text())
        assert book["status"] == "interrupted" and book["attempts"][-1]["exit"] == 130, book
        kept = read_record(records / EASY[0] / EASY[1] / f"{cell.name}.json")
        assert kept["status"] == "interrupted" and 0 < kept["steps"] < kept["budget"], kept
        assert kept["attempts"][-1]["program"] == PROGRAM
    assert not list(cells[0].parent.glob("*.program.json"))  # read and removed
    dry = table_here(capsys, *args, "--dry-run", "--", *many, "system.lr=0.001,0.003")
    for cell in cells:
        assert f"{cell.name}: trains alone: it resumes from its checkpoint" in dry.stdout
        assert f"resume={cell} arch.target_return=null" in dry.stdout, dry.stdout


def test_a_fused_records_wall_time_is_shared_by_its_programs_cells(tmp_path):
    """``--time-limit``'s rates: a fused cell's wall time (its program's) divided by the
    program's cells, as a cell alone's by the cells beside it (``jobs``); a program's estimate
    is the sum of its cells'."""
    from stoixlite.results.machine import machine_description
    from stoixlite.table import estimates, runner
    from stoixlite.table.cells import Cell

    machine = machine_description()
    for name, program in (("gru+lo", PROGRAM), ("gru+hi", PROGRAM), ("mlp", None)):
        attempt = {"machine": machine, "jobs": 2} | ({"program": program} if program else {})
        path = tmp_path / EASY[0] / EASY[1] / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "env": EASY[0], "difficulty": EASY[1], "model": name[:3], "status": "done",
            "variant": name[4:] or None, "per_seed": [], "budget": 1000, "steps": 1000,
            "wall_s": 40.0, "seeds": [0], "attempts": [attempt],
        }))  # fmt: skip
    rates = estimates.wall_estimates([tmp_path], "GPU:" in machine)
    assert rates["exact"][(*EASY, "gru+lo")] == 0.01  # 40 s / 1000 steps / (2 jobs x 2 cells)
    assert rates["exact"][(*EASY, "mlp")] == 0.02
    cells = [Cell(k, *EASY, "gru", tmp_path / "o" / n, tmp_path / "r") for k, n in
             enumerate(("gru+lo", "gru+hi"))]  # fmt: skip
    for cell in cells:
        cell.estimate = estimates.estimate(cell, 1000, rates, jobs=2)
    assert runner.unit_estimate(cells) == 40.0  # the program's wall time again


def test_the_program_process_refuses_a_malformed_command_line(capsys):
    from stoixlite.table.fused_cells import main, parse_argv

    results, cells = parse_argv(["--results", "r.json", "--cell", "a", "x=1", "--cell", "b"])
    assert str(results) == "r.json" and [(str(d), o) for d, o in cells] == [("a", ["x=1"]),
                                                                            ("b", [])]  # fmt: skip
    for argv in (
        [],
        ["--results", "r"],
        ["--results", "r", "x=1", "--cell", "a"],
        ["--results", "r", "--cell", "a"],
        ["--results", "r", "--cell", "--cell", "b"],
    ):
        assert main(argv) == 2  # fmt: skip
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stoixlite.table.fused_cells: "), lines
