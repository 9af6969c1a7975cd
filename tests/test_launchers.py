"""Cluster sweeps through Hydra launchers (optional extra ``.[cluster]``): a multirun of 2 jobs in
parallel processes through joblib and through submitit's local executor (the SLURM launcher's
code path, with local processes instead of SLURM jobs), and the SLURM launcher configs composing
with the SLURM fields."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from stoixlite.cli.configs import CONFIG_DIR
from stoixlite.tracking.jsonl import read_jsonl

ROOT = Path(__file__).resolve().parent.parent


LAUNCHERS = {
    # hydra/launcher option: (plugin module, launcher class, its parallelism override)
    "joblib": ("hydra_joblib_launcher", "JoblibLauncher", "hydra.launcher.n_jobs=2"),
    "submitit_local": ("hydra_submitit_launcher", "LocalLauncher", "hydra.launcher.timeout_min=20"),
}


# Both under `pytest -m slow` (CI runs them: .ci/run-slow): a multirun of 2 jobs, each a fresh
# process that imports JAX and compiles, 11 s (the launcher is all that differs). The default run
# runs a multirun's jobs through Hydra's basic launcher
# (tests/test_experiments.py::test_multirun_with_wandb_failing_job_and_aggregate) and composes
# the SLURM launcher configs (test_slurm_launcher_configs_compose below).
@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_launcher_runs_two_jobs(tmp_path, launcher):
    plugin, cls, parallel = LAUNCHERS[launcher]
    pytest.importorskip(f"hydra_plugins.{plugin}")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoixlite.rec_ppo",
            "-m",
            f"hydra/launcher={launcher}",
            parallel,
            "arch.seed=0,1",
            *TINY,
            "logger.plot=false",
            f"hydra.sweep.dir={tmp_path}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a launcher that hangs fails the test instead of the suite
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name.split("_")[0] for p in jobs] == ["0", "1"]
    for seed, job in enumerate(jobs):
        assert len(read_jsonl(job / "metrics.jsonl")) == 2
        assert OmegaConf.load(job / "config.yaml").arch.seed == seed
        hydra = OmegaConf.load(job / ".hydra" / "hydra.yaml").hydra
        assert hydra.launcher._target_.endswith(cls)


@pytest.mark.parametrize("launcher", ["slurm", "slurm_multinode"])
def test_slurm_launcher_configs_compose(launcher):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose(
            "config",
            overrides=[f"hydra/launcher={launcher}", "distributed=slurm"],
            return_hydra_config=True,
        )
    launch = cfg.hydra.launcher
    assert launch._target_.endswith("SlurmLauncher")
    for key in ("partition", "gpus_per_node", "nodes", "timeout_min", "array_parallelism"):
        assert key in launch, key
    if launcher == "slurm_multinode":
        assert launch.nodes == 2 and launch.tasks_per_node == launch.gpus_per_node
    assert cfg.distributed.enabled is True and cfg.distributed.num_processes is None
