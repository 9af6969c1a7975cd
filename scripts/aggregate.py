#!/usr/bin/env python
"""Aggregate the JSON-lines results of a (multi)run directory into a table and plots.

    python scripts/aggregate.py multirun/2025-01-01/12-00-00 [--out DIR] [--metric KEY]

Finds every run below the directory (a ``metrics.jsonl`` next to a ``config.yaml``), groups the
runs by env (name and difficulty) x network and pools their seeds: a run trained with
``arch.num_seeds > 1`` contributes each seed of its ``metrics_per_seed.jsonl``. Writes to
``--out`` (default ``<dir>/aggregate``):

* ``results.md``: per env x network the number of seeds, the env steps trained, mean ± std
  (over seeds) and the 95 % confidence interval of the mean (Student t) of the final and of the
  maximum eval return, the wall time of the runs, and the runs that failed (an ``error.txt`` in
  their job directory);
* ``<env>.png``: learning curves per env, one line per network (mean over seeds, ± std band).

``--label run`` keys rows and curves by run directory name instead of network, to put the
ablations of one network side by side.

The table is also printed. Needs only numpy, matplotlib and omegaconf.
"""

from __future__ import annotations

import logging
import math
import sys
import warnings
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's stoixlite

from stoixlite.cli_args import OneLineArgumentParser, fail, output_dir_error  # noqa: E402
from stoixlite.tracking.jsonl import read_jsonl as _read_jsonl  # noqa: E402


class RunReadError(ValueError):
    """A run's file cannot be read (one line naming the file)."""


def read_jsonl(path: Path) -> list[dict]:
    """The records of a metrics file; :class:`RunReadError` naming it when it is unreadable."""
    try:
        return _read_jsonl(path)
    except (OSError, ValueError) as err:
        raise RunReadError(f"{path} is unreadable: {str(err).splitlines()[0]}") from None


Curve = tuple[np.ndarray, np.ndarray]  # steps [K], values [K] (NaN where missing)


def curve(records: list[dict], metric: str) -> Curve:
    steps = np.asarray([r["step"] for r in records], np.float64)
    values = np.asarray(
        [math.nan if r.get(metric) is None else r[metric] for r in records], np.float64
    )
    return steps, values


def metrics_file(run_dir: Path) -> Path:
    """The file the curves of a run come from: ``metrics_per_seed.jsonl`` if the run has one
    (``arch.num_seeds > 1``), else ``metrics.jsonl``."""
    per_seed = run_dir / "metrics_per_seed.jsonl"
    return per_seed if per_seed.exists() else run_dir / "metrics.jsonl"


def run_metrics(run_dir: Path) -> set[str]:
    """The metrics a run's curves can show (the keys of its records, but ``step`` and
    ``seed``)."""
    return {k for r in read_jsonl(metrics_file(run_dir)) for k in r} - {"step", "seed"}


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


LABELS = ("network", "run")


def labels(run_dir: Path, label: str = "network") -> tuple[str, str]:
    """``(env[difficulty], variant)``; the variant is the network name, or with
    ``label="run"`` the run directory's name (to compare ablations of one network)."""
    path = run_dir / "config.yaml"
    try:
        cfg = OmegaConf.load(path)
        env = str(cfg.env.name)
        if cfg.env.get("difficulty"):
            env += f"[{cfg.env.difficulty}]"
        network = str(cfg.network.name)
    except Exception as err:  # YAML syntax, binary garbage, no env/network section
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RunReadError(f"{path} is not a readable run config: {reason}") from None
    return env, network if label == "network" else run_dir.name


def slug(text: str) -> str:
    return text.replace("/", "-").replace("[", "-").replace("]", "")


# Two-sided 95 % Student-t quantiles by degrees of freedom (1..10); 1.96 beyond.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def finite(values: list[float]) -> np.ndarray:
    arr = np.asarray(values, np.float64)
    return arr[np.isfinite(arr)]


def fmt(values: list[float]) -> str:
    arr = finite(values)
    return "n/a" if arr.size == 0 else f"{arr.mean():.3f} ± {arr.std():.3f}"


def ci95(values: list[float]) -> str:
    """``[lo, hi]``: 95 % t-interval of the mean over seeds (``n/a`` below 2 seeds)."""
    arr = finite(values)
    if arr.size < 2:
        return "n/a"
    t = T95[arr.size - 2] if arr.size - 1 <= len(T95) else 1.96
    half = t * arr.std(ddof=1) / np.sqrt(arr.size)
    return f"[{arr.mean() - half:.2f}, {arr.mean() + half:.2f}]"


def run_wall_time(run_dir: Path) -> float:
    """Wall seconds of a run (compile included): ``time/elapsed_s`` of its last record."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    return float(records[-1].get("time/elapsed_s") or math.nan) if records else math.nan


Groups = dict[tuple[str, str], list[Curve]]
WallTimes = dict[tuple[str, str], list[float]]


def run_dirs(root: Path) -> list[Path]:
    """Every run below ``root``: a directory with a ``metrics.jsonl`` and a ``config.yaml``."""
    found = (path.parent for path in sorted(root.rglob("metrics.jsonl")))
    return [run_dir for run_dir in found if (run_dir / "config.yaml").exists()]


def collect(
    root: Path, metric: str, label: str = "network"
) -> tuple[Groups, WallTimes, list[Path]]:
    """Per (env, variant): the seeds' curves and the runs' wall times; the failed job dirs."""
    groups: Groups = defaultdict(list)
    walls: WallTimes = defaultdict(list)
    for run_dir in run_dirs(root):
        key = labels(run_dir, label)
        groups[key].extend(run_curves(run_dir, metric))
        walls[key].append(run_wall_time(run_dir))
    failed = sorted(p.parent for p in root.rglob("error.txt"))
    return groups, walls, failed


def table(groups: Groups, walls: WallTimes, failed: list[Path], metric: str) -> str:
    lines = [
        f"| env | network | seeds | steps | final {metric} | final 95% CI | max {metric} "
        "| max 95% CI | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (env, network), curves in sorted(groups.items()):
        finals = [
            values[np.isfinite(values)][-1] for _, values in curves if np.isfinite(values).any()
        ]
        maxima = [np.nanmax(values) for _, values in curves if np.isfinite(values).any()]
        steps = max((int(s[-1]) for s, _ in curves if len(s)), default=0)
        wall = finite(walls.get((env, network), []))
        wall_s = f"{wall.max():.0f}" if wall.size else "n/a"
        lines.append(
            f"| {env} | {network} | {len(curves)} | {steps:.2e} | {fmt(finals)} | {ci95(finals)} "
            f"| {fmt(maxima)} | {ci95(maxima)} | {wall_s} |"
        )
    lines.append("")
    lines.append(
        "mean ± std over seeds and the 95 % t-interval of the mean (runs pooled per env x "
        "network); wall s: the longest run's wall time, compile included."
    )
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
        # more curves than tab10 has colours: 20 colours, a legend beside the axes
        many = len(networks) > 10
        fig, ax = plt.subplots(figsize=(9, 4.5) if many else (6, 4))
        colours = plt.get_cmap("tab20" if many else "tab10").colors
        drawn = [(n, c) for n, c in sorted(networks.items()) if c]
        for i, (network, curves) in enumerate(drawn):
            colour = colours[i % len(colours)]
            steps = curves[0][0]
            values = np.stack([np.interp(steps, s, v) for s, v in curves])
            with warnings.catch_warnings():  # steps where no seed logged the metric: NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
                std = np.nanstd(values, axis=0)
            ax.plot(steps, mean, color=colour, label=f"{network} (n={len(curves)})")
            ax.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.2)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(metric)
        ax.set_title(env)
        ax.grid(alpha=0.3)
        if many:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        else:
            ax.legend()
        fig.tight_layout()
        path = out / f"{slug(env)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, help="a run or multirun directory")
    parser.add_argument("--out", type=Path, default=None, help="default: <root>/aggregate")
    parser.add_argument(
        "--metric",
        default="eval/episode_return",
        help="a key of the runs' metrics.jsonl records (default: eval/episode_return)",
    )
    parser.add_argument(
        "--label",
        choices=LABELS,
        default="network",
        help="rows/curves per network (seeds pooled), or per run directory (ablations)",
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"root {args.root} is not a directory")
    try:
        runs = run_dirs(args.root)
        metrics = sorted(set().union(*(run_metrics(run_dir) for run_dir in runs)))
        if runs and args.metric not in metrics:
            parser.error(f"--metric {args.metric!r} is in none of the runs; choose from {metrics}")
        groups, walls, failed = collect(args.root, args.metric, args.label)
    except RunReadError as err:
        parser.error(str(err))
    if not groups and not failed:
        parser.error(f"no runs (metrics.jsonl + config.yaml) below {args.root}")
    out = args.out or args.root / "aggregate"
    if error := output_dir_error(out):
        parser.error(error)
    text = table(groups, walls, failed, args.metric)
    print(text)
    try:
        (out / "results.md").write_text(text)
        plots = plot(groups, out, args.metric)
    except OSError as err:
        fail(f"the table (printed above) could not be written to {out}: {err}", 1, parser.prog)
    print(f"wrote {out / 'results.md'} and {len(plots)} plot(s) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
