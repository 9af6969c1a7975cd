"""The benchmark's results: rows pooled over rounds, the markdown table, the machine and the
commit."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path


def hardware() -> str:
    """CPU model (and GPU if JAX sees one), for the results table."""
    import jax

    from stoixlite.results.machine import cpu_description

    devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    backend = jax.default_backend()
    return f"{cpu_description()}; JAX {jax.__version__} on {backend} ({devices})"


def merge_rounds(results: list[dict]) -> dict:
    """One row from the same spec's results over interleaved rounds: all timed chunks pooled."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return results[0]
    sps = sorted(x for r in ok for x in r["sps_all"])
    row = dict(ok[-1])
    if not sps:  # --compile-only
        return row
    if len(ok) < len(results):  # some rounds failed: their errors are kept with the row
        row["failed_rounds"] = [r["error"] for r in results if "error" in r]
    row.update(
        sps_all=sps,
        sps_median=statistics.median(sps),
        sps_min=sps[0],
        sps_max=sps[-1],
        compile_s=statistics.median(r["compile_s"] for r in ok),
        peak_rss_mb=max(r["peak_rss_mb"] for r in ok),
        load_avg=max(r["load_avg"] for r in ok),
        final_return=ok[-1]["final_return"],
    )
    return row


def peak_mib(row: dict) -> str:
    """The row's peak memory: process RSS, and the accelerator's own peak where it has one
    (``RSS / device``; on a GPU the RSS holds only the host side)."""
    rss = f"{row['peak_rss_mb']:,.0f}"
    device = row.get("peak_device_mb")
    return rss if device is None else f"{rss} / {device:,.0f}"


def markdown(rows: list[dict]) -> str:
    head = (
        "| network | env | envs x steps | devices | SPS median | SPS min-max | n | compile s "
        "| peak MiB | program MiB | final return | load | note |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['network']} | {r['env']} | {r['num_envs']} | {r.get('devices') or '-'} "
                f"| error: {r['error']} ||||||||"
            )
            continue
        sps = r["sps_all"]
        speed = "- | - | 0"  # --compile-only: nothing timed
        if sps:
            speed = f"{statistics.median(sps):,.0f} | {min(sps):,.0f}-{max(sps):,.0f} | {len(sps)}"
        failed = f" ({len(r['failed_rounds'])} rounds failed)" if r.get("failed_rounds") else ""
        program = "-" if r.get("program_mb") is None else f"{r['program_mb']:,.0f}"
        lines.append(
            f"| {r['network']} | {r['env']} | {r['num_envs']} x {r['rollout_length']} "
            f"| {r.get('devices', 1)} | {speed} "
            f"| {r['compile_s']:.1f} | {peak_mib(r)} | {program} | {r['final_return']:.1f} "
            f"| {r['load_avg']:.1f} | {r['label']}{failed} |"
        )
    return "\n".join(lines)


def commit() -> str:
    """The short commit of the package's checkout (``+dirty`` with uncommitted changes), or
    ``unknown`` for an installed package."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD") if (root / ".git").exists() else None
    if head is None:
        return "unknown (installed package)"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
