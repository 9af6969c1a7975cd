"""A built wheel carries the configs: installed into a fresh virtual environment, it runs a tiny
``python -m stoixlite.rec_ppo`` from an unrelated directory (no source tree on the path)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_configs_and_trains_from_anywhere(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("stoixlite-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "stoixlite/configs/config.yaml" in names
    assert "stoixlite/configs/network/gru.yaml" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True
    )
    # The dependencies come from this test's environment (appended after the venv's own
    # site-packages, so the installed wheel is what `import stoixlite` finds).
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [python, "-c", "import stoixlite; print(stoixlite.__file__)"],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert where.startswith(str(venv)), where
    proc = subprocess.run(
        [python, "-m", "stoixlite.rec_ppo", *TINY, f"hydra.run.dir={elsewhere / 'run'}"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (elsewhere / "run" / "metrics.jsonl").exists()
