"""Wall-time estimates of cells from the records' wall times (``train --time-limit``)."""

from __future__ import annotations

from pathlib import Path

from stoixlite.results.popgym_records import RecordError, read_records, record_name
from stoixlite.table.cells import Cell


def wall_estimates(roots: list[Path], gpu: bool) -> dict:
    """Seconds per env step and per cell trained at once (a record's wall time divided by its
    steps and by the cells that shared its machine: its ``jobs`` times the cells of its fused
    ``program``) on the same kind of machine (GPU or not):
    ``{(env, difficulty, model): s/step}`` and ``{model: [s/step, ...]}``, from ``roots`` (the
    first root that has a cell or a model gives its rates)."""
    exact: dict = {}
    by_model: dict = {}
    for root in roots:
        try:
            records = read_records(root) if root.is_dir() else []
        except RecordError:
            continue
        found: dict = {}
        for record in records:
            last = record["attempts"][-1] if record["attempts"] else {}
            wall, steps = record.get("wall_s"), record.get("steps")
            if ("GPU:" in str(last.get("machine", ""))) != gpu or not wall or not steps:
                continue
            shared = max(1, int(last.get("jobs") or 1)) * len(last.get("program") or [None])
            rate = float(wall) / float(steps) / shared  # a fused program: its cells shared it
            name = record_name(record["model"], record.get("variant"))
            exact.setdefault((record["env"], record["difficulty"], name), rate)  # first root wins
            found.setdefault(name, []).append(rate)
        for name, rates in found.items():
            by_model.setdefault(name, rates)
    return {"exact": exact, "model": by_model}


def estimate(cell: Cell, budget: int, rates: dict, jobs: int) -> float | None:
    """Estimated wall seconds of ``cell`` for ``budget`` steps with ``jobs`` cells sharing the
    machine (``None`` when unknown): the same cell's recorded rate, else the slowest recorded
    rate of the same model. Cells side by side share one GPU's (or the CPU's) throughput, so a
    cell's wall time scales with how many train at once (on one H200, 2M-step cells took 60-72 s
    three at a time, 114-135 s six at a time, 287-327 s thirteen at a time)."""
    rate = rates["exact"].get((cell.env, cell.difficulty, cell.path.name))
    if rate is None and rates["model"].get(cell.path.name):
        rate = max(rates["model"][cell.path.name])
    return None if rate is None else rate * budget * jobs
