"""The table runner killed at any moment (SIGKILL: a lost machine, an OOM kill) leaves every
record readable, the previous version or the new one, never a torn file; the next ``train``
resumes the cell it was training."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from stoixlite.results.popgym_records import (
    read_record,
    read_records,
    write_json_atomic,
    write_record,
)

# A writer that rewrites one record as fast as it can, alternating two versions of about 1 MB
# (so that a kill lands inside a write more often than not), and says when it has begun.
WRITER = """
import sys
from pathlib import Path
from stoixlite.results.popgym_records import write_record
path, versions = Path(sys.argv[1]), [int(v) for v in sys.argv[2:]]
def record(version):
    seeds = [{"seed": s, "curve": {"step": list(range(40000))}} for s in range(3)]
    return {"env": "repeat_previous", "difficulty": "easy", "model": "gru", "status": "done",
            "per_seed": seeds, "attempts": [], "budget": 1, "version": version}
write_record(path, record(versions[0]))
print("ready", flush=True)
k = 0
while True:
    k += 1
    write_record(path, record(versions[k % len(versions)]))
"""


def test_a_record_survives_its_writer_killed_at_any_moment(tmp_path):
    """SIGKILL at random moments of a loop of rewrites: every time, the record parses and is one
    of the versions written (earlier kills' versions included), and the folder's leftovers
    (temporary files of the killed writes) are never read as records."""
    path = tmp_path / "repeat_previous" / "easy" / "gru.json"
    rng = random.Random(0)
    written = []
    for k in range(5):
        versions = [2 * k, 2 * k + 1]
        written += versions
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), *map(str, versions)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        record = read_record(path)  # parses: not torn
        assert record["version"] in written[-2:], (k, record["version"])
        assert [r["version"] for r in read_records(tmp_path)] == [record["version"]]


def test_a_write_that_dies_before_its_rename_keeps_the_old_record(tmp_path, monkeypatch):
    """The new text goes to a temporary file first: a write that dies between writing it and
    renaming it over the record leaves the old record whole, and no temporary file."""
    path = tmp_path / "r.json"
    write_record(path, {"version": 1})

    def dies(src, dst):
        raise KeyboardInterrupt  # the process stopped between the write and the rename

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(KeyboardInterrupt):
        write_record(path, {"version": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"version": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    write_json_atomic(path, {"version": 3})  # and the next write replaces it
    assert json.loads(path.read_text()) == {"version": 3}
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
