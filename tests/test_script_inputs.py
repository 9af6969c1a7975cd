"""Bad input to the scripts (``scripts/*.py``) and ``python -m stoixlite.evaluate``: one line on
stderr naming the option or value and what is allowed (no traceback, no argparse usage block),
exit status 2, before anything is compiled or trained; a run whose rows fail ends non-zero after
writing what it has; nothing already written is lost (:mod:`stoixlite.cli.args`).

Most inputs are refused in this process (the scripts' ``main(argv)``) or in a subprocess that
stops before JAX compiles anything; the failures of benchmark rows are simulated."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import SCRIPTS

from stoixlite.benchmark import cli, memory_models
from stoixlite.cli.args import OneLineArgumentParser, last_error_line, output_file_error

BAD_INPUT = 2
FAILED = 1
# What a jitted function's error looks like on stderr: JAX's note comes after the exception.
JAX_STDERR = """Traceback (most recent call last):
  File "stoixlite/benchmark/memory_models.py", line 120, in run_one
    jax.block_until_ready(step(params, x))
TypeError: cannot reshape array of shape (3,) (size 3) into shape (7,) (size 7)
--------------------
For simplicity, JAX has removed its internal frames from the traceback of the following \
exception. Set JAX_TRACEBACK_FILTERING=off to include these.
"""


def one_line(code: int | None, err: str, status: int, *words: str) -> str:
    """Asserts that ``err`` is one line (containing ``words``) and ``code`` is ``status``."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == status, (code, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "usage:" not in err, err
    for word in words:
        assert word in lines[0], err
    return lines[0]


def run_script(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def call_main(main, argv: list[str], capsys) -> tuple[int | None, str, str]:
    """``(exit status, stdout, stderr)`` of a script's ``main(argv)`` in this process."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------------------------
# stoixlite.cli.args
# --------------------------------------------------------------------------------------------


def test_one_line_parser_errors_are_one_line_and_help_is_unchanged(capsys):
    parser = OneLineArgumentParser(prog="tool")
    parser.add_argument("--count", type=int, default=1, help="how many")
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--count", "x"])
    assert stop.value.code == BAD_INPUT
    err = capsys.readouterr().err
    assert err == "tool: error: argument --count: invalid int value: 'x' (see --help)\n"
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tool [-h] [--count COUNT]") and "how many" in out


def test_last_error_line_skips_jax_traceback_note():
    assert last_error_line(JAX_STDERR) == (
        "TypeError: cannot reshape array of shape (3,) (size 3) into shape (7,) (size 7)"
    )
    assert last_error_line("something broke\n") == "something broke"
    assert last_error_line("", "no message") == "no message"


def test_output_file_error_keeps_an_existing_file(tmp_path):
    existing = tmp_path / "results.json"
    existing.write_text("old results")
    assert output_file_error(existing) is None
    assert existing.read_text() == "old results"
    assert output_file_error(tmp_path / "new.json") is None
    assert not (tmp_path / "new.json").exists()  # the check leaves nothing behind
    assert "does not exist" in output_file_error(tmp_path / "nope" / "r.json")
    assert "is a directory" in output_file_error(tmp_path)
    assert "is not a directory" in output_file_error(existing / "r.json")


# --------------------------------------------------------------------------------------------
# Every script: argparse's errors are one line
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "stoixlite.benchmark"],
        ["-m", "stoixlite.benchmark", "memory"],
        ["-m", "stoixlite.aggregate", "somewhere"],
        ["-m", "stoixlite.benchmark", "envs"],
        ["-m", "stoixlite.benchmark", "profile"],
        ["-m", "stoixlite.benchmark", "host"],
        ["-m", "stoixlite.evaluate", "somewhere"],
    ],
)
def test_unknown_option_is_one_line_without_usage(command, tmp_path):
    if command[0] == "-m":
        argv = [sys.executable, *command, "--bogus"]
        root = Path(__file__).resolve().parents[1]
        proc = subprocess.run(
            argv, capture_output=True, text=True, cwd=root, timeout=300
        )  # the package of this checkout
    else:
        proc = run_script(command[0], *command[1:], "--bogus", cwd=tmp_path)
    line = one_line(proc.returncode, proc.stderr, BAD_INPUT, "unrecognized arguments: --bogus")
    assert line.endswith("(see --help)")
    assert proc.stdout == ""


def test_evaluate_negative_episodes_is_one_line(tmp_path):
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "stoixlite.evaluate", str(tmp_path), "--episodes", "-1"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    one_line(proc.returncode, proc.stderr, BAD_INPUT, "--episodes: '-1' is not a positive integer")


# --------------------------------------------------------------------------------------------
# The benchmark tool (python -m stoixlite.benchmark; scripts/benchmark.py runs it)
# --------------------------------------------------------------------------------------------

TINY_BENCH = [
    "--no-reference",
    "--envs",
    "gymnax/CartPole-v1",
    "--num-envs",
    "4",
    "--rollout-length",
    "8",
    "--chunk-steps",
    "32",
    "--minibatches",
    "2",
    "--repeats",
    "1",
]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--width", "-1"], ["--width -1 must be positive"]),
        (["--devices", "0"], ["--devices 0 must be at least 1"]),
        (["--devices", "2", "-3"], ["--devices -3 must be at least 1"]),
        (["--host-devices", "0"], ["--host-devices 0 must be at least 1"]),
        (["--out", "{tmp}/nope/results.json"], ["--out", "directory", "does not exist"]),
        (["--out", "{tmp}"], ["is a directory"]),
        (["--envs"], ["no rows to run"]),
        # the rows' configs, checked as rec_ppo checks them, before any row runs
        (
            ["--networks", "transformer", "--width", "6"],
            ["row transformer on gymnax/CartPole-v1, 4 envs", "network.num_heads=4 is invalid"],
        ),
        (
            ["--networks", "gru", "--devices", "3", "--host-devices", "3"],
            ["3 devices", "arch.num_envs=4 is invalid: must split over 3 devices"],
        ),
        (["--networks", "gru", "--devices", "64"], ["--devices 64: this machine has"]),
        (
            ["--networks", "gru", "--overrides", "network.encoder=cnn"],
            ["row gru on gymnax/CartPole-v1, 4 envs", "network.encoder='cnn' is invalid"],
        ),
        (
            ["--networks", "gru", "--overrides", "network.cnn_kernels"],
            ["row gru on gymnax/CartPole-v1, 4 envs", "network.cnn_kernels"],
        ),
    ],
)
def test_benchmark_refuses_bad_rows_before_running_any(args, words, tmp_path, capsys):
    argv = [a.format(tmp=tmp_path) for a in args]
    network = [] if "--networks" in argv else ["--networks", "mlp"]
    out = [] if "--out" in argv else ["--out", str(tmp_path / "results.json")]
    code, stdout, err = call_main(cli.main, [*TINY_BENCH, *network, *argv, *out], capsys)
    one_line(code, err, BAD_INPUT, *words)
    assert stdout == ""  # no row ran
    assert not (tmp_path / "results.json").exists()


def test_benchmark_refusal_keeps_existing_results(tmp_path):
    results = tmp_path / "results.json"
    results.write_text('{"rows": ["earlier"]}')
    args = ["--networks", "transformer", "--width", "6", "--out", str(results)]
    proc = subprocess.run(
        [sys.executable, "-m", "stoixlite.benchmark", *TINY_BENCH, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    one_line(proc.returncode, proc.stderr, BAD_INPUT, "network.num_heads=4 is invalid")
    assert results.read_text() == '{"rows": ["earlier"]}'


def test_benchmark_failed_rows_exit_non_zero_after_writing(tmp_path, monkeypatch, capsys):
    bench = cli
    runs = []

    def launch(spec, host_devices=None):
        runs.append(spec["network"])
        if spec["network"] == "gru":
            return {**spec, "error": last_error_line(JAX_STDERR)}
        return {
            **{k: spec[k] for k in ("network", "env", "num_envs", "rollout_length")},
            **{k: spec[k] for k in ("epochs", "minibatches")},
            "label": "",
            "devices": 1,
            "sps_all": [100.0],
            "compile_s": 1.0,
            "peak_rss_mb": 10.0,
            "peak_device_mb": None,
            "final_return": 1.0,
            "load_avg": 0.0,
            "backend": "cpu",
        }

    monkeypatch.setattr(bench, "launch", launch)
    monkeypatch.setattr(bench, "check_rows", lambda specs, host_devices=None: None)
    monkeypatch.setattr(bench, "hardware", lambda: "test machine")
    out = tmp_path / "results.json"
    argv = [*TINY_BENCH, "--networks", "mlp", "gru", "--out", str(out)]
    code, stdout, err = call_main(bench.main, argv, capsys)
    one_line(code, err, FAILED, "1 of 2 row runs failed")
    assert runs == ["mlp", "gru"]
    rows = json.loads(out.read_text())["rows"]
    assert [r["network"] for r in rows] == ["mlp", "gru"]
    assert rows[1]["error"].startswith("TypeError: cannot reshape")
    assert "error: TypeError: cannot reshape" in stdout  # the table shows it too


# --------------------------------------------------------------------------------------------
# python -m stoixlite.benchmark memory
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--models", "transformer", "--lengths", "4", "--batch", "2", "--hidden", "6"],
            ["--hidden 6 does not suit model 'transformer'", "num_heads=4 must divide"],
        ),
        (["--timeout", "nan"], ["--timeout nan must be a finite number of seconds > 0"]),
        (["--timeout", "inf"], ["--timeout inf must be a finite"]),
        (["--timeout", "0"], ["--timeout 0.0 must be a finite"]),
        (["--max-state-mb", "nan"], ["--max-state-mb nan must be positive"]),
        (["--models", "gru", "--out", "{tmp}/nope/bench.json"], ["does not exist"]),
    ],
)
def test_benchmark_memory_refuses_bad_settings_before_running(args, words, tmp_path, capsys):
    argv = [a.format(tmp=tmp_path) for a in args]
    code, stdout, err = call_main(memory_models.main, argv, capsys)
    one_line(code, err, BAD_INPUT, *words)
    assert stdout == ""


def test_benchmark_memory_failed_rows_exit_non_zero_with_the_real_error(
    tmp_path, monkeypatch, capsys
):
    bench = memory_models

    def failing_run(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=JAX_STDERR)

    monkeypatch.setattr(bench.subprocess, "run", failing_run)
    out = tmp_path / "bench.json"
    argv = ["--models", "gru", "--lengths", "4", "--batch", "2", "--hidden", "4", "--out", str(out)]
    code, stdout, err = call_main(bench.main, argv, capsys)
    one_line(code, err, FAILED, "2 of 2 configurations failed", "TypeError: cannot reshape")
    assert "For simplicity" not in stdout + err
    results = json.loads(out.read_text())["results"]
    assert [r["status"] for r in results] == ["failed", "failed"]
    assert all(r["error"] == f"rc=1: {last_error_line(JAX_STDERR)}" for r in results)


# --------------------------------------------------------------------------------------------
# python -m stoixlite.aggregate
# --------------------------------------------------------------------------------------------


def fake_runs(root: Path) -> Path:
    """Two runs of gru on repeat_previous: a config and two metrics records each."""
    for name, final in (("a", 0.5), ("b", 0.7)):
        run = root / "sweep" / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(
            "env:\n  name: popgym/repeat_previous\n  difficulty: easy\nnetwork:\n  name: gru\n"
        )
        records = [
            {"step": 64, "eval/episode_return": 0.1, "loss/total": None, "time/elapsed_s": 1.0},
            {"step": 128, "eval/episode_return": final, "loss/total": 0.3, "time/elapsed_s": 2.0},
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root / "sweep"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["{sweep}", "--metric", "nope"],
            [
                "--metric 'nope' is in none of the runs; choose from",
                "['eval/episode_return', 'loss/total', 'time/elapsed_s']",
            ],
        ),
        (["{sweep}", "--out", "{file}"], ["--out", "is an existing file, not a directory"]),
        (["{sweep}", "--out", "{file}/agg"], ["--out", "cannot be written"]),
        (["{tmp}/nope"], ["root", "is not a directory"]),
        (["{tmp}/empty"], ["no runs (metrics.jsonl + config.yaml) below"]),
        (["{garbage}"], ["config.yaml is not a readable run config"]),
        (["{sweep}", "--label", "seed"], ["argument --label: invalid choice: 'seed'"]),
    ],
)
def test_aggregate_bad_input_is_one_line(args, words, tmp_path, capsys):
    from stoixlite import aggregate

    sweep = fake_runs(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("keep me")
    garbage = tmp_path / "garbage" / "run"
    garbage.mkdir(parents=True)
    (garbage / "config.yaml").write_bytes(b"\x00\xff: [unclosed\n")
    (garbage / "metrics.jsonl").write_text('{"step": 1, "eval/episode_return": 0.0}\n')
    values = {"sweep": sweep, "tmp": tmp_path, "file": tmp_path / "file", "garbage": garbage}
    argv = [a.format(**values) for a in args]
    code, out, err = call_main(aggregate.main, argv, capsys)
    one_line(code, err, BAD_INPUT, *words)
    assert out == ""
    assert (tmp_path / "file").read_text() == "keep me"
    assert not (sweep / "aggregate").exists()


def test_the_old_benchmark_script_says_where_it_moved_and_runs_it(tmp_path):
    proc = run_script("benchmark.py", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "scripts/benchmark.py has moved: python -m stoixlite.benchmark"
    assert "--suite" in proc.stdout


@pytest.mark.parametrize(
    ("script", "tool", "flag"),
    [
        ("benchmark_envs", "envs", "--ref-steps"),
        ("benchmark_host", "host", "--sb3-python"),
        ("benchmark_memory", "memory", "--max-state-mb"),
        ("profile_update", "profile", "--free-recurrence"),
    ],
)
def test_the_old_benchmark_tool_scripts_say_where_they_moved_and_run_them(
    script, tool, flag, monkeypatch, capsys
):
    """Each wrapper run as a program, in this process (its tool's modules are imported here
    already: no interpreter start per wrapper)."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / f"{script}.py"), "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(SCRIPTS / f"{script}.py"), run_name="__main__")
    captured = capsys.readouterr()
    assert stop.value.code == 0, captured.err
    moved = f"scripts/{script}.py has moved: python -m stoixlite.benchmark {tool}"
    assert captured.err.strip() == moved
    assert captured.out.startswith(f"usage: python -m stoixlite.benchmark {tool}")
    assert flag in captured.out


def test_the_old_sb3_worker_path_runs_the_worker_as_a_file(tmp_path):
    """A Python without stoixlite (the sb3 venv's) runs it: nothing of stoixlite is imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-S", "-I", str(SCRIPTS / "sb3_recurrent_ppo.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr  # no spec: the worker's own usage line
    moved, usage = proc.stderr.strip().splitlines()
    assert moved.startswith("scripts/sb3_recurrent_ppo.py has moved: ")
    assert moved.endswith("stoixlite/benchmark/peers/sb3_recurrent_ppo.py")
    assert usage.startswith("usage: ") and "SPEC_JSON | --versions" in usage


def test_the_old_aggregate_script_says_where_it_moved_and_runs_it(tmp_path):
    sweep = fake_runs(tmp_path)
    proc = run_script("aggregate.py", str(sweep), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "scripts/aggregate.py has moved: python -m stoixlite.aggregate"
    assert (tmp_path / "o" / "results.md").exists()


def test_aggregate_a_sparse_metric_without_warnings(tmp_path, capsys):
    """A metric missing from some records (``None``) aggregates without numpy's warnings."""
    from stoixlite import aggregate

    sweep = fake_runs(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = aggregate.main([str(sweep), "--metric", "loss/total", "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    assert "0.300 ± 0.000" in (tmp_path / "o" / "results.md").read_text()


# --------------------------------------------------------------------------------------------
# python -m stoixlite.benchmark envs and profile
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--envs", "nope"], ["--envs: ['nope'] are neither POPGym ports nor registered envs"]),
        (["--envs", "craftax/nope"], ["--envs: ['craftax/nope'] are neither POPGym ports nor"]),
        (["--num-envs", "0"], ["--num-envs 0 must be at least 1"]),
        (["--repeats", "0"], ["--repeats 0 must be at least 1"]),
        (["--ref-steps", "-5"], ["--ref-steps -5 must be at least 1"]),
        (["--out", "{tmp}/nope/envs.json"], ["--out", "does not exist"]),
    ],
)
def test_benchmark_envs_bad_input_is_one_line(args, words, tmp_path, capsys):
    from stoixlite.benchmark import envs

    code, out, err = call_main(envs.main, [a.format(tmp=tmp_path) for a in args], capsys)
    one_line(code, err, BAD_INPUT, *words)
    assert out == ""


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["network=nope"], ["network=nope is invalid: choose one of"]),
        (["--rounds", "1", "system.lr=nan"], ["system.lr=nan is invalid"]),
        (["--updates", "0"], ["--updates 0 must be at least 1"]),
        (["--trace", "{tmp}/file/trace"], ["--trace", "cannot be written"]),
        (["--free-recurrence", "network=gru"], ["--free-recurrence: no stand-in for", "'gru'"]),
    ],
)
def test_profile_update_bad_input_is_one_line(args, words, tmp_path, monkeypatch, capsys):
    from stoixlite.benchmark import update_phases as profile
    from stoixlite.run import build

    (tmp_path / "file").write_text("")

    def build_run(cfg):
        raise AssertionError("built a run for a bad input")

    monkeypatch.setattr(build, "build_run", build_run)
    code, out, err = call_main(profile.main, [a.format(tmp=tmp_path) for a in args], capsys)
    one_line(code, err, BAD_INPUT, *words)
