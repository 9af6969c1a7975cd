"""``python -m stoixlite.table``: cells trained once (finished ones skipped, interrupted ones
resumed, ones stopped before their first checkpoint restarted), their records written to the
records folder and the page built from the records alone (no run directory), failures recorded
and reported non-zero, and a report whose numbers are the runs' own: the paper's MMER from the
100-episode window read every 65,536 steps, the per-update MMER from each update's episodes."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import SCRIPTS, TINY, compose_config
from omegaconf import OmegaConf

from stoixlite.results.machine import machine_description
from stoixlite.results.popgym_cells import best_memory_model, load_cells
from stoixlite.results.popgym_page import README_END, README_START
from stoixlite.results.popgym_records import read_record, read_records
from stoixlite.results.popgym_runs_page import grouped_commands
from stoixlite.table import cells as table_cells
from stoixlite.table import checkout, estimates, runner
from stoixlite.table.cells import Cell
from stoixlite.table.cli import main as table_main
from stoixlite.tracking.jsonl import read_jsonl
from stoixlite.tracking.metrics import BEST_UPDATE_KEY, LAST100_READ_KEY

ROOT = SCRIPTS.parent
CELL = ["--envs", "repeat_previous", "--difficulties", "easy", "--seeds", "0", "1"]
# 3 chunks of one update of 4 envs x 64 steps: episodes (51 steps) end in every update
TINY_CELL = [*TINY, "system.rollout_length=64", "arch.total_timesteps=768"]
TINY_CELL += ["arch.num_evaluations=3", "logger.plot=false"]
# 2 chunks of 2 updates of 64 envs x 512 steps (32,768): one 65,536-step reading per chunk
READ_CELL = [*TINY, "arch.num_envs=64", "system.rollout_length=512"]
READ_CELL += ["arch.total_timesteps=131072", "arch.num_evaluations=2", "logger.plot=false"]


def table(*args: str) -> subprocess.CompletedProcess:
    """The runner as users run it: its own process."""
    return subprocess.run(
        [sys.executable, "-m", "stoixlite.table", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def table_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """The runner's ``main`` in this process, for the commands that train nothing (dry runs,
    refusals, reports): the same exit code and output as :func:`table` without a process start
    and its imports. A refusal's exit (``SystemExit``) is its return code. The SIGINT handler
    the runner installs is this process's again afterwards."""
    import signal

    capsys.readouterr()
    handler = signal.getsignal(signal.SIGINT)
    try:
        code = table_main(list(args))
    except SystemExit as stop:
        code = stop.code
    finally:
        signal.signal(signal.SIGINT, handler)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


@pytest.fixture(scope="module")
def trained_cells(tmp_path_factory):
    """gru and mlp cells (2 seeds, ``READ_CELL``: two 65,536-step readings) trained once, side
    by side (``--jobs 2``), for the tests that read or alter them (each on its own copy:
    :func:`copy_cells`). Returns the run directories, the records and the runner's arguments."""
    root = tmp_path_factory.mktemp("trained")
    out, records = root / "cells", root / "records"
    args = ["train", *CELL, "--networks", "gru", "mlp", "--out", str(out), "--variant", "tiny",
            "--records", str(records), "--allow-changes"]  # fmt: skip
    first = table(*args, "--jobs", "2", "--", *READ_CELL)
    assert first.returncode == 0, first.stdout + first.stderr
    return out, records, args


def copy_cells(trained_cells, tmp_path):
    """A copy of :func:`trained_cells` under ``tmp_path``: (out, records, train arguments)."""
    out, records, args = trained_cells
    mine = (tmp_path / "cells", tmp_path / "records")
    shutil.copytree(out, mine[0])
    shutil.copytree(records, mine[1])
    swap = {str(out): str(mine[0]), str(records): str(mine[1])}
    return (*mine, [swap.get(a, a) for a in args])


def test_cells_train_skip_resume_and_report(trained_cells, tmp_path, capsys):
    out, records, args = copy_cells(trained_cells, tmp_path)  # both cells trained side by side
    for network in ("gru", "mlp"):
        path = records / "repeat_previous" / "easy" / f"{network}+tiny.json"
        record = read_record(path)
        assert record["status"] == "done" and record["seeds"] == [0, 1]
        assert record["steps"] == record["budget"] == 131072
        (attempt,) = record["attempts"]
        assert attempt["exit"] == 0 and attempt["wall_s"] > 0 and attempt["jobs"] == 2
        assert attempt["tree"] == "clean" or attempt["tree"].startswith("changes ")
        assert f"network={network}" in record["run_command"]
        assert "arch.num_seeds=2" in record["run_command"]
        assert record["overrides"] == READ_CELL and record["variant"] == "tiny"
        assert record["command"].startswith("python -m stoixlite.table train --envs")
        assert record["config"]["network"]["name"] == network
        # both MMERs of each seed are the maxima of the run's own per-seed records
        run = out / "repeat_previous" / "easy" / f"{network}+tiny"
        logged = read_jsonl(run / "metrics_per_seed.jsonl")
        for seed in record["per_seed"]:
            mine = [r for r in logged if r["seed"] == seed["seed"]]
            assert len(mine) == 2 and len(seed["curve"]["step"]) == 2
            reads = [r[LAST100_READ_KEY] for r in mine]
            assert all(math.isfinite(x) for x in reads)
            assert seed["mmer_paper"] == round(max(reads), 6)
            assert seed["mmer_update"] == round(max(r[BEST_UPDATE_KEY] for r in mine), 6)

    again = table_here(capsys, *args, "--", *READ_CELL)
    assert again.returncode == 0 and again.stdout.count("done, skipped") == 2, again.stdout

    # the page needs the records only: the run directories are gone
    shutil.rmtree(out)
    doc, fig = tmp_path / "table.md", tmp_path / "img" / "table.png"
    readme = tmp_path / "README.md"  # never the repository's own
    readme.write_text(f"x\n{README_START}\n{README_END}\ny\n")
    report = ["report", "--records", str(records), "--doc", str(doc), "--figure", str(fig),
              "--random-episodes", "0", "--readme", str(readme)]  # fmt: skip
    done = table(*report)
    assert done.returncode == 0, done.stdout + done.stderr
    text = doc.read_text()
    runs = (tmp_path / "table_runs.md").read_text()  # every model, beside the page
    assert "(table.md)" in runs and "(table_runs.md)" in text
    cells = load_cells(read_records(records))
    assert set(cells[("repeat_previous", "easy")]) == {"gru+tiny", "mlp+tiny"}
    # an ablation (+variant) is listed but never the "best stoixlite" of a cell
    assert best_memory_model(cells[("repeat_previous", "easy")]) is None
    gru = cells[("repeat_previous", "easy")]["gru+tiny"]
    mmer = np.mean([s["mmer_paper"] for s in gru.record["per_seed"]])
    assert f"{mmer:.3f}" in runs and "gru+tiny" in runs and "gru+tiny" not in text
    assert "| repeat_first | hard |" in text  # every published cell has a row, run or not
    block = readme.read_text()
    assert block.startswith(f"x\n{README_START}\n") and block.endswith(f"{README_END}\ny\n")
    assert "| repeat_first | hard |" in block

    # the same record as an interrupted shipped-config cell: its MMER so far is a lower bound
    record = gru.record | {"variant": None, "overrides": [], "status": "interrupted"}
    shipped = records / "repeat_previous" / "easy" / "gru.json"
    shipped.write_text(json.dumps(record | {"steps": 65536}))
    best = best_memory_model(load_cells(read_records(records))[("repeat_previous", "easy")])
    assert best.model == "gru" and best.partial
    partial = table_here(capsys, *report)
    assert partial.returncode == 0, partial.stdout + partial.stderr
    row = next(line for line in doc.read_text().splitlines()
               if line.startswith("| repeat_previous | easy | n/a |"))  # fmt: skip
    assert f"≥ {mmer:.3f} ± " in row and "(at 0.1M)" in row, row
    assert ("unfinished" in row) == (mmer < 1.0 - 0.02) and "below" not in row, row
    assert "of 1.31e+05 (interrupted)" in (tmp_path / "table_runs.md").read_text()
    assert fig.exists()
    # its config is not the shipped one (tiny sizes): `report` marks it; the variants, trained
    # with their own overrides, are current
    marked = read_record(shipped)["settings_changed"]
    assert {"arch.total_timesteps", "network.memory.hidden_size", "system.epochs"} <= set(marked)
    assert f"≥ {mmer:.3f} ± " in row and "(at 0.1M) †" in row, row
    assert "settings_changed" not in read_record(records / "repeat_previous/easy/gru+tiny.json")
    # trained with today's shipped config: the mark goes
    today = compose_config(["env=popgym/repeat_previous", "env.difficulty=easy", "network=gru"])
    shipped.write_text(json.dumps(record | {"config": OmegaConf.to_container(today)}))
    assert table_here(capsys, *report).returncode == 0
    assert "settings_changed" not in read_record(shipped)
    assert "(at 0.1M) †" not in doc.read_text() and "(at 0.1M)" in doc.read_text()


def test_interrupted_cells_resume_and_restart(trained_cells, tmp_path, capsys):
    out, records, args = copy_cells(trained_cells, tmp_path)
    # an interrupted cell with a checkpoint is resumed, not restarted
    gru = out / "repeat_previous" / "easy" / "gru+tiny"
    gru_record = records / "repeat_previous" / "easy" / "gru+tiny.json"
    gru_record.write_text(json.dumps(read_record(gru_record) | {"status": "interrupted"}))
    dry = table_here(capsys, *args, "--dry-run", "--", *READ_CELL)
    assert f"resume={gru} arch.target_return=null" in dry.stdout, dry.stdout
    # one whose run directory is absent (its record came from elsewhere) trains afresh
    mlp_record = records / "repeat_previous" / "easy" / "mlp+tiny.json"
    mlp_record.write_text(json.dumps(read_record(mlp_record) | {"status": "interrupted"}))
    shutil.rmtree(out / "repeat_previous" / "easy" / "mlp+tiny")
    dry = table_here(capsys, *args, "--dry-run", "--", *READ_CELL)
    assert "network=mlp" in dry.stdout and "resume=" + str(out / "x") not in dry.stdout
    # a garbled record is named in one line and replaced by training
    mlp_record.write_text("{not json")
    dry = table_here(capsys, *args, "--dry-run", "--", *READ_CELL)
    assert f"{mlp_record} is not a readable record" in dry.stdout, dry.stdout
    broken = table("report", "--records", str(records), "--doc", str(tmp_path / "t.md"),
                   "--figure", str(tmp_path / "t.png"), "--random-episodes", "0",
                   "--no-readme")  # fmt: skip
    assert broken.returncode == 2 and f"{mlp_record}" in broken.stdout, broken.stdout
    assert broken.stdout.count("\n") == 1 and "Traceback" not in broken.stderr


def test_commands_that_differ_only_in_networks_are_merged():
    train = "python -m stoixlite.table train"
    old = "python scripts/popgym_table.py train"  # older records name the script it moved from
    commands = [
        f"{old} --envs a --difficulties easy --networks mlp --seeds 10 11 12",
        f"{train} --envs a --difficulties easy --networks gru --seeds 10 11 12",
        f"{train} --envs a --difficulties easy --networks gru --seeds 10 11 12",
        f"{train} --envs a --difficulties easy --networks lmu --seeds 10 11 12 --stop-at 0.99",
        f"{train} --envs a --difficulties hard --networks memoroid",
        f"{train} --envs b",
    ]
    assert grouped_commands(commands) == [
        f"{train} --envs a --difficulties easy --networks gru mlp --seeds 10 11 12",
        f"{train} --envs a --difficulties easy --networks lmu --seeds 10 11 12 --stop-at 0.99",
        f"{train} --envs a --difficulties hard --networks memoroid",
        f"{train} --envs b",
    ]


def _locked(path) -> bool:
    """Whether another open file description holds an exclusive ``flock`` on ``path``."""
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_a_cell_another_runner_holds_or_finished_is_not_trained_again(
    trained_cells, tmp_path, capsys
):
    """Two runners sharing ``--out``: a cell the other one is training (its lock held) is
    skipped and its run directory left as it is; a cell the other one finished after this
    runner decided what was pending is skipped when its turn comes."""
    import argparse
    import fcntl
    import os

    out, records, args = copy_cells(trained_cells, tmp_path)
    easy = out / "repeat_previous" / "easy"
    for network in ("gru", "mlp"):  # both pending again: their records are unfinished
        path = records / "repeat_previous" / "easy" / f"{network}+tiny.json"
        path.write_text(json.dumps(read_record(path) | {"status": "interrupted"}))
    before = {p: p.stat().st_mtime_ns for p in easy.rglob("*") if p.is_file()}
    held = []
    for network in ("gru", "mlp"):  # another runner trains them
        fd = os.open(easy / f"{network}+tiny.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(fd)
    try:
        run = table_here(capsys, *args, "--", *READ_CELL)
    finally:
        for fd in held:
            os.close(fd)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("being trained by another runner") == 2, run.stdout
    assert "stoixlite.rec_ppo" not in run.stdout  # nothing started
    after = {p: p.stat().st_mtime_ns for p in easy.rglob("*") if p.is_file() and p in before}
    assert after == before  # nothing removed or rewritten

    ns = argparse.Namespace(seeds=[0, 1], stop_at="null", overrides=READ_CELL, variant="tiny")
    record = records / "repeat_previous" / "easy" / "gru+tiny.json"
    cell = Cell(1, "repeat_previous", "easy", "gru", easy / "gru+tiny", record)
    finished = read_record(record) | {"status": "done"}
    record.unlink()
    assert table_cells.pending(ns, cell, {})  # no record yet when this runner starts
    record.write_text(json.dumps(finished))  # the other runner finishes it
    capsys.readouterr()
    assert runner.claim(ns, cell, {}) is None
    assert "repeat_previous easy gru+tiny: done, skipped" in capsys.readouterr().out
    assert not _locked(easy / "gru+tiny.lock")  # not kept when the cell is skipped
    record.unlink()
    assert table_cells.pending(ns, cell, {})
    fd = runner.claim(ns, cell, {})  # still pending: taken
    assert fd is not None and _locked(easy / "gru+tiny.lock")
    os.close(fd)


def test_random_policy_matches_popgym():
    """The random-policy column against the popgym package's own env played with random
    actions (independent reference; 512 vs 400 episodes, means within 4 standard errors)."""
    from popgym.envs.repeat_previous import RepeatPreviousEasy

    from stoixlite.results.random_policy import random_returns

    ours = random_returns("popgym/repeat_previous", "easy", episodes=512, seed=3)
    env, rng, theirs = RepeatPreviousEasy(), np.random.default_rng(0), []
    for episode in range(400):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(4)))
            total, done = total + reward, terminated or truncated
        theirs.append(total)
    se = np.sqrt(np.var(ours) / len(ours) + np.var(theirs) / len(theirs))
    assert abs(ours.mean() - np.mean(theirs)) < 4 * se, (ours.mean(), np.mean(theirs), se)
    assert ours.shape == (512,) and np.all(ours >= -1) and np.all(ours <= 1)


def test_overrides_need_a_variant_and_seeds_are_consecutive(tmp_path, capsys):
    bad = table("train", *CELL, "--out", str(tmp_path), "--", "system.lr=1e-3")
    assert bad.returncode == 2 and "--variant" in bad.stderr
    gap = table_here(capsys, "train", "--seeds", "0", "2", "--out", str(tmp_path))
    assert gap.returncode == 2 and "consecutive" in gap.stderr
    net = table_here(capsys, "train", *CELL, "--networks", "nope", "--out", str(tmp_path))
    assert net.returncode == 2 and "nope" in net.stderr
    for flag, value, key in (
        ("--stop-at", "abc", "arch.target_return"),
        ("--seeds", "-1", "arch.seed"),
    ):
        bad = table_here(
            capsys, "train", *CELL[:4], flag, value, "--out", str(tmp_path), "--dry-run"
        )
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and key in lines[0], bad.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow(
    reason="a cell interrupted mid-training; the runner's records are tested by the other "
    "tests here"
)
def test_ctrl_c_lets_the_cell_stop_cleanly_and_records_it(tmp_path, capsys):
    """A SIGINT to the runner alone (a scheduler's stop; a terminal's Ctrl-C reaches the same
    process group, the training processes run in their own sessions): the runner passes it on,
    waits for the training's own clean stop (checkpoint kept, exit 130), records the cell as
    interrupted, trains no further cell, and the same command resumes it."""
    import os
    import signal
    import time

    out, records = tmp_path / "cells", tmp_path / "records"
    many = [*TINY_CELL, "arch.total_timesteps=76800", "arch.num_evaluations=100"]
    args = ["train", *CELL, "--networks", "gru", "mlp", "--out", str(out), "--variant", "long",
            "--records", str(records), "--allow-changes"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "stoixlite.table", *args, "--", *many],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C addresses
    )
    cell = out / "repeat_previous" / "easy" / "gru+long"
    deadline = time.monotonic() + 600
    while not any((cell / "checkpoints").glob("*")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.5)
    lock = cell.with_name("gru+long.lock")
    assert _locked(lock)  # the runner holds the cell while it trains
    os.killpg(proc.pid, signal.SIGINT)  # the trainings have their own sessions: the runner only
    stdout, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, stdout
    assert not _locked(lock)  # released by the runner and its training process
    record = json.loads((cell / "cell.json").read_text())
    assert record["status"] == "interrupted" and record["attempts"][-1]["exit"] == 130, record
    kept = read_record(records / "repeat_previous" / "easy" / "gru+long.json")
    assert kept["status"] == "interrupted" and 0 < kept["steps"] < kept["budget"], kept
    assert not (out / "repeat_previous" / "easy" / "mlp+long").exists(), stdout
    dry = table_here(capsys, *args, "--dry-run", "--", *many)
    assert f"resume={cell} arch.target_return=null" in dry.stdout, dry.stdout


def test_uncommitted_changes_are_named_by_their_diff_hash(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit, tree = checkout.git_state(repo)
    assert tree == "clean" and len(commit) >= 7
    (repo / "untracked.txt").write_text("not part of the tree")
    assert checkout.git_state(repo)[1] == "clean"
    (repo / "f.py").write_text("x = 2\n")
    first = checkout.git_state(repo)[1]
    (repo / "f.py").write_text("x = 3\n")
    second = checkout.git_state(repo)[1]
    assert first.startswith("changes ") and second.startswith("changes ") and first != second


def test_time_limit_starts_the_cells_that_fit(tmp_path, capsys):
    """Estimates come from the records on the same kind of machine: the same cell's
    seconds per step, else the slowest of the same model; cells over the limit are not
    started, known ones go first, unknown ones after."""
    records = tmp_path / "records"
    machine = machine_description()

    def record(env, model, wall, steps=1000, jobs=1):
        path = records / env / "easy" / f"{model}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "env": env, "difficulty": "easy", "model": model, "variant": None,
            "status": "interrupted", "per_seed": [], "budget": 10 * steps, "steps": steps,
            "wall_s": wall, "seeds": [0], "attempts": [{"machine": machine, "jobs": jobs}],
        }))  # fmt: skip

    record("repeat_first", "gru", 10.0)  # 0.01 s per step
    record("autoencode", "gru", 200.0, jobs=4)  # slowest gru: 0.05 s per step and cell at once
    rates = estimates.wall_estimates([records], "GPU:" in machine)
    cell = Cell(1, "repeat_first", "easy", "gru", tmp_path / "x" / "gru", tmp_path / "r")
    assert estimates.estimate(cell, 2000, rates, jobs=1) == 20.0
    assert estimates.estimate(cell, 2000, rates, jobs=3) == 60.0  # three cells share the machine
    other = Cell(2, "higher_lower", "easy", "gru", tmp_path / "y" / "gru", tmp_path / "r")
    assert estimates.estimate(other, 2000, rates, jobs=1) == 100.0
    mlp = Cell(3, "higher_lower", "easy", "mlp", tmp_path / "y" / "mlp", tmp_path / "r")
    assert estimates.estimate(mlp, 2000, rates, jobs=1) is None
    # the whole runner, dry, with a 60 s limit: repeat_first gru (0.01 s x its budget) does
    # not fit; higher_lower gru, recorded at 1e-6 s per step, fits and goes first; the cells of
    # a model with no record anywhere (here nor in results/popgym_table: no estimate) follow in
    # order
    record("higher_lower", "gru", 0.001)
    recorded = {r["model"] for r in read_records(ROOT / "results" / "popgym_table")}
    networks = sorted(p.stem for p in (ROOT / "configs" / "network").glob("*.yaml"))
    unknown = next(m for m in networks if m not in recorded)
    args = ["train", "--envs", "repeat_first", "higher_lower", "--difficulties", "easy",
            "--networks", "gru", unknown, "--records", str(records), "--out",
            str(tmp_path / "o"), "--time-limit", "60", "--dry-run"]  # fmt: skip
    dry = table_here(capsys, *args)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    lines = dry.stdout.splitlines()
    assert any("repeat_first easy gru: about" in line and "not started" in line for line in lines)
    started = [line.split(": ")[0].split("] ")[1] for line in lines if "stoixlite.rec_ppo" in line]
    expected = ["higher_lower easy gru", f"repeat_first easy {unknown}"]
    assert started == [*expected, f"higher_lower easy {unknown}"], dry.stdout


@pytest.mark.slow  # trains for the whole limit (150 s)
def test_time_limit_stops_the_training_cells_and_records_them(tmp_path):
    """At ``--time-limit`` the cells still training get Ctrl-C, stop cleanly and are recorded
    as interrupted; the runner exits 0 (nothing failed) and starts nothing more."""
    import time

    out, records = tmp_path / "cells", tmp_path / "records"
    long = [*TINY_CELL, "arch.total_timesteps=7680000", "arch.num_evaluations=10000"]
    start = time.monotonic()
    run = table("train", *CELL, "--networks", "gru", "mlp", "--out", str(out), "--variant",
                "long", "--records", str(records), "--allow-changes", "--time-limit", "150",
                "--", *long)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert time.monotonic() - start < 600
    assert "--time-limit 150.0 s reached" in run.stdout, run.stdout
    path = records / "repeat_previous" / "easy" / "gru+long.json"
    assert path.exists(), run.stdout
    record = read_record(path)
    assert record["status"] == "interrupted" and record["attempts"][-1]["exit"] == 130
    assert 0 < record["steps"] < record["budget"]
    assert not (records / "repeat_previous" / "easy" / "mlp+long.json").exists()


def test_paper_best_trains_the_papers_winners_and_published_cells_go_first(tmp_path, capsys):
    """``--networks paper_best``: the port of the paper's best model of each published cell
    (both of a tie, none where every model tied or the paper has no number), published cells
    before unpublished ones."""
    assert table_cells.cell_networks(["gru", "paper_best"], "repeat_previous", "medium") == [
        "gru",
        "lmu",
    ]
    assert table_cells.cell_networks(["paper_best"], "count_recall", "hard") == [
        "positional_mlp",
        "tcn",
    ]
    assert table_cells.cell_networks(["paper_best", "gru"], "autoencode", "easy") == ["gru"]
    assert table_cells.cell_networks(["paper_best"], "position_only_cartpole", "hard") == []
    assert table_cells.cell_networks(["paper_best"], "battleship", "medium") == []
    args = ["train", "--envs", "battleship", "multiarmed_bandit", "--difficulties", "easy",
            "hard", "--networks", "mlp", "paper_best", "--records", str(tmp_path / "r"),
            "--out", str(tmp_path / "o"), "--dry-run"]  # fmt: skip
    dry = table_here(capsys, *args)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    started = [line.split(": ")[0].split("] ")[1] for line in dry.stdout.splitlines()]
    assert started == [
        "multiarmed_bandit easy mlp",
        "multiarmed_bandit easy elman",
        "multiarmed_bandit hard mlp",
        "multiarmed_bandit hard tcn",
        "battleship easy mlp",
        "battleship hard mlp",
    ], dry.stdout


def test_a_record_trained_with_other_settings_trains_afresh(tmp_path, capsys):
    """A record whose config differs from the cell's shipped config today (a default changed
    since) is trained again from scratch, and its replacement may be an unfinished record."""
    from conftest import run_config

    from stoixlite.results.popgym_records import changed_settings, write_record

    shipped = ROOT / "results" / "popgym_table" / "autoencode" / "easy" / "memoroid.json"
    record = read_record(shipped)
    cell = ["env=popgym/autoencode", "env.difficulty=easy", "network=memoroid"]
    assert changed_settings(record, run_config(cell)) == []
    assert changed_settings(record, run_config([*cell, "system.lr=0.1"])) == ["system.lr"]
    assert changed_settings(record, run_config([*cell, "arch.seed=5"])) == []  # not a setting
    assert changed_settings({**record, "config": {"arch": 1}}, run_config(cell)) == ["config"]
    # a memory key the record's config leaves out (added to the model since) is the model's
    # default: unchanged while today's value is that default, changed when it is not
    ind = ["env=popgym/autoencode", "env.difficulty=easy", "network=indrnn"]
    older = {**record, "config": OmegaConf.to_container(compose_config(ind))}
    del older["config"]["network"]["bias_max"]
    assert changed_settings(older, run_config(ind)) == []
    assert changed_settings(older, run_config([*ind, "network.bias_max=0"])) == [
        "network.memory.bias_max"
    ]

    records = tmp_path / "records"
    path = records / "autoencode" / "easy" / "memoroid.json"
    path.parent.mkdir(parents=True)
    write_record(path, record)
    args = ["train", "--envs", "autoencode", "--difficulties", "easy", "--networks", "memoroid",
            "--records", str(records), "--out", str(tmp_path / "o"), "--dry-run"]  # fmt: skip
    dry = table_here(capsys, *args)
    assert "autoencode easy memoroid: done, skipped" in dry.stdout, dry.stdout + dry.stderr
    stale = json.loads(json.dumps(record))
    stale["config"]["system"]["lr"] = 0.1
    write_record(path, stale)
    dry = table_here(capsys, *args)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "its record trained with other settings (system.lr): trained afresh" in dry.stdout
    assert "stoixlite.rec_ppo env=popgym/autoencode" in dry.stdout  # a fresh run, no resume=

    unfinished = {**record, "status": "interrupted", "steps": 1}
    assert runner.keep_record(path, unfinished)  # today's settings replace the stale record
    write_record(path, record)
    assert not runner.keep_record(path, unfinished)  # same settings: the finished one stays


def test_an_installed_package_names_its_places(tmp_path, capsys, monkeypatch):
    """Without a source checkout (a wheel: no committed records, no docs) ``train`` and
    ``report`` need ``--records``, ``report`` needs ``--out`` and refuses ``--docs`` (one line
    each, exit 2); ``train --out`` defaults to ``outputs/popgym_table`` of the current directory
    and records name the package's version instead of a commit."""
    monkeypatch.setattr(checkout, "CHECKOUT", None)
    monkeypatch.chdir(tmp_path)
    records = tmp_path / "records"
    for args, named in (
        (["train", "--dry-run"], "--records"),
        (["report"], "--records"),
        (["report", "--records", str(records)], "--out"),
        (["report", "--records", str(records), "--docs"], "--out"),
    ):
        run = table_here(capsys, *args)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1 and named in lines[0], (args, run.stderr)
    dry = table_here(capsys, "train", *CELL[:4], "--networks", "mlp", "--records", str(records),
                     "--dry-run")  # fmt: skip
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"hydra.run.dir={tmp_path / 'outputs' / 'popgym_table'}/repeat_previous" in dry.stdout
    assert checkout.git_state(None) == (checkout.package_version(), "installed")
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_the_old_script_path_runs_the_moved_tool():
    """``scripts/popgym_table.py`` is a wrapper of ``python -m stoixlite.table``."""
    run = subprocess.run(
        [sys.executable, str(SCRIPTS / "popgym_table.py"), "--help"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0 and "python -m stoixlite.table" in run.stdout, run.stdout
    assert "train" in run.stdout and "report" in run.stdout


def test_a_cell_whose_runner_was_killed_is_resumed(trained_cells, tmp_path, capsys):
    """What a runner killed with SIGKILL while a cell trains leaves behind (``cell.json`` saying
    ``running``, a checkpoint, no record yet, the lock released with the dead processes): the
    next ``train`` resumes the cell from its checkpoint."""
    out, records, args = copy_cells(trained_cells, tmp_path)
    run = out / "repeat_previous" / "easy" / "gru+tiny"
    book = json.loads((run / "cell.json").read_text())
    (run / "cell.json").write_text(json.dumps(book | {"status": "running"}))
    (records / "repeat_previous" / "easy" / "gru+tiny.json").unlink()
    dry = table_here(capsys, *args, "--dry-run", "--", *READ_CELL)
    assert f"resume={run} arch.target_return=null" in dry.stdout, dry.stdout
    assert "mlp+tiny: done, skipped" in dry.stdout


def _children(pid: int) -> list[int]:
    """The process ids of ``pid``'s children (Linux)."""
    import pathlib

    text = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


@pytest.mark.slow  # trains a cell twice over (about 2 minutes on 2 cores)
def test_a_runner_killed_with_its_training_resumes_the_cell(tmp_path):
    """The runner and its training process killed with SIGKILL after the cell's first
    checkpoint (a lost machine): the same command resumes the cell and records it finished,
    both attempts in its record."""
    import os
    import signal
    import time

    out, records = tmp_path / "cells", tmp_path / "records"
    many = [*TINY_CELL, "arch.total_timesteps=76800", "arch.num_evaluations=100"]
    args = ["train", *CELL, "--networks", "gru", "--out", str(out), "--variant", "long",
            "--records", str(records), "--allow-changes", "--", *many]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "stoixlite.table", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    cell = out / "repeat_previous" / "easy" / "gru+long"
    deadline = time.monotonic() + 600
    while not table_cells.has_checkpoint(cell) and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.2)
    training = _children(proc.pid)  # killed a moment after its first finished checkpoint
    proc.send_signal(signal.SIGKILL)
    for pid in training:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    time.sleep(1.0)  # the training process is reaped by init
    assert not (records / "repeat_previous" / "easy" / "gru+long.json").exists()
    again = table(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resume={cell}" in again.stdout, again.stdout
    record = read_record(records / "repeat_previous" / "easy" / "gru+long.json")
    assert record["status"] == "done" and record["steps"] == record["budget"] == 76800
    first, second = record["attempts"]
    assert first["exit"] is None and second["exit"] == 0, record["attempts"]
