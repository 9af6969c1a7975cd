"""Aggregate the JSON-lines results of a (multi)run directory into a table and plots.

    python -m stoixlite.aggregate multirun/2025-01-01/12-00-00 [--out DIR] [--metric KEY]

Finds every run below the directory (a ``metrics.jsonl`` next to a ``config.yaml``), groups the
runs by env (name and difficulty) x network and pools their seeds: a run trained with
``arch.num_seeds > 1`` contributes each seed of its ``metrics_per_seed.jsonl``. Writes to
``--out`` (default ``<dir>/aggregate``):

* ``results.md``: per env x network the number of seeds, the env steps trained, and for the
  MMER (POPGym's max mean episodic return of the training episodes of one update), the final
  and the maximum eval return: the mean, the sample standard deviation (ddof 1) over seeds and
  the 95 % Student-t interval of the mean (:mod:`stoixlite.results.stats`); the wall time of
  the runs, and the runs that failed (an ``error.txt`` in their job directory);
* ``<env>.png``: learning curves per env, one line per network (mean over seeds, ± std band).

``--label run`` keys rows and curves by run directory name instead of network, to put the
ablations of one network side by side.

The table is also printed.
"""

from __future__ import annotations

import logging
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

from stoixlite.cli.args import OneLineArgumentParser, fail, output_dir_error  # noqa: E402
from stoixlite.results.runs import (  # noqa: E402
    Curve,
    RunReadError,
    curve,
    read_jsonl,
    run_config,
    run_dirs,
    run_wall_time,
    seed_records,
    seed_scores,
)
from stoixlite.results.stats import LABEL, finite, summarize_seeds  # noqa: E402


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
    return [curve(records, metric) for records in seed_records(run_dir)]


LABELS = ("network", "run")


def labels(run_dir: Path, label: str = "network") -> tuple[str, str]:
    """``(env[difficulty], variant)``; the variant is the network name, or with
    ``label="run"`` the run directory's name (to compare ablations of one network)."""
    cfg = run_config(run_dir)
    try:
        env = str(cfg.env.name)
        if cfg.env.get("difficulty"):
            env += f"[{cfg.env.difficulty}]"
        network = str(cfg.network.name)
    except Exception as err:  # no env/network section
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        path = run_dir / "config.yaml"
        raise RunReadError(f"{path} is not a readable run config: {reason}") from None
    return env, network if label == "network" else run_dir.name


def slug(text: str) -> str:
    return text.replace("/", "-").replace("[", "-").replace("]", "")


Groups = dict[tuple[str, str], list[Curve]]
WallTimes = dict[tuple[str, str], list[float]]
Mmers = dict[tuple[str, str], list[float]]


def collect(
    root: Path, metric: str, label: str = "network"
) -> tuple[Groups, WallTimes, list[Path], Mmers]:
    """Per (env, variant): the seeds' curves, the runs' wall times and the seeds' MMER; the
    failed job dirs."""
    groups: Groups = defaultdict(list)
    walls: WallTimes = defaultdict(list)
    mmers: Mmers = defaultdict(list)
    for run_dir in run_dirs(root):
        key = labels(run_dir, label)
        groups[key].extend(run_curves(run_dir, metric))
        walls[key].append(run_wall_time(run_dir))
        mmers[key].extend(score.mmer for score in seed_scores(run_dir))
    failed = sorted(p.parent for p in root.rglob("error.txt"))
    return groups, walls, failed, mmers


def table(
    groups: Groups, walls: WallTimes, failed: list[Path], metric: str, mmers: Mmers | None = None
) -> str:
    mmers = mmers or {}
    lines = [
        f"| env | network | seeds | steps | MMER | MMER 95% CI | final {metric} | final 95% CI "
        f"| max {metric} | max 95% CI | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (env, network), curves in sorted(groups.items()):
        finals = [
            values[np.isfinite(values)][-1] for _, values in curves if np.isfinite(values).any()
        ]
        maxima = [np.nanmax(values) for _, values in curves if np.isfinite(values).any()]
        mmer, final, best = (
            summarize_seeds(v) for v in (mmers.get((env, network), []), finals, maxima)
        )
        steps = max((int(s[-1]) for s, _ in curves if len(s)), default=0)
        wall = finite(walls.get((env, network), []))
        wall_s = f"{wall.max():.0f}" if wall.size else "n/a"
        lines.append(
            f"| {env} | {network} | {len(curves)} | {steps:.2e} | {mmer.fmt()} | {mmer.fmt_ci()} "
            f"| {final.fmt()} | {final.fmt_ci()} | {best.fmt()} | {best.fmt_ci()} | {wall_s} |"
        )
    lines.append("")
    lines.append(
        f"{LABEL}; runs pooled per env x network. MMER: the maximum over training of the mean "
        "return of the training episodes of one update (POPGym's max mean episodic return); "
        "final / max: the last and the best value of the metric; wall s: the longest run's wall "
        "time, compile included."
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
    parser = OneLineArgumentParser(
        prog="python -m stoixlite.aggregate", description=__doc__.split("\n")[0]
    )
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
        per_run = {run_dir: run_metrics(run_dir) for run_dir in runs}
        metrics = sorted(set().union(*per_run.values()))
        if runs and not metrics:  # every run's records are empty: no metric to blame
            empty = [metrics_file(run_dir) for run_dir in runs]
            others = f" (nor do the {len(empty) - 1} other runs' files)" if len(empty) > 1 else ""
            parser.error(f"{empty[0]} has no records{others}: nothing to aggregate yet")
        if runs and args.metric not in metrics:
            parser.error(f"--metric {args.metric!r} is in none of the runs; choose from {metrics}")
        groups, walls, failed, mmers = collect(args.root, args.metric, args.label)
    except RunReadError as err:
        parser.error(str(err))
    if not groups and not failed:
        parser.error(f"no runs (metrics.jsonl + config.yaml) below {args.root}")
    out = args.out or args.root / "aggregate"
    if error := output_dir_error(out):
        parser.error(error)
    text = table(groups, walls, failed, args.metric, mmers)
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
