"""Values that pass each key's own check but cannot run, refused before anything compiles: one
line on stderr naming the key and what is allowed, a non-zero exit, nothing written.

* sizes: a run whose memory lower bound (``stoixlite/run/footprint.py``, from shapes alone)
  exceeds the machine's memory, and optimiser step counts beyond int32;
* env kwargs of the gymnax-style envs, checked against the env's own parameters (their defaults'
  types; integers within int32, a time limit or a positive count >= 1; numbers finite).

The training CLI runs in this process (:func:`stoixlite.rec_ppo.cli`, as in
``tests/test_bad_inputs.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import TINY, run_cli

from stoixlite.envs.gymnax_style import param_value

RUN = [*TINY, "logger.plot=false"]
CONFIG = 2
CARTPOLE = ["env=gymnax/CartPole-v1"]

CANNOT_RUN: list[tuple[list[str], str]] = [
    # sizes that do not fit in memory: the estimate in the line
    (["network.hidden_size=1000000"], "network.hidden_size=1000000 is invalid: the run needs at"),
    (["network.hidden_size=1000000"], "TiB of memory (state "),
    (["arch.num_eval_envs=1000000000"], "arch.num_eval_envs=1000000000 is invalid: the run needs"),
    (["network=gru", "network.hidden_size=200000"], "network.hidden_size=200000 is invalid"),
    # optimiser steps beyond int32
    (["system.epochs=1000000000"], "system.epochs=1000000000 is invalid: the run's optimiser st"),
    (["system.epochs=1e9"], "system.epochs=1000000000 is invalid: the run's optimiser steps"),
    # env kwargs against the env's own parameters
    (
        [*CARTPOLE, "+env.kwargs.gravity=abc"],
        "env.kwargs.gravity='abc' is invalid: gymnax/CartPole-v1 refuses it (gravity='abc': must "
        "be a finite number; default 9.8)",
    ),
    ([*CARTPOLE, "+env.kwargs.gravity=nan"], "gravity=nan: must be a finite number"),
    ([*CARTPOLE, "+env.kwargs.gravity=-inf"], "gravity=-inf: must be a finite number"),
    ([*CARTPOLE, "+env.kwargs.gravity=[1]"], "gravity=[1]: must be a finite number"),
    (
        [*CARTPOLE, "+env.kwargs.max_steps_in_episode=-5"],
        "max_steps_in_episode=-5: must be an integer in [1, 2147483647]; default 500",
    ),
    ([*CARTPOLE, "+env.kwargs.max_steps_in_episode=0"], "must be an integer in [1, 2147483647]"),
    ([*CARTPOLE, "+env.kwargs.max_steps_in_episode=2.5"], "must be an integer; default 500"),
    ([*CARTPOLE, "+env.kwargs.max_steps_in_episode=1e12"], "must be an integer in [1,"),
    ([*CARTPOLE, "+env.kwargs.max_steps_in_episode=true"], "must be an integer"),
    (
        ["env=gymnax/BernoulliBandit-misc", "+env.kwargs.max_steps_in_episode=-1"],
        "max_steps_in_episode=-1: must be an integer in [1, 2147483647]; default 100.0",
    ),
    (
        ["env=gymnax/MemoryChain-bsuite", "+env.kwargs.memory_length=-3"],
        "memory_length=-3: must be an integer in [1, 2147483647]; default 5",
    ),
    (
        ["env=gymnax/MetaMaze-misc", "+env.kwargs.normalize_time=1"],
        "normalize_time=1: must be true or false",
    ),
    (
        ["env=gymnax/Acrobot-v1", "+env.kwargs.available_torque=[1,2]"],
        "available_torque=[1, 2]: must be a list of 3 finite numbers",
    ),
]

if importlib.util.find_spec("craftax") is not None:
    CANNOT_RUN += [
        (
            ["env=craftax/classic_symbolic", "+env.kwargs.max_timesteps=-5"],
            "env.kwargs.max_timesteps=-5 is invalid: craftax/classic_symbolic refuses it "
            "(max_timesteps=-5: must be an integer in [1, 2147483647]; default 10000)",
        ),
        (
            ["env=craftax/classic_symbolic", "+env.kwargs.spawn_cow_chance=nan"],
            "spawn_cow_chance=nan: must be a finite number",
        ),
    ]


@pytest.mark.parametrize(("args", "expected"), CANNOT_RUN)
def test_a_value_that_cannot_run_is_one_line(tmp_path, capsys, monkeypatch, args, expected):
    from stoixlite.run import build

    def compile_programs(self, state, key):
        raise AssertionError("compiled a run that cannot run")

    monkeypatch.setattr(build.Run, "compile_programs", compile_programs)
    run_dir = tmp_path / "run"
    code, out, err = run_cli([*RUN, *args, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == CONFIG, (code, err)
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in out + err
    assert not run_dir.exists(), sorted(Path(run_dir).rglob("*"))  # nothing written


@pytest.mark.parametrize(
    ("default", "value", "taken"),
    [
        (9.8, 3, 3.0),
        (9.8, -1.5, -1.5),
        (500, 7, 7),
        (0, 0, 0),
        (True, False, False),
        (100.0, 20, 20),  # a time limit whose default is a float
        ((None, None), [1, None], (1, None)),
    ],
)
def test_param_value_takes_what_fits(default, value, taken):
    time_limit = default == 100.0
    assert param_value("p", default, value, time_limit=time_limit) == taken


def test_a_missing_arcade_names_the_install_that_works(monkeypatch):
    """popgym-arcade cannot come with an extra (its stable-gymnax would replace gymnax's files):
    the line names the two commands of docs/envs.md, not an extra that does not exist."""
    from stoixlite.cli.args import checked_run_config
    from stoixlite.envs import registry

    monkeypatch.setattr(registry, "missing_modules", lambda name: ["popgym_arcade"])
    _, error = checked_run_config(["env=arcade/count_recall"])
    assert error == (
        "env.name='arcade/count_recall' is invalid: needs popgym_arcade, which is not installed "
        "(pip install 'stoixlite[arcade]' && pip install --no-deps 'popgym-arcade==0.0.7')"
    )
    assert (
        'pip install --no-deps "popgym-arcade==0.0.7"'
        in (Path(__file__).resolve().parents[1] / "docs" / "envs.md").read_text()
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A tiny trained run (2 chunks, checkpoints 1 and 2)."""
    from conftest import run_plan

    from stoixlite.run import loop

    run_dir = tmp_path_factory.mktemp("hostile_3") / "run"
    loop.train(run_plan(RUN), run_dir)
    return run_dir


@pytest.mark.parametrize("garbled", ["host/metadata", "state/_METADATA"])
def test_evaluate_a_garbled_checkpoint_names_it(finished_run, tmp_path, capsys, garbled):
    import shutil

    from stoixlite import evaluate

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "checkpoints" / "2" / garbled).write_text('{"unterminated')
    code = evaluate.main([str(run_dir), "--checkpoint", "2", "--episodes", "2"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == CONFIG and len(lines) == 1, err
    assert lines[0].startswith(
        f"error: checkpoint 2 in {run_dir / 'checkpoints'} is unreadable (Unterminated string"
    ), err


def test_aggregate_runs_without_records_blame_no_option(finished_run, tmp_path, capsys):
    import shutil

    from stoixlite import aggregate

    sweep = tmp_path / "sweep"
    for name in ("a", "b"):
        shutil.copytree(finished_run, sweep / name)
        (sweep / name / "metrics.jsonl").write_text("")
    with pytest.raises(SystemExit) as stop:
        aggregate.main([str(sweep)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert stop.value.code == CONFIG and len(lines) == 1, err
    assert "--metric" not in lines[0], err
    assert "metrics.jsonl has no records (nor do the 1 other runs' files)" in lines[0], err
    assert not (sweep / "aggregate").exists()


@pytest.mark.skipif(importlib.util.find_spec("craftax") is None, reason="needs craftax")
def test_a_craftax_pixel_config_error_is_the_only_line(tmp_path):
    """Craftax prints notes on its texture cache when imported (in a fresh process): they no
    longer come before the config error."""
    import os
    import subprocess

    run_dir = tmp_path / "run"
    argv = ["env=craftax/classic_pixels", "network.encoder=cnn", "network.cnn_kernels=[99,3]"]
    proc = subprocess.run(
        [sys.executable, "-m", "stoixlite.rec_ppo", *argv, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == CONFIG, proc.stderr
    assert proc.stdout == "", proc.stdout
    expected = "config error: network.cnn_kernels=[99, 3] is invalid"
    assert proc.stderr.startswith(expected), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not run_dir.exists()


# Hydra's own errors (its usage text, a search-path listing, a lexer exception), in one line
HYDRA_ERRORS: list[tuple[list[str], str]] = [
    (["--cfg", "nope"], "--cfg nope is invalid: choose one of ['job', 'hydra', 'all']"),
    (["-cn", "nope"], "-cn nope is invalid: choose one of ['config']"),
    (["--cfg"], "is invalid: choose one of ['job', 'hydra', 'all']"),  # the next is its value
    (
        ["hydra.job.chdir=maybe"],
        "Error merging override hydra.job.chdir=maybe: Value 'maybe' is not a valid bool",
    ),
    (
        ["hydra/launcher=nope"],
        "Available options in 'hydra/launcher': basic, fused, joblib, slurm,",
    ),
    (
        ["protocol=popgym"],
        "protocol='popgym' is invalid: protocol is a config group not in the defaults; add it "
        "with +protocol=popgym",
    ),
    (["arch.num_envs=４"], "non-ASCII character '４'; did you mean arch.num_envs=4?"),
    (["arch..num_envs=4"], "has an empty part between dots; did you mean arch.num_envs?"),
    (["env.name=popgym/répeat"], "non-ASCII character 'é'; quote it: env.name='popgym/répeat'"),
]
if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
    HYDRA_ERRORS.append(
        (["hydra/sweeper=ppo_optuna"], "sweeper plugin is not installed: pip install 'stoixlite[")
    )


@pytest.mark.parametrize(("args", "expected"), HYDRA_ERRORS)
def test_a_hydra_error_is_one_line(tmp_path, capsys, monkeypatch, args, expected):
    run_dir = tmp_path / "out" / "run"
    code, out, err = run_cli([*args, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == CONFIG, (code, out, err)
    assert len(lines) == 1 and expected in lines[0], err
    assert "usage:" not in out + err and "Traceback" not in out + err
    assert not (tmp_path / "out").exists()  # nothing created, not even an empty directory


def test_a_flag_between_overrides_is_taken_as_hydra_takes_it(tmp_path, capsys, monkeypatch):
    from stoixlite.cli.configs import CONFIG_DIR
    from stoixlite.cli.overrides import flag_value_error, flags_first

    assert (
        flag_value_error(["--cfg"], CONFIG_DIR)
        == "--cfg is invalid: give it a value (e.g. --cfg job)"
    )

    argv = ["system.lr=0.01", "--cfg", "job", "arch.seed=7", "--info", "x=1", "-m"]
    assert flags_first(argv) == [
        *("--cfg", "job", "--info", "-m"),
        *("system.lr=0.01", "arch.seed=7", "x=1"),
    ]
    run_dir = tmp_path / "run"
    argv = ["system.lr=0.01", "--cfg", "job", "arch.seed=7", f"hydra.run.dir={run_dir}"]
    code, out, err = run_cli(argv, capsys, monkeypatch)
    assert code == 0 and err == "", err
    assert "lr: 0.01" in out and "seed: 7" in out, out


@pytest.mark.parametrize("where", ["{file}/wandb"])  # under a file: for root too
def test_an_unwritable_wandb_dir_is_one_line(tmp_path, capsys, monkeypatch, where):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    wandb_dir = where.format(file=a_file)
    run_dir = tmp_path / "run"
    argv = [*RUN, "logger=wandb", "logger.wandb.mode=disabled", f"logger.wandb.dir={wandb_dir}"]
    code, out, err = run_cli([*argv, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == CONFIG, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"config error: logger.wandb.dir={wandb_dir} is invalid: cannot "), (
        err
    )
    assert not run_dir.exists()


def test_resume_with_another_run_dir_is_one_line(finished_run, tmp_path, capsys, monkeypatch):
    """``resume=<run> hydra.run.dir=<other>``: refused before Hydra creates ``<other>`` (the run
    would continue in its own directory); the same directory named twice resumes."""
    before = sorted(p.name for p in finished_run.rglob("*"))
    other = tmp_path / "other"
    code, out, err = run_cli(
        [f"resume={finished_run}", f"hydra.run.dir={other}"], capsys, monkeypatch
    )
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == CONFIG, (code, out, err)
    assert len(lines) == 1 and f"hydra.run.dir={other} is invalid with resume=" in lines[0], err
    assert not other.exists()
    assert sorted(p.name for p in finished_run.rglob("*")) == before  # nothing touched

    from stoixlite.cli.overrides import resume_dir_error

    assert resume_dir_error([f"resume={finished_run}", f"hydra.run.dir={finished_run}/."]) is None
