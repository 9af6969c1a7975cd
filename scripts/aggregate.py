#!/usr/bin/env python
"""Aggregate the JSON-lines results of a (multi)run directory into a table and plots.

    python scripts/aggregate.py multirun/2025-01-01/12-00-00 [--out DIR] [--metric KEY]

Finds every run below the directory (a ``metrics.jsonl`` next to a ``config.yaml``), groups the
runs by env (name and difficulty) x network and pools their seeds: a run trained with
``arch.num_seeds > 1`` contributes each seed of its ``metrics_per_seed.jsonl``. Writes to
``--out`` (default ``<dir>/aggregate``):

* ``results.md``: per env x network the number of seeds, mean ± std (over seeds) of the final
  and of the maximum eval return, and the runs that failed (an ``error.txt`` in their job
  directory);
* ``<env>.png``: learning curves per env, one line per network (mean over seeds, ± std band).

The table is also printed. Needs only numpy, matplotlib and omegaconf.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections import defaultdict
from pathlib import Path

# No third-party log lines in the output (matplotlib's font cache notice, Pillow's PNG chunks).
for _name in ("matplotlib", "PIL"):
    logging.getLogger(_name).setLevel(logging.ERROR)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

Curve = tuple[np.ndarray, np.ndarray]  # steps [K], values [K] (NaN where missing)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve(records: list[dict], metric: str) -> Curve:
    steps = np.asarray([r["step"] for r in records], np.float64)
    values = np.asarray(
        [math.nan if r.get(metric) is None else r[metric] for r in records], np.float64
    )
    return steps, values


def run_curves(run_dir: Path, metric: str) -> list[Curve]:
    """One curve per seed of a run directory."""
    per_seed = run_dir / "metrics_per_seed.jsonl"
    if per_seed.exists():
        by_seed: dict[int, list[dict]] = defaultdict(list)
        for record in read_jsonl(per_seed):
            by_seed[record["seed"]].append(record)
        return [curve(records, metric) for _, records in sorted(by_seed.items())]
    records = read_jsonl(run_dir / "metrics.jsonl")
    return [curve(records, metric)] if records else []


def labels(run_dir: Path) -> tuple[str, str]:
    cfg = OmegaConf.load(run_dir / "config.yaml")
    env = str(cfg.env.name)
    if cfg.env.get("difficulty"):
        env += f"[{cfg.env.difficulty}]"
    return env, str(cfg.network.name)


def slug(text: str) -> str:
    return text.replace("/", "-").replace("[", "-").replace("]", "")


def fmt(values: list[float]) -> str:
    arr = np.asarray(values, np.float64)
    arr = arr[np.isfinite(arr)]
    return "n/a" if arr.size == 0 else f"{arr.mean():.3f} ± {arr.std():.3f}"


def collect(root: Path, metric: str) -> tuple[dict[tuple[str, str], list[Curve]], list[Path]]:
    groups: dict[tuple[str, str], list[Curve]] = defaultdict(list)
    for path in sorted(root.rglob("metrics.jsonl")):
        run_dir = path.parent
        if (run_dir / "config.yaml").exists():
            groups[labels(run_dir)].extend(run_curves(run_dir, metric))
    failed = sorted(p.parent for p in root.rglob("error.txt"))
    return groups, failed


def table(groups: dict[tuple[str, str], list[Curve]], failed: list[Path], metric: str) -> str:
    lines = [
        f"| env | network | seeds | final {metric} | max {metric} |",
        "|---|---|---|---|---|",
    ]
    for (env, network), curves in sorted(groups.items()):
        finals = [
            values[np.isfinite(values)][-1] for _, values in curves if np.isfinite(values).any()
        ]
        maxima = [np.nanmax(values) for _, values in curves if np.isfinite(values).any()]
        lines.append(f"| {env} | {network} | {len(curves)} | {fmt(finals)} | {fmt(maxima)} |")
    lines.append("")
    lines.append("mean ± std over seeds (runs pooled per env x network).")
    if failed:
        lines.append(f"\n{len(failed)} failed runs (see their error.txt):")
        lines.extend(f"- {p}" for p in failed)
    return "\n".join(lines) + "\n"


def plot(groups: dict[tuple[str, str], list[Curve]], out: Path, metric: str) -> list[Path]:
    by_env: dict[str, dict[str, list[Curve]]] = defaultdict(dict)
    for (env, network), curves in groups.items():
        by_env[env][network] = curves
    paths = []
    for env, networks in sorted(by_env.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for network, curves in sorted(networks.items()):
            if not curves:
                continue
            steps = curves[0][0]
            values = np.stack([np.interp(steps, s, v) for s, v in curves])
            mean = np.nanmean(values, axis=0)
            std = np.nanstd(values, axis=0)
            ax.plot(steps, mean, label=f"{network} (n={len(curves)})")
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(metric)
        ax.set_title(env)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / f"{slug(env)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, help="a run or multirun directory")
    parser.add_argument("--out", type=Path, default=None, help="default: <root>/aggregate")
    parser.add_argument("--metric", default="eval/episode_return")
    args = parser.parse_args(argv)
    groups, failed = collect(args.root, args.metric)
    if not groups and not failed:
        print(f"no runs (metrics.jsonl + config.yaml) below {args.root}", file=sys.stderr)
        return 1
    out = args.out or args.root / "aggregate"
    out.mkdir(parents=True, exist_ok=True)
    text = table(groups, failed, args.metric)
    (out / "results.md").write_text(text)
    plots = plot(groups, out, args.metric)
    print(text)
    print(f"wrote {out / 'results.md'} and {len(plots)} plot(s) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
