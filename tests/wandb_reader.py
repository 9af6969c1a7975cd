"""Read back an offline W&B run (``run-<id>.wandb``) without the network.

The file is wandb's LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB
blocks of records ``[crc32 (4) | length (2, LE) | type (1)] payload``, type FULL=1, FIRST=2,
MIDDLE=3, LAST=4; a block tail shorter than a record header is zero padding. Each complete
payload is a serialized ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

HEADER_LEN = 7
BLOCK = 32768
RECORD_HEADER = 7


def read_records(path: str | Path) -> list[Any]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a wandb run file"
    records, pending, pos = [], b"", HEADER_LEN
    while pos + RECORD_HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < RECORD_HEADER:
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + RECORD_HEADER])
        payload = data[pos + RECORD_HEADER : pos + RECORD_HEADER + length]
        pos += RECORD_HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind in (1, 2):
            pending = payload
        else:
            pending += payload
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(pending)
            records.append(rec)
            pending = b""
    return records


def read_run(run_path: str | Path, timeout: float = 30.0) -> dict[str, Any]:
    """``{"run": RunRecord, "config": {...}, "history": [{...}], "summary": {...}}`` of an
    offline run directory (``.../offline-run-*``).

    wandb's service process may still be writing the file when ``finish()`` returns: wait (up to
    ``timeout`` s) until the run's ``exit`` record is there.
    """
    (file,) = Path(run_path).glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    records = read_records(file)
    while not any(r.WhichOneof("record_type") == "exit" for r in records):
        assert time.monotonic() < deadline, f"{file} has no exit record after {timeout}s"
        time.sleep(0.2)
        records = read_records(file)
    out: dict[str, Any] = {"run": None, "config": {}, "history": [], "summary": {}}
    for rec in records:
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out["run"] = rec.run
            for item in rec.run.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in rec.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            out["history"].append(row)
        elif kind == "summary":
            for item in rec.summary.update:
                key = item.key or "/".join(item.nested_key)
                out["summary"][key] = json.loads(item.value_json)
    return out
