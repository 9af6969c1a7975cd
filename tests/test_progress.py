"""Progress output outside a terminal (CI logs, ``| tee``): whole lines, never cut mid-word."""

from __future__ import annotations

from stoixlite.tracking.progress import TrainingProgress


def test_plain_progress_lines_are_never_cut(capsys):
    description = "popgym/repeat_previous[hard] memoroid seed=0..7 " + "long-name-" * 12
    record = {"train/sps": 12345.0, "train/episode_return": 0.5, "eval/episode_return": -0.25}
    with TrainingProgress(4096, description) as progress:  # stderr is captured: not a terminal
        progress.update(0, {})
        progress.update(2048, record)
        progress.update(4096, record)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2, lines
    for line, step in zip(lines, ("2,048/4,096", "4,096/4,096"), strict=True):
        assert line.startswith(f"{description} {step} steps "), line
        assert line.endswith("sps 12,345 | train 0.500 | eval -0.250"), line


def test_disabled_progress_prints_nothing(capsys):
    with TrainingProgress(10, "run", enabled=False) as progress:
        progress.update(5, {"train/sps": 1.0})
    assert capsys.readouterr().err == ""
