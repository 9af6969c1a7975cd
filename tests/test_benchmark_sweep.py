"""The sweep benchmark (``python -m stoixlite.benchmark sweep``): its jobs are Hydra's basic
sweeper's, its sides the commands they name, a failing side ends it with one line and exit 1,
and a whole tiny sweep is timed fused against the basic launcher (heavy: tests/heavy_tests.py)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from stoixlite.benchmark import sweep
from stoixlite.cli.sweep_overrides import sweep_combinations

SWEEP = [
    "network=gru",
    "system.lr=1e-4,3e-4,1e-3",
    "+env.kwargs.gravity=9.8,12.0",
    "arch.seed=range(0,3)",
]


def test_jobs_are_the_basic_sweepers_in_its_order():
    """The sweep's jobs (:func:`stoixlite.cli.sweep_overrides.sweep_combinations`) are Hydra's."""
    parsed = OverridesParser.create().parse_overrides(SWEEP)
    hydra_jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    jobs = sweep_combinations(SWEEP)
    assert len(jobs) == 18 and jobs == hydra_jobs


def test_sides_run_the_sweep_fused_and_the_other_side(tmp_path):
    args = sweep.parse_args(["--against", "one", "--rounds", "2", *SWEEP])
    jobs = sweep_combinations(SWEEP)
    odd, even = sweep.sides(args, jobs, tmp_path, 1), sweep.sides(args, jobs, tmp_path, 2)
    assert [s.label for s in odd] == ["fused", "first job alone"]
    assert [s.label for s in even] == ["first job alone", "fused"]
    fused, one = odd
    tool = [sys.executable, "-m", "stoixlite.rec_ppo"]
    assert fused.command == [
        *tool,
        "-m",
        "hydra/launcher=fused",
        *SWEEP,
        f"hydra.sweep.dir={tmp_path / 'fused-1'}",
    ]
    assert one.command == [*tool, *jobs[0], f"hydra.run.dir={tmp_path / 'one-1'}"]
    basic = sweep.sides(sweep.parse_args(SWEEP), jobs, tmp_path, 1)[1]
    assert basic.command == [*tool, "-m", *SWEEP, f"hydra.sweep.dir={tmp_path / 'basic-1'}"]


def test_a_failing_side_ends_the_tool_in_one_line(tmp_path, capsys):
    code = "import sys; print('ValueError: the job broke'); sys.exit(3)"
    side = sweep.Side("fused", [sys.executable, "-c", code], tmp_path / "fused-1")
    with pytest.raises(SystemExit) as stop:
        sweep.run_side(side, 2)
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the fused side exited 3: ValueError: the job broke" in err[0]


def test_a_side_with_a_missing_job_is_not_a_result(tmp_path, capsys):
    side = sweep.Side("basic launcher", [sys.executable, "-c", "pass"], tmp_path / "basic-1")
    with pytest.raises(SystemExit) as stop:
        sweep.run_side(side, 2)
    assert stop.value.code == 1
    assert "0 of 2 jobs wrote metrics" in capsys.readouterr().err


def test_a_tiny_sweep_is_timed_fused_against_the_basic_launcher(tmp_path):
    keep = tmp_path / "kept"
    overrides = [*TINY, "env=gymnax/CartPole-v1", "logger.plot=false", "system.lr=1e-3,3e-4"]
    proc = subprocess.run(
        [sys.executable, "-m", "stoixlite.benchmark", "sweep", "--keep", str(keep), *overrides],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("sweep of 2 jobs:") and "basic launcher" in lines[2]
    row = next(line for line in lines if line.startswith("| 1 (fused first) |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    fused_wall, basic_wall = (float(cells[i].split(" / ")[0]) for i in (1, 2))
    assert math.isclose(float(cells[3]), fused_wall / basic_wall, abs_tol=0.01)
    gap = next(line for line in lines if line.startswith("round 1: final eval returns"))
    assert float(gap.rsplit(" ", 1)[1]) < 1e-3  # the same runs, rounding apart
    for side in ("fused-1", "basic-1"):
        jobs = sorted(p for p in (keep / side).iterdir() if (p / "metrics.jsonl").exists())
        assert len(jobs) == 2 and Path(str(keep / side) + ".log").exists()
