"""``scripts/popgym_table.py``: cells trained once (finished ones skipped, interrupted ones
resumed, ones stopped before their first checkpoint restarted), failures recorded and reported
non-zero, and a report whose numbers are the runs' own (MMER from the per-update returns)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
from conftest import SCRIPTS, TINY

from stoixlite.results.popgym_report import best_memory_model, load_cells
from stoixlite.results.runs import seed_scores
from stoixlite.tracking.jsonl import read_jsonl
from stoixlite.tracking.metrics import BEST_UPDATE_KEY

ROOT = SCRIPTS.parent
CELL = ["--envs", "repeat_previous", "--difficulties", "easy", "--seeds", "0", "1"]
# 3 chunks of one update of 4 envs x 64 steps: episodes (51 steps) end in every update
TINY_CELL = [*TINY, "system.rollout_length=64", "arch.total_timesteps=768"]
TINY_CELL += ["arch.num_evaluations=3", "logger.plot=false"]


def table(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "popgym_table.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_cells_train_skip_resume_and_report(tmp_path):
    out = tmp_path / "cells"
    args = ["train", *CELL, "--networks", "gru", "mlp", "--out", str(out), "--variant", "tiny"]
    first = table(*args, "--jobs", "2", "--", *TINY_CELL)  # both cells side by side
    assert first.returncode == 0, first.stdout + first.stderr
    for network in ("gru", "mlp"):
        cell = json.loads(
            (out / "repeat_previous" / "easy" / f"{network}+tiny" / "cell.json").read_text()
        )
        assert cell["status"] == "done" and cell["seeds"] == [0, 1]
        assert [a["exit"] for a in cell["attempts"]] == [0] and cell["attempts"][0]["wall_s"] > 0
        assert f"network={network}" in cell["command"] and "arch.num_seeds=2" in cell["command"]
        assert cell["attempts"][0]["jobs"] == 2 and cell["overrides"] == TINY_CELL

    again = table(*args, "--", *TINY_CELL)
    assert again.returncode == 0 and again.stdout.count("done, skipped") == 2, again.stdout

    # an interrupted cell (checkpoint, no cell.json) is resumed, not restarted
    gru = out / "repeat_previous" / "easy" / "gru+tiny"
    (gru / "cell.json").unlink()
    dry = table(*args, "--dry-run", "--", *TINY_CELL)
    assert f"resume={gru} arch.target_return=null" in dry.stdout, dry.stdout
    # one stopped before its first checkpoint starts afresh
    mlp = out / "repeat_previous" / "easy" / "mlp+tiny"
    (mlp / "cell.json").unlink()
    for ckpt in (mlp / "checkpoints").iterdir():
        subprocess.run(["rm", "-r", str(ckpt)], check=True)
    dry = table(*args, "--dry-run", "--", *TINY_CELL)
    assert "network=mlp" in dry.stdout and f"resume={mlp}" not in dry.stdout, dry.stdout
    assert (mlp / "metrics.jsonl").exists()  # a dry run deletes nothing
    # one interrupted whose records came without their checkpoints is kept, not retrained
    (mlp / "cell.json").write_text(json.dumps({"status": "interrupted", "command": "x"}))
    kept = table(*args, "--", *TINY_CELL)
    assert kept.returncode == 0 and "kept, not trained" in kept.stdout, kept.stdout
    assert (mlp / "metrics.jsonl").exists() and "network=mlp" not in kept.stdout
    (mlp / "cell.json").unlink()

    # MMER of each seed is the max over its records of the best per-update training return
    records = read_jsonl(gru / "metrics_per_seed.jsonl")
    for score in seed_scores(gru):
        mine = [r[BEST_UPDATE_KEY] for r in records if r["seed"] == score.seed]
        assert len(mine) == 3 and all(math.isfinite(m) for m in mine)
        assert score.mmer == max(mine)
    (gru / "cell.json").write_text(json.dumps({"status": "done", "command": "x"}))
    cells = load_cells(out)
    assert set(cells[("repeat_previous", "easy")]) == {"gru+tiny"}  # mlp is unfinished
    # an ablation (+variant) is listed but never the "best stoixlite" of a cell
    assert best_memory_model(cells[("repeat_previous", "easy")]) is None

    doc, fig = tmp_path / "table.md", tmp_path / "img" / "table.png"
    report = ["report", "--out", str(out), "--doc", str(doc), "--figure", str(fig),
              "--random-episodes", "0"]  # fmt: skip
    done = table(*report)
    assert done.returncode == 0, done.stdout + done.stderr
    text = doc.read_text()
    mmer = np.mean([s.mmer for s in seed_scores(gru)])
    assert f"{mmer:.3f}" in text and "gru+tiny" in text and "repeat_previous" in text
    assert "| repeat_first | hard |" in text  # every published cell has a row, run or not

    # the same run as an interrupted shipped-config cell: its MMER so far is a lower bound,
    # shown with ">=", and a lower bound under the paper is "unfinished", not "below"
    shipped = gru.parent / "gru"
    gru.rename(shipped)
    (shipped / "cell.json").write_text(json.dumps({"status": "interrupted", "command": "x"}))
    best = best_memory_model(load_cells(out)[("repeat_previous", "easy")])
    assert best.model == "gru" and best.partial and best.steps == 768
    partial = table(*report)
    assert partial.returncode == 0, partial.stdout + partial.stderr
    row = next(line for line in doc.read_text().splitlines()
               if line.startswith("| repeat_previous | easy | n/a |"))  # fmt: skip
    assert f"≥ {mmer:.3f}" in row and "interrupted at" in row, row
    assert ("unfinished" in row) == (mmer < 1.0 - 0.02) and "below GRU" not in row, row
    assert "of 7.68e+02 (interrupted)" in doc.read_text()
    assert fig.exists()


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


def test_overrides_need_a_variant_and_seeds_are_consecutive(tmp_path):
    bad = table("train", *CELL, "--out", str(tmp_path), "--", "system.lr=1e-3")
    assert bad.returncode == 2 and "--variant" in bad.stderr
    gap = table("train", "--seeds", "0", "2", "--out", str(tmp_path))
    assert gap.returncode == 2 and "consecutive" in gap.stderr
    net = table("train", *CELL, "--networks", "nope", "--out", str(tmp_path))
    assert net.returncode == 2 and "nope" in net.stderr
    for flag, value, key in (
        ("--stop-at", "abc", "arch.target_return"),
        ("--seeds", "-1", "arch.seed"),
    ):
        bad = table("train", *CELL[:4], flag, value, "--out", str(tmp_path), "--dry-run")
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and key in lines[0], bad.stderr
    assert not any(tmp_path.iterdir())


def test_ctrl_c_lets_the_cell_stop_cleanly_and_records_it(tmp_path):
    """Ctrl-C reaches the runner and its training process together: the runner waits for the
    training's own clean stop (checkpoint kept, exit 130), records the cell as interrupted,
    trains no further cell, and the same command resumes it."""
    import os
    import signal
    import time

    out = tmp_path / "cells"
    many = [*TINY_CELL, "arch.total_timesteps=76800", "arch.num_evaluations=100"]
    args = ["train", *CELL, "--networks", "gru", "mlp", "--out", str(out), "--variant", "long"]
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "popgym_table.py"), *args, "--", *many],
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
    os.killpg(proc.pid, signal.SIGINT)
    stdout, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, stdout
    record = json.loads((cell / "cell.json").read_text())
    assert record["status"] == "interrupted" and record["attempts"][-1]["exit"] == 130, record
    assert not (out / "repeat_previous" / "easy" / "mlp+long").exists(), stdout
    dry = table(*args, "--dry-run", "--", *many)
    assert f"resume={cell} arch.target_return=null" in dry.stdout, dry.stdout
