"""``python -m stoixlite.benchmark host``'s own logic, without sb3-contrib installed and without
timing anything: its argument checks, the stoixlite config and the sb3 command of a row, the
order of the interleaved runs, and the table and JSON it writes from fake measurements."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stoixlite.benchmark import host
from stoixlite.benchmark.peers import sb3_recurrent_ppo as sb3_worker
from stoixlite.cli.args import checked_run_config


def run_main(argv: list[str], capsys) -> tuple[int | None, str, str]:
    try:
        code = host.main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-envs", "6"], "--num-envs 6 must be a positive multiple of --minibatches"),
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--width", "0"], "--width must be at least 1"),
        (["--sb3-threads", "-1"], "--sb3-threads must be at least 0"),
        (["--vectors", "threads"], "invalid choice: 'threads'"),
        (["--no-sb3", "--sb3-python", "python"], "--no-sb3 and --sb3-python: choose one"),
        (["--sb3-python", "/nonexistent/python"], "--sb3-python /nonexistent/python:"),
        # a Python without sb3-contrib (this test's own has none, or may have: then a bad one)
        (["--sb3-python", "/bin/false"], "--sb3-python /bin/false cannot run sb3-contrib"),
    ],
)
def test_bad_input_is_a_one_line_error(args, message, capsys, tmp_path):
    code, _, err = run_main([*args, "--out", str(tmp_path / "r.json")], capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def specs(*argv: str) -> list[dict]:
    _, args = host.parse_args([*argv, "--out", "unused.json"])
    return host.make_specs(args)


def test_rows_pair_the_frameworks_at_the_same_sizes():
    rows = specs("--num-envs", "8", "64", "--rollout-length", "32", "--width", "64")
    assert [(r["framework"], r["vector"], r["num_envs"]) for r in rows] == [
        (f, v, n) for v in ("sync", "async") for n in (8, 64) for f in ("stoixlite", "sb3")
    ]
    assert all(r["rollout_length"] == 32 and r["width"] == 64 for r in rows)
    # every other round swaps the two runs of a row, and only those
    order = host.round_order(rows, 1)
    assert order == [1, 0, 3, 2, 5, 4, 7, 6]
    assert host.round_order(rows, 2) == list(range(8))


def test_the_stoixlite_row_is_a_valid_host_run_config():
    spec = specs("--num-envs", "8", "--vectors", "async", "--width", "64")[0]
    from stoixlite.benchmark.rows import stoixlite_overrides

    overrides = stoixlite_overrides(host.stoixlite_spec(spec))
    for wanted in (
        "env=gymnasium/CartPole-v1",
        "network=gru",
        "arch.num_envs=8",
        "env.vector=async",
        "network.hidden_size=64",
        "network.shared_memory=false",
        "network.head_size=64",
    ):
        assert wanted in overrides
    _, error = checked_run_config(overrides)
    assert error is None, error


def test_the_sb3_command_runs_the_worker_in_the_named_python():
    spec = specs("--num-envs", "8", "--vectors", "async")[1]
    assert spec["framework"] == "sb3"
    command = host.worker_command(spec, "/venv/bin/python")
    # the worker runs as a file (the sb3 Python need not have stoixlite), the package's own
    assert command[:2] == ["/venv/bin/python", str(Path(sb3_worker.__file__).resolve())]
    assert json.loads(command[2]) == spec
    assert host.sb3_command("/venv/bin/python", None)[2] == "--versions"
    assert "torch_threads" not in spec
    one = specs("--num-envs", "8", "--sb3-threads", "1")
    assert one[1]["torch_threads"] == 1 and "torch_threads" not in one[0]  # sb3's runs only
    stoix = host.worker_command(specs("--num-envs", "8")[0], "/venv/bin/python")
    assert stoix[:5] == [sys.executable, "-m", "stoixlite.benchmark", "host", "--worker"]
    # the worker itself refuses a wrong call without importing sb3
    assert sb3_worker.main([]) == 2


def fake_launch(spec: dict, sb3_python: str | None) -> dict:
    """A measurement: sb3 at 1,000 steps/s, stoixlite at 2,000 x the round's call number."""
    base = 2000.0 if spec["framework"] == "stoixlite" else 1000.0
    fake_launch.calls.append((spec["framework"], spec["vector"], spec["num_envs"]))
    return {
        **spec,
        "sps_all": [base, base * 1.5],
        "compile_s": 1.0,
        "peak_rss_mb": 100.0,
        "final_return": 20.0,
        "load_avg": 3.0,
    }


def test_results_table_and_json_from_fake_measurements(monkeypatch, capsys, tmp_path):
    fake_launch.calls = []
    monkeypatch.setattr(host, "launch", fake_launch)
    monkeypatch.setattr(host, "sb3_versions", lambda python: ({"sb3_contrib": "9.9"}, None))
    monkeypatch.setattr(host, "hardware", lambda: "a test CPU")
    out = tmp_path / "r.json"
    argv = ["--num-envs", "8", "--vectors", "sync", "--rounds", "2", "--sb3-python", "py"]
    code, stdout, _ = run_main([*argv, "--out", str(out)], capsys)
    assert code == 0
    assert fake_launch.calls == [("stoixlite", "sync", 8), ("sb3", "sync", 8)] + [
        ("sb3", "sync", 8),
        ("stoixlite", "sync", 8),
    ]
    result = json.loads(out.read_text())
    assert result["sb3"] == {"sb3_contrib": "9.9"} and result["hardware"] == "a test CPU"
    assert result["complete"] is True
    assert result["command"].startswith("python -m stoixlite.benchmark host --num-envs 8")
    stoix, sb3 = result["rows"]
    assert stoix["framework"] == "stoixlite" and len(stoix["sps_all"]) == 4  # rounds pooled
    assert stoix["sps_median"] == 2500.0 and sb3["sps_median"] == 1250.0
    line = [row for row in stdout.splitlines() if row.startswith("| sync")]
    assert len(line) == 1
    assert "| 2.00 |" in line[0] and "2,500 (2,000-3,000, n=4)" in line[0]


def test_a_failed_run_is_in_the_table_and_fails_the_command(monkeypatch, capsys, tmp_path):
    def launch(spec, sb3_python):
        return {**spec, "error": "boom"} if spec["framework"] == "sb3" else fake_launch(spec, None)

    fake_launch.calls = []
    monkeypatch.setattr(host, "launch", launch)
    monkeypatch.setattr(host, "sb3_versions", lambda python: ({}, None))
    monkeypatch.setattr(host, "hardware", lambda: "a test CPU")
    out = tmp_path / "r.json"
    code, stdout, err = run_main(
        ["--num-envs", "8", "--vectors", "sync", "--rounds", "1"] + ["--out", str(out)], capsys
    )
    assert code == 1 and "1 of 2 runs failed" in err
    assert "error: boom" in stdout and "| - |" in stdout
    assert json.loads(out.read_text())["rows"][1]["error"] == "boom"


def test_an_interrupted_run_keeps_the_runs_before_it(monkeypatch, capsys, tmp_path):
    def launch(spec, sb3_python):
        if spec["framework"] == "sb3":
            raise KeyboardInterrupt
        return fake_launch(spec, None)

    fake_launch.calls = []
    monkeypatch.setattr(host, "launch", launch)
    monkeypatch.setattr(host, "sb3_versions", lambda python: ({}, None))
    monkeypatch.setattr(host, "hardware", lambda: "a test CPU")
    out = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        host.main(["--num-envs", "8", "--vectors", "sync", "--out", str(out)])
    assert "round 1: stoixlite sync 8: 2,500 steps/s" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["complete"] is False
    assert [r["framework"] for r in result["rows"]] == ["stoixlite"]


def test_overlap_runs_share_the_rounds_and_get_a_table_of_their_own(monkeypatch, capsys, tmp_path):
    rows = specs("--num-envs", "8", "--vectors", "sync", "--overlap", "off", "on")
    assert [(r["framework"], r.get("overlap")) for r in rows] == [
        ("stoixlite", False),
        ("stoixlite", True),
        ("sb3", None),
    ]
    assert host.round_order(rows, 1) == [2, 1, 0]
    from stoixlite.benchmark.rows import stoixlite_overrides

    overrides = stoixlite_overrides(host.stoixlite_spec(rows[1]))
    assert "arch.host_overlap=true" in overrides
    assert checked_run_config(overrides)[1] is None

    def launch(spec, sb3_python):
        measured = fake_launch(spec, None)
        if spec.get("overlap"):
            measured["sps_all"] = [3000.0, 4500.0]
        return measured

    fake_launch.calls = []
    monkeypatch.setattr(host, "launch", launch)
    monkeypatch.setattr(host, "hardware", lambda: "a test CPU")
    argv = ["--num-envs", "8", "--vectors", "sync", "--rounds", "1", "--no-sb3"]
    code, stdout, _ = run_main(
        [*argv, "--overlap", "off", "on", "--out", str(tmp_path / "r")], capsys
    )
    assert code == 0
    assert "round 1: stoixlite overlap sync 8: 3,750 steps/s" in stdout
    main_line, overlap_line = [row for row in stdout.splitlines() if row.startswith("| sync")]
    assert "2,500 (2,000-3,000, n=2)" in main_line  # the run without overlap
    assert "2,500 (2,000-3,000, n=2)" in overlap_line and "3,750 (3,000-4,500, n=2)" in overlap_line
    assert "| 1.50 |" in overlap_line
