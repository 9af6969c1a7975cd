"""The soak benchmark's own logic (``python -m stoixlite.benchmark.soak``): which jobs it makes
fail, how it reads the failed-jobs summary, and what it calls a problem. The soak itself runs for
hours and is not a test (its figures are in docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoixlite.benchmark import soak
from stoixlite.benchmark.soak import (
    growth,
    job_dirs,
    job_number,
    named_jobs,
    problems,
    sweep_seeds,
)
from stoixlite.cli.sweep_callback import failure_summary


def test_the_failing_seeds_are_spread_and_counted():
    for jobs, failing in [(100, 10), (7, 3), (5, 5), (10, 0), (1, 1)]:
        seeds = sweep_seeds(jobs, failing)
        bad = [i for i, s in enumerate(seeds) if s < 0]
        assert len(seeds) == jobs and len(bad) == failing
        assert len(set(seeds)) == jobs  # every job its own seed
    bad = [i for i, s in enumerate(sweep_seeds(100, 10)) if s < 0]
    assert bad == list(range(9, 100, 10))


def test_the_summary_names_are_read_exactly(tmp_path):
    """``1/error.txt`` is not read out of ``11/error.txt``: the names are the list's items."""
    sweep = tmp_path / "sweep"
    names = ["11_popgym-repeat_previous_gru_seed-1", "3", "101_cartpole_seed_7"]
    line = failure_summary(sweep, [sweep / n / "error.txt" for n in names], 120)
    assert named_jobs(line) == [11, 3, 101]
    assert named_jobs("multirun: nothing in braces") == []
    for name in [*names, "1_x", "20"]:
        (sweep / name).mkdir(parents=True)
    (sweep / ".hydra").mkdir()
    (sweep / "x_1").mkdir()
    assert [job_number(p.name) for p in job_dirs(sweep)] == [1, 3, 11, 20, 101]


def _multirun(**changes) -> dict:
    result = {
        "exit": 1,
        "jobs_meant_to_fail": [9, 19],
        "failed_jobs": [9, 19],
        "summary_lines": ["multirun: 2 of 20 jobs failed, the others finished; errors in s/{...}"],
        "failed_jobs_named_in_summary": [9, 19],
        "litter_beside_the_sweep": [],
        "left_in_tmp": [],
        "unfinished_checkpoints": [],
    }
    return {**result, **changes}


def test_what_the_multirun_soak_calls_a_problem():
    assert problems("multirun", _multirun()) == []
    found = {
        "exit": problems("multirun", _multirun(exit=0)),
        "missed": problems("multirun", _multirun(failed_jobs=[9])),
        "unnamed": problems("multirun", _multirun(failed_jobs_named_in_summary=[9])),
        "two lines": problems("multirun", _multirun(summary_lines=["a", "b"])),
        "litter": problems("multirun", _multirun(litter_beside_the_sweep=["outputs"])),
        "tmp": problems("multirun", _multirun(left_in_tmp=["tmpabc"])),
        "partial": problems("multirun", _multirun(unfinished_checkpoints=[str(Path("x"))])),
    }
    assert all(found.values()), found
    clean = _multirun(exit=0, jobs_meant_to_fail=[], failed_jobs=[], summary_lines=[])
    assert problems("multirun", clean) == []


def test_what_the_run_soak_calls_a_problem_and_its_growth():
    run = {"exit": 0, "stopped_by_time_limit": False, "left_in_tmp": [], "log_tail": []}
    run["unfinished_checkpoints"] = []
    assert problems("run", run) == []
    assert problems("run", {**run, "exit": 143}) != []  # a stop only when the soak sent it
    assert problems("run", {**run, "exit": 143, "stopped_by_time_limit": True}) == []
    rows = [{"rss_mb": 100.0 + i, "fds": 20} for i in range(8)]
    assert growth(rows, 5, ["rss_mb", "fds"]) == {"rss_mb": 2.0, "fds": 0}
    assert growth(rows[:5], 5, ["rss_mb"]) == {}


def test_overrides_go_after_the_options_with_or_without_dashes(tmp_path, monkeypatch):
    """``soak run --steps N -- checkpoint.every=1000`` (as --help says) reaches the run."""

    class Started(Exception):
        pass

    def started(args, work):
        raise Started(args.overrides)

    monkeypatch.setattr(soak, "soak_run", started)
    out = ["--out", str(tmp_path / "soak.json"), "--work", str(tmp_path / "work")]
    for argv in (
        ["run", *out, "--steps", "5", "--", "checkpoint.every=1000", "arch.seed=3"],
        ["run", *out, "checkpoint.every=1000", "--steps", "5", "arch.seed=3"],
    ):
        with pytest.raises(Started) as info:
            soak.main(argv)
        assert info.value.args[0] == ["checkpoint.every=1000", "arch.seed=3"]
