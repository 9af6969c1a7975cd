"""The tables of ``python -m stoixlite.benchmark host`` (:mod:`stoixlite.benchmark.host`): stoixlite
and sb3 side by side per vector and envs count, and stoixlite with and without
``arch.host_overlap``."""

from __future__ import annotations

OVERLAPPED = "stoixlite overlap"  # the label of a stoixlite run with overlap
SB3_VECTORS = {"sync": "DummyVecEnv", "async": "SubprocVecEnv"}


def label(spec: dict) -> str:
    """What a run is in the tables and the log: its framework, or :data:`OVERLAPPED`."""
    return OVERLAPPED if spec.get("overlap") else spec["framework"]


def sps_cell(row: dict | None) -> str:
    """``median (min-max, n=N) | setup s`` of a row, its error, or dashes where it did not run."""
    if row is None:
        return "- | -"
    if "error" in row:
        return f"error: {row['error']} | -"
    spread = f"{row['sps_min']:,.0f}-{row['sps_max']:,.0f}, n={len(row['sps_all'])}"
    return f"{row['sps_median']:,.0f} ({spread}) | {row['compile_s']:.1f}"


def markdown(rows: list[dict]) -> str:
    """The table: one line per vector and envs count, stoixlite (without overlap where it ran
    both ways) and sb3 side by side; with overlap runs, :func:`overlap_table` after it."""
    head = (
        "| vector | envs x steps | stoixlite SPS median (min-max, n) | setup s "
        "| sb3 SPS median (min-max, n) | setup s | stoixlite / sb3 | peak MiB (stoixlite / sb3) "
        "| final return (stoixlite / sb3) | load |"
    )
    lines = [head, "|" + "---|" * 10]
    for (vector, n), pair in by_row(rows).items():
        stoix = pair.get("stoixlite", pair.get(OVERLAPPED))
        ok = [stoix, pair.get("sb3")]
        ok = [r if r is not None and "error" not in r else None for r in ok]
        ratio = f"{ok[0]['sps_median'] / ok[1]['sps_median']:.2f}" if all(ok) else "-"

        def both(key: str, fmt: str, ok=ok) -> str:
            return " / ".join("-" if r is None else format(r[key], fmt) for r in ok)

        steps = rows[0]["rollout_length"]
        vecs = f"{vector} ({SB3_VECTORS[vector]})"
        lines.append(
            f"| {vecs} | {n} x {steps} | {sps_cell(stoix)} | {sps_cell(pair.get('sb3'))} "
            f"| {ratio} | {both('peak_rss_mb', ',.0f')} | {both('final_return', '.1f')} "
            f"| {load_cell(ok)} |"
        )
    table = "\n".join(lines)
    if any(label(r) == OVERLAPPED for r in rows):
        table += "\n\n" + overlap_table(rows)
    return table


def overlap_table(rows: list[dict]) -> str:
    """stoixlite's steps/s without and with ``arch.host_overlap``, one line per vector and envs
    count, and their ratio (on / off)."""
    head = (
        "| vector | envs x steps | overlap off SPS median (min-max, n) | setup s "
        "| overlap on SPS median (min-max, n) | setup s | on / off | load |"
    )
    lines = [head, "|" + "---|" * 8]
    for (vector, n), pair in by_row(rows).items():
        ok = [pair.get("stoixlite"), pair.get(OVERLAPPED)]
        ok = [r if r is not None and "error" not in r else None for r in ok]
        ratio = f"{ok[1]['sps_median'] / ok[0]['sps_median']:.2f}" if all(ok) else "-"
        steps = rows[0]["rollout_length"]
        lines.append(
            f"| {vector} | {n} x {steps} | {sps_cell(pair.get('stoixlite'))} "
            f"| {sps_cell(pair.get(OVERLAPPED))} | {ratio} | {load_cell(ok)} |"
        )
    return "\n".join(lines)


def by_row(rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """``{(vector, envs): {label: row}}`` in the rows' order."""
    out: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        out.setdefault((r["vector"], r["num_envs"]), {})[label(r)] = r
    return out


def load_cell(runs: list[dict | None]) -> str:
    """The highest 1-minute load average of the runs that ran."""
    return f"{max((r['load_avg'] for r in runs if r is not None), default=float('nan')):.1f}"
