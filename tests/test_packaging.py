"""The installed package is the whole product: a built wheel, installed (not editable) into a
fresh virtual environment, carries the configs and the user's tools. From an unrelated directory
(no source tree on the path) it trains a tiny ``python -m stoixlite.rec_ppo`` and a tiny sweep with
``hydra/launcher=fused`` (its plugin package), aggregates the run with
``python -m stoixlite.aggregate``, and every tool (the benchmark's ``envs``, ``host``, ``memory``
and ``profile`` too) answers ``--help``.

Slow (a wheel build and a fresh environment), so the default run leaves it out: ``.ci/run`` runs it
as its own step after the default suite (and ``pytest -m slow`` includes it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import TINY

from stoixlite.benchmark.cli import TOOLS as BENCHMARK_TOOLS

ROOT = Path(__file__).resolve().parents[1]
# The tools a user runs as ``python -m <module>``; each answers --help from the installed wheel.
TOOLS = (
    "stoixlite.rec_ppo",
    "stoixlite.evaluate",
    "stoixlite.aggregate",
    "stoixlite.table",
    "stoixlite.benchmark",
)
# The worker the benchmark's host tool runs as a file in sb3's Python (the benchmark's other
# tools, ``python -m stoixlite.benchmark <name>``, are BENCHMARK_TOOLS).
SB3_WORKER = "stoixlite/benchmark/peers/sb3_recurrent_ppo.py"


@pytest.mark.slow
def test_wheel_ships_configs_and_tools_and_trains_from_anywhere(tmp_path):
    # Nothing of the source tree on the path (a PYTHONPATH to a checkout would let pip take the
    # package as installed, and Python import it from there).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)],
        check=True,
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = dist.glob("stoixlite-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "stoixlite/configs/config.yaml" in names
    assert "stoixlite/configs/network/gru.yaml" in names
    assert "hydra_plugins/stoixlite_fused/__init__.py" in names  # hydra/launcher=fused
    for tool in TOOLS:  # a module, or a package with a __main__
        path = tool.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__main__.py" in names, tool
    assert SB3_WORKER in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        cwd=tmp_path,
        env=env,
    )
    # The dependencies come from this test's environment (appended after the venv's own
    # site-packages, so the installed wheel is what `import stoixlite` finds; a line of a .pth
    # file adds a directory, not the .pth files in it, so this environment's editable install of
    # stoixlite is not seen).
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [python, *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
        )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run("-c", "import stoixlite; print(stoixlite.__file__)")
    assert where.returncode == 0, where.stderr[-3000:]
    assert where.stdout.strip().startswith(str(venv)), where.stdout

    proc = run("-m", "stoixlite.rec_ppo", *TINY, f"hydra.run.dir={elsewhere / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (elsewhere / "run" / "metrics.jsonl").exists()

    # The fused launcher, found by Hydra in the installed hydra_plugins package.
    sweep = (
        "-m",
        "hydra/launcher=fused",
        "arch.seed=0,1",
        f"hydra.sweep.dir={elsewhere / 'sweep'}",
    )
    proc = run("-m", "stoixlite.rec_ppo", *sweep, *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jobs 0,1 train as one program" in proc.stderr, proc.stderr[-3000:]
    assert len(list((elsewhere / "sweep").glob("*/metrics.jsonl"))) == 2

    proc = run("-m", "stoixlite.aggregate", "run", "--out", "table")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (elsewhere / "table" / "results.md").read_text()
    (row,) = [line for line in table.splitlines() if line.startswith("| popgym/repeat_previous")]
    assert "| gru | 1 |" in row, table
    assert (elsewhere / "table" / "popgym-repeat_previous-easy.png").stat().st_size > 0

    for tool in TOOLS:
        proc = run("-m", tool, "--help")
        assert proc.returncode == 0, (tool, proc.stderr[-3000:])
        assert proc.stdout.strip(), tool
    for tool in BENCHMARK_TOOLS:
        proc = run("-m", "stoixlite.benchmark", tool, "--help")
        assert proc.returncode == 0, (tool, proc.stderr[-3000:])
        assert proc.stdout.startswith(f"usage: python -m stoixlite.benchmark {tool}"), tool
