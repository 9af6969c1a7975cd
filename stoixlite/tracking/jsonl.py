"""JSON-lines files: the metrics of a run, one JSON object per line (``None`` for non-finite
values), written as the run goes and cut back to a checkpoint's records on resume."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlWriter:
    """Appends one JSON object per line to ``path`` (flushed after every record)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of a JSON-lines file (``None`` for non-finite values)."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def truncate_jsonl(path: Path, keep: int) -> None:
    """Keep the first ``keep`` records of a JSON-lines file (records written after the checkpoint
    being resumed from are dropped, so the resumed run rewrites them)."""
    if not path.exists():
        return
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_text("".join(line + "\n" for line in lines[:keep]), encoding="utf-8")


def last_record(path: Path) -> dict[str, Any]:
    """The last record of a JSON-lines file with ``None`` read back as NaN (``{}`` if none)."""
    records = read_jsonl(path) if path.exists() else []
    return {k: (math.nan if v is None else v) for k, v in records[-1].items()} if records else {}
