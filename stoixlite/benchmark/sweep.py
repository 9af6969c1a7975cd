"""A whole sweep timed as processes: ``hydra/launcher=fused`` against the basic launcher, or against
one of its jobs alone.

Each side is one ``python -m stoixlite.rec_ppo`` process, timed from start to exit (start-up,
parsing, compiling, training, outputs), with the CPU seconds it used (user + system, all its
threads):

* ``fused``: ``python -m stoixlite.rec_ppo -m hydra/launcher=fused OVERRIDES``;
* ``--against basic`` (the default): the same sweep with Hydra's basic launcher (its jobs one
  after another in one process);
* ``--against one``: the sweep's first job alone (``python -m stoixlite.rec_ppo`` with that job's
  values): what a sweep costs against one run (the GPU target of docs/experiments.md, "Sweeps as
  one program").

The sides alternate within a round and swap their order every round, so that machine load hits
both alike. Every process must exit 0 and every job write a finite final eval return; the tool
reports per round the wall and CPU seconds of each side and the ratio fused / other (below 1: the
fused sweep is faster), and with
``--against basic`` the largest difference between a job's final eval return fused and basic (the
same runs: rounding apart, a difference grows over a run's updates). Outputs go to a temporary
directory, removed at the end (``--keep DIR`` keeps them). JAX's persistent compilation cache is
off in the timed processes. This process starts no JAX backend (on a GPU it would hold the card).

Usage::

    python -m stoixlite.benchmark sweep network=gru env=popgym/repeat_previous arch.num_envs=64 \\
        arch.target_return=null system.lr=1e-4,3e-4,1e-3 system.ent_coef=0,0.01 arch.seed=0,1 \\
        arch.total_timesteps=500000
    # 48 jobs against one job (an accelerator's target)
    python -m stoixlite.benchmark sweep --against one network=gru env=popgym/repeat_previous \\
        arch.num_envs=64 arch.target_return=null system.lr=1e-4,3e-4,1e-3 \\
        system.ent_coef=0,0.01 arch.seed=0,1,2,3,4,5,6,7 arch.total_timesteps=500000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from stoixlite.cli.args import OneLineArgumentParser, fail, last_error_line, output_dir_error
from stoixlite.cli.sweep_overrides import sweep_combinations
from stoixlite.tracking.files import METRICS_FILE

PROG = "python -m stoixlite.benchmark sweep"
OWN_KEYS = ("hydra/launcher", "hydra.sweep.dir", "hydra.run.dir", "hydra.mode")
AGAINST = {"basic": "basic launcher", "one": "first job alone"}


@dataclass
class Side:
    """One timed process: its label, command, output directory and, once run, wall and CPU
    seconds and its jobs' final eval returns (by job directory name)."""

    label: str
    command: list[str]
    out: Path
    wall: float = math.nan
    cpu: float = math.nan
    finals: dict[str, float] | None = None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineArgumentParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("overrides", nargs="*", help="the sweep's Hydra overrides (a,b lists)")
    parser.add_argument(
        "--against",
        choices=list(AGAINST),
        default="basic",
        help="basic: the basic launcher's sweep; one: the sweep's first job alone",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of both sides (>= 1)")
    parser.add_argument("--keep", default=None, help="keep the outputs in this new directory")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds} is invalid: at least 1")
    if args.keep is not None and (error := output_dir_error(args.keep, "--keep")):
        parser.error(error)
    if args.keep is not None and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        parser.error(f"--keep {args.keep} is not empty: give a new or empty directory")
    for override in args.overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in OWN_KEYS or override in ("-m", "--multirun"):
            parser.error(f"{override!r}: the tool sets {key} itself; leave it out")
    return args


def final_return(run_dir: Path) -> float:
    """The final eval return of a job's directory: its last ``metrics.jsonl`` record's (NaN
    where there is none)."""
    path = run_dir / METRICS_FILE
    lines = path.read_text().splitlines() if path.exists() else []
    last = json.loads(lines[-1]) if lines else {}
    return float(last.get("eval/episode_return", math.nan))


def job_dirs(side: Side) -> list[Path]:
    """The side's run directories: each job's of a sweep, the run's own alone."""
    if (side.out / METRICS_FILE).exists():
        return [side.out]
    if not side.out.is_dir():
        return []
    return sorted(p for p in side.out.iterdir() if (p / METRICS_FILE).exists())


def run_side(side: Side, jobs: int) -> None:
    """Run ``side``'s process to its end, timed; fails the tool (one line, exit 1) when it exits
    non-zero or a job has no finite final eval return."""
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    log = side.out.with_name(side.out.name + ".log")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(side.command, stdout=out, stderr=subprocess.STDOUT, env=env)
    side.wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    side.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        line = last_error_line(log.read_text())
        fail(f"the {side.label} side exited {proc.returncode}: {line} (log: {log})", 1, PROG)
    side.finals = {d.name: final_return(d) for d in job_dirs(side)}
    wrote = len(side.finals)
    bad = [name for name, final in side.finals.items() if not math.isfinite(final)]
    if wrote != jobs or bad:
        what = f"{wrote} of {jobs} jobs wrote metrics" if wrote != jobs else ""
        what = what or f"no finite final eval return in {', '.join(bad)}"
        fail(f"the {side.label} side: {what} (log: {log})", 1, PROG)


def sides(args: argparse.Namespace, jobs: list[list[str]], root: Path, number: int) -> list[Side]:
    """Round ``number``'s two sides (fused first in odd rounds, the other first in even ones)."""
    tool = [sys.executable, "-m", "stoixlite.rec_ppo"]
    fused_dir, other_dir = root / f"fused-{number}", root / f"{args.against}-{number}"
    fused = Side(
        "fused",
        [*tool, "-m", "hydra/launcher=fused", *args.overrides, f"hydra.sweep.dir={fused_dir}"],
        fused_dir,
    )
    if args.against == "basic":
        command = [*tool, "-m", *args.overrides, f"hydra.sweep.dir={other_dir}"]
    else:
        command = [*tool, *jobs[0], f"hydra.run.dir={other_dir}"]
    other = Side(AGAINST[args.against], command, other_dir)
    return [fused, other] if number % 2 == 1 else [other, fused]


def header(args: argparse.Namespace, jobs: int) -> list[str]:
    """Where and what: machine, JAX and its backend, commit, date, the sweep."""
    from stoixlite.benchmark.gpu_suite import backend
    from stoixlite.benchmark.table import commit
    from stoixlite.results.machine import machine_description

    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"{machine_description()}; JAX {version('jax')} on {backend()}; commit {commit()}; {now}",
        f"sweep of {jobs} jobs: {' '.join(args.overrides) or '(defaults)'}",
        f"fused (hydra/launcher=fused) against the {AGAINST[args.against]}",
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        jobs = sweep_combinations(args.overrides)
    except ValueError as error:
        fail(str(error), prog=PROG)
    if len(jobs) < 2:
        needs = "a sweep needs a,b values of at least one key"
        fail(f"the overrides make {len(jobs)} job: {needs}", prog=PROG)
    from stoixlite.cli.args import checked_run_config

    _, error = checked_run_config(jobs[0])
    if error is not None:
        fail(error, prog=PROG)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="stoixlite-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    other = AGAINST[args.against]
    for line in header(args, len(jobs)):
        print(line, flush=True)
    print(f"| round | fused: wall s / CPU s | {other}: wall s / CPU s | fused / other: wall |")
    print("|---|---|---|---|", flush=True)
    try:
        for number in range(1, args.rounds + 1):
            timed = {}
            for side in sides(args, jobs, root, number):
                run_side(side, len(jobs) if side.label != AGAINST["one"] else 1)
                timed[side.label] = side
            fused, against = timed["fused"], timed[other]
            print(
                f"| {number}{' (fused first)' if number % 2 else ''} | {fused.wall:.1f} / "
                f"{fused.cpu:.1f} | {against.wall:.1f} / {against.cpu:.1f} | "
                f"{fused.wall / against.wall:.2f} |",
                flush=True,
            )
            if args.against == "basic":
                assert fused.finals is not None and against.finals is not None
                gap = max(abs(fused.finals[n] - against.finals[n]) for n in fused.finals)
                print(f"round {number}: final eval returns, largest |fused - basic| {gap:.3g}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
