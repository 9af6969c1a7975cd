"""End-to-end runs: tiny budgets, every core network on CartPole and repeat_previous."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY, compose_config

from stoixlite.cli.overrides import resume_in_place
from stoixlite.rec_ppo import train
from stoixlite.tracking.jsonl import read_jsonl


def assert_metrics_written(run_dir: Path, env: str) -> list[dict]:
    """The records of a TINY run (2 evaluations) in ``run_dir``: every loss, speed and return
    finite, the replay identity held, the config and the learning-curve plot written."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [64, 128]
    for key in (
        "train/sps",
        "loss/total",
        "loss/entropy",
        "eval/episode_return",
        "train/explained_variance",
    ):
        assert all(r[key] is not None and math.isfinite(r[key]) for r in records), key
    assert records[-1]["loss/first_ratio_max_dev"] < 1e-5
    assert (run_dir / "config.yaml").read_text().count(env) >= 1
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    return records


# (Every popgym env trains under gru in test_popgym_training.py.) CartPole's gru trains in a
# fresh process in test_cli_runs_from_any_directory; its mlp and lstm under `pytest -m slow`:
# the same entry point and metrics as the gru and the popgym mlp, each a learner compiled anew
# (5-60 s of CPU).
@pytest.mark.parametrize(
    ("env", "network"),
    [
        pytest.param("gymnax/CartPole-v1", "mlp", marks=pytest.mark.slow),
        pytest.param("gymnax/CartPole-v1", "gru", marks=pytest.mark.slow),
        pytest.param("gymnax/CartPole-v1", "lstm", marks=pytest.mark.slow),
        ("popgym/repeat_previous", "mlp"),
    ],
)
def test_train_writes_metrics(tmp_path, env, network):
    cfg = compose_config([f"env={env}", f"network={network}", *TINY])
    final = train(cfg, tmp_path)
    records = assert_metrics_written(tmp_path, env)
    assert len(records) == cfg.arch.num_evaluations
    assert final == records[-1]["eval/episode_return"]


@pytest.mark.slow(
    reason="CI's packaging step trains from another directory with the installed wheel "
    "(test_packaging.py)"
)
def test_cli_runs_from_any_directory(tmp_path):
    """`python -m stoixlite.rec_ppo` finds its configs from an unrelated working directory."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoixlite.rec_ppo",
            "env=gymnax/CartPole-v1",
            *TINY,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},  # this checkout
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = assert_metrics_written(run_dir, "gymnax/CartPole-v1")  # the default network: gru
    assert f"final eval return {records[-1]['eval/episode_return']:.4f}" in proc.stdout
    assert (run_dir / ".hydra" / "config.yaml").exists()

    # A resume logs into the run's own directory: no new (empty) output directory beside it,
    # and the run's .hydra/ as its first start wrote it.
    hydra_files = {p.name: p.read_text() for p in (run_dir / ".hydra").iterdir()}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoixlite.rec_ppo",
            "resume=run",
            "arch.total_timesteps=256",
            "arch.num_evaluations=4",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [64, 128, 192, 256]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert {p.name: p.read_text() for p in (run_dir / ".hydra").iterdir()} == hydra_files


def test_resume_in_place_overrides(tmp_path, monkeypatch):
    odd = tmp_path / "it's a run"
    odd.mkdir()
    assert resume_in_place([f"resume={odd}"]) == [
        f"hydra.run.dir='{str(odd).replace(chr(39), chr(92) + chr(39))}'",
        "hydra.output_subdir=null",
    ]
    assert resume_in_place([f"resume={tmp_path}", "system.lr=1e-3"])[0] == (
        f"hydra.run.dir={tmp_path}"
    )
    # left to Hydra: a multirun, an explicit run dir, a directory that does not exist
    assert resume_in_place(["-m", f"resume={tmp_path}"]) == []
    assert resume_in_place([f"resume={tmp_path}", "hydra.run.dir=x"]) == []
    assert resume_in_place([f"resume={tmp_path / 'missing'}"]) == []
    assert resume_in_place(["resume="]) == []
    monkeypatch.chdir(tmp_path)
    (tmp_path / "null").mkdir()  # resume=null is Hydra's None, not a directory named null
    assert resume_in_place(["resume=null"]) == []


def test_litter_removal_tolerates_another_process_cleaning_the_same_directory(
    tmp_path, monkeypatch
):
    """The processes of a multi-process run share one run directory and may clean it at the
    same moment: a log that vanishes between the listing and the size check (a dangling link
    here, deterministically) and a directory that fills up are left alone, without an error."""
    from stoixlite import rec_ppo

    run_dir = tmp_path / "out" / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "gone.log").symlink_to(run_dir / "removed-by-the-other-process.log")
    (run_dir / "empty.log").touch()
    monkeypatch.setattr(rec_ppo, "_EXISTED", {tmp_path})
    rec_ppo._remove_litter(run_dir)
    assert not (run_dir / ".hydra").exists()
    assert not (run_dir / "empty.log").exists()
    assert (run_dir / "gone.log").is_symlink()  # not ours to remove: the other process's
    assert run_dir.is_dir()  # not empty (the link), so kept, and no error


def test_litter_removal_tolerates_the_directory_vanishing_while_it_is_listed(tmp_path, monkeypatch):
    """Another process of the same run removes the whole run directory just as this one lists
    its logs: nothing is left to clean, and no error (which would change the exit code)."""
    import shutil
    from pathlib import Path

    from stoixlite import rec_ppo

    run_dir = tmp_path / "out" / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    glob = Path.glob

    def vanishing_glob(self: Path, pattern: str):
        shutil.rmtree(run_dir)  # the other process, between the listing's start and its scan
        return glob(self, pattern)

    monkeypatch.setattr(Path, "glob", vanishing_glob)
    monkeypatch.setattr(rec_ppo, "_EXISTED", {tmp_path})
    rec_ppo._remove_litter(run_dir)
    assert not run_dir.exists() and not (tmp_path / "out").exists()
