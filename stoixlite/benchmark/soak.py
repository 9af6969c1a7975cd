"""The soak benchmark: does a long run, or a long multirun, stay within bounded resources?

``python -m stoixlite.benchmark soak run|multirun --out FILE.json``. Each mode runs the command
a user runs (``python -m stoixlite.rec_ppo``) in a subprocess and samples it from ``/proc``
(Linux) twice a second:

* ``run``: one run of ``--steps`` environment steps (10M by default: gymnax CartPole-v1 and the
  feedforward network, ``--chunks`` learn chunks), a checkpoint after every chunk and W&B in
  offline mode (its files beside the run directory). After each chunk (a new line of
  ``metrics.jsonl``): the resident memory (all, and anonymous) and open file descriptors of the
  process and of its children (W&B's service), the size of the run directory and of W&B's files.
  ``--time-limit-s`` sends SIGTERM when it is up: the run stops after its chunk, with its
  checkpoint, and the figures say how many steps it ran.
* ``multirun``: a multirun (Hydra's basic launcher: every job in the one process) of ``--jobs``
  tiny jobs of which ``--failing`` fail (an ``arch.seed`` the config refuses, spread over the
  sweep). After each job: the launcher's resident memory and open file descriptors. At the end:
  the exit status (1), the failed-jobs summary line (every failed job named once, no other),
  and the litter: files created beside the sweep directory or in the temporary directory,
  unfinished checkpoints.

Growth is the change from the end of ``--warmup`` chunks (jobs) to the last one: what a longer
run would add. Prints a table and the verdict; writes every sample, the command, commit,
machine and date as JSON (``--out``). Run it niced on a shared machine (``nice -n 10``). Extra
Hydra overrides go after ``--``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import stoixlite
from stoixlite.benchmark.table import commit
from stoixlite.cli.args import OneLineArgumentParser, output_file_error
from stoixlite.cli.sweep_callback import ERROR_FILE
from stoixlite.results.machine import cpu_description

SAMPLE_S = 0.5
RUN = [
    "env=gymnax/CartPole-v1",
    "network=feedforward",
    "checkpoint.every=1",
    "logger=wandb",
    "logger.wandb.mode=offline",
    "logger.progress=false",
]
TINY = [
    "arch.num_envs=4",
    "arch.num_eval_envs=2",
    "arch.total_timesteps=128",
    "arch.num_evaluations=2",
    "arch.eval_max_steps=20",
    "system.rollout_length=16",
    "system.epochs=1",
    "system.num_minibatches=2",
    "network.hidden_size=8",
    "network.embed_size=8",
    "network.head_size=8",
    "logger.progress=false",
    "logger.plot=false",
]
PROG = "python -m stoixlite.benchmark soak"
UNFINISHED = "*orbax-checkpoint-tmp*"  # what an orbax save cut short leaves


# ---------------------------------------------------------------------------------------------
# What a process holds
# ---------------------------------------------------------------------------------------------


def rss_mb(pid: int, kind: str = "VmRSS") -> float:
    """The resident memory of process ``pid`` in MiB (0 when it is gone): all of it
    (``VmRSS``), or its anonymous part (``RssAnon``: the heap, without the mapped files, such
    as the shared libraries, that the kernel may drop and read again)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{kind}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:  # it ended
            continue
        for task in tasks:
            try:  # a thread that ends meanwhile takes none of the others' children with it
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def open_fds(pid: int) -> int:
    """How many file descriptors process ``pid`` holds open (0 when it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def size_mb(path: Path) -> float:
    """The bytes of the files below ``path``, in MiB."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(dirpath) / name).lstat().st_size
            except OSError:
                continue
    return total / 2**20


def sample(pid: int, **extra: Any) -> dict[str, Any]:
    """``extra`` and what ``pid`` and its descendants hold now."""
    others = descendants(pid)
    return {
        **extra,
        "rss_mb": round(rss_mb(pid), 1),
        "anon_mb": round(rss_mb(pid, "RssAnon"), 1),
        "fds": open_fds(pid),
        "children": len(others),
        "children_rss_mb": round(sum(rss_mb(c) for c in others), 1),
        "children_fds": sum(open_fds(c) for c in others),
    }


def count_lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except OSError:
        return 0


def job_number(name: str) -> int | None:
    """The number of a multirun job from its directory's name (``12`` or ``12_<what it runs>``);
    ``None`` for another name."""
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def job_dirs(sweep: Path) -> list[Path]:
    """The job directories of a sweep, by job number."""
    if not sweep.is_dir():
        return []
    jobs = [p for p in sweep.iterdir() if p.is_dir() and job_number(p.name) is not None]
    return sorted(jobs, key=lambda p: job_number(p.name))


# ---------------------------------------------------------------------------------------------
# The two soaks
# ---------------------------------------------------------------------------------------------


def launch(argv: list[str], log: Path) -> subprocess.Popen:
    """``python -m stoixlite.rec_ppo *argv`` (this package) in ``log``'s directory, its output
    in ``log``, its temporary files in ``<that directory>/tmp`` (what it leaves there is
    litter)."""
    tmp = log.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    package_root = str(Path(stoixlite.__file__).resolve().parents[1])
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TMPDIR": str(tmp)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "stoixlite.rec_ppo", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,
        )


def soak_run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The ``run`` soak in ``work`` (module docstring)."""
    run_dir = work / "run"
    argv = [
        *RUN,
        f"arch.total_timesteps={args.steps}",
        f"arch.num_evaluations={args.chunks}",
        f"logger.wandb.dir={work}",
        f"hydra.run.dir={run_dir}",
        *args.overrides,
    ]
    proc, start = launch(argv, work / "run.log"), time.monotonic()
    rows: list[dict[str, Any]] = []
    stopped = False
    while proc.poll() is None:
        chunks = count_lines(run_dir / "metrics.jsonl")
        if chunks > (rows[-1]["chunk"] if rows else 0):
            wall = round(time.monotonic() - start, 1)
            rows.append(
                sample(proc.pid, chunk=chunks, wall_s=wall, run_dir_mb=round(size_mb(run_dir), 2))
            )
            rows[-1]["wandb_mb"] = round(size_mb(work / "wandb"), 2)
        if args.time_limit_s and not stopped and time.monotonic() - start > args.time_limit_s:
            proc.send_signal(signal.SIGTERM)  # the run stops after its chunk, with its checkpoint
            stopped = True
        time.sleep(SAMPLE_S)
    metrics = [json.loads(line) for line in _read(run_dir / "metrics.jsonl").splitlines() if line]
    return {
        "argv": argv,
        "exit": proc.returncode,
        "stopped_by_time_limit": stopped,
        "steps_run": max((int(r.get("step", 0)) for r in metrics), default=0),
        "rows": rows,
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").glob("*")),
        "unfinished_checkpoints": [str(p) for p in run_dir.rglob(UNFINISHED)],
        "left_in_tmp": sorted(os.listdir(work / "tmp")),
        "log_tail": _read(work / "run.log").splitlines()[-5:],
    }


def sweep_seeds(jobs: int, failing: int) -> list[int]:
    """``jobs`` seeds, ``failing`` of them negative (refused), spread evenly over the sweep."""
    every = max(jobs // max(failing, 1), 1)
    seeds, bad = [], 0
    for i in range(jobs):
        if bad < failing and i % every == every - 1:
            bad += 1
            seeds.append(-bad)
        else:
            seeds.append(i)
    return seeds


def named_jobs(summary: str) -> list[int]:
    """The numbers of the jobs a failed-jobs summary line names, in order (``... errors in
    <sweep>/{0_a/error.txt, 12_b/error.txt}``: ``[0, 12]``)."""
    braces = re.search(r"\{([^{}]*)\}\s*$", summary)
    if braces is None:
        return []
    names = [name.strip() for name in braces.group(1).split(",")]
    jobs = [job_number(n.rsplit("/", 1)[0]) for n in names if n.endswith(f"/{ERROR_FILE}")]
    return [n for n in jobs if n is not None]


def soak_multirun(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The ``multirun`` soak in ``work`` (module docstring)."""
    sweep = work / "sweep"
    seeds = sweep_seeds(args.jobs, args.failing)
    argv = ["-m", *TINY, f"arch.seed={','.join(map(str, seeds))}", f"hydra.sweep.dir={sweep}"]
    argv += args.overrides
    before = set(os.listdir(work)) | {"tmp"}
    proc, start = launch(argv, work / "multirun.log"), time.monotonic()
    rows: list[dict[str, Any]] = []
    while proc.poll() is None:
        started = len(job_dirs(sweep))
        if started > (rows[-1]["job"] if rows else 0):
            rows.append(sample(proc.pid, job=started, wall_s=round(time.monotonic() - start, 1)))
        time.sleep(SAMPLE_S)
    log = _read(work / "multirun.log")
    summaries = [line for line in log.splitlines() if line.startswith("multirun: ")]
    refused = [i for i, seed in enumerate(seeds) if seed < 0]
    failed_dirs = [d for d in job_dirs(sweep) if (d / ERROR_FILE).exists()]
    failed = [job_number(d.name) for d in failed_dirs]
    return {
        "argv": argv,
        "exit": proc.returncode,
        "rows": rows,
        "summary_lines": summaries,
        "jobs_meant_to_fail": refused,
        "failed_jobs": failed,
        "failed_jobs_named_in_summary": named_jobs(summaries[-1]) if summaries else [],
        "jobs_with_results": sum((d / "metrics.jsonl").is_file() for d in job_dirs(sweep)),
        "failed_job_files": sorted({p.name for d in failed_dirs for p in d.iterdir()}),
        "litter_beside_the_sweep": sorted(
            set(os.listdir(work)) - before - {"sweep", "multirun.log"}
        ),
        "left_in_tmp": sorted(os.listdir(work / "tmp")),
        "unfinished_checkpoints": [str(p) for p in sweep.rglob(UNFINISHED)],
    }


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def growth(rows: list[dict[str, Any]], warmup: int, keys: list[str]) -> dict[str, float]:
    """Each of ``keys``' change from row ``warmup`` (0-based: after ``warmup`` rows) to the
    last row; empty when there are no rows after the warm-up."""
    if len(rows) <= warmup:
        return {}
    first, last = rows[warmup], rows[-1]
    return {k: round(last[k] - first[k], 2) for k in keys}


def problems(mode: str, result: dict[str, Any]) -> list[str]:
    """What the soak found wrong: litter, unfinished checkpoints, a wrong exit status or
    summary (empty: none). Growth is for the reader to judge against the table."""
    keys = ("unfinished_checkpoints", "left_in_tmp")
    found = [f"{key}: {result[key]}" for key in keys if result[key]]
    if mode == "run":
        ok = {0} | ({128 + signal.SIGTERM} if result["stopped_by_time_limit"] else set())
        if result["exit"] not in ok:
            found.append(f"exit status {result['exit']}: {result['log_tail']}")
        return found
    if result["litter_beside_the_sweep"]:
        found.append(f"litter beside the sweep: {result['litter_beside_the_sweep']}")
    want = 1 if result["jobs_meant_to_fail"] else 0
    if result["exit"] != want:
        found.append(f"exit status {result['exit']}, not {want}")
    if result["failed_jobs"] != result["jobs_meant_to_fail"]:
        found.append(f"failed jobs {result['failed_jobs']}, not {result['jobs_meant_to_fail']}")
    if len(result["summary_lines"]) != (1 if want else 0):
        found.append(f"{len(result['summary_lines'])} summary lines")
    elif want and result["failed_jobs_named_in_summary"] != result["failed_jobs"]:
        found.append(f"the summary names {result['failed_jobs_named_in_summary']}")
    return found


def report(mode: str, result: dict[str, Any], warmup: int) -> None:
    """Print ``result``'s table (at most ~12 rows), growth and problems; add both to it."""
    rows = result["rows"]
    index = "chunk" if mode == "run" else "job"
    keys = ["rss_mb", "anon_mb", "fds", "children_rss_mb", "children_fds"]
    keys += ["run_dir_mb", "wandb_mb"] if mode == "run" else []
    result["growth_after_warmup"] = growth(rows, warmup, keys)
    result["problems"] = problems(mode, result)
    print(f"| {index} | wall_s | " + " | ".join(keys) + " |")
    print("|" + "---|" * (len(keys) + 2))
    step = max(len(rows) // 10, 1)
    shown = rows[::step] + ([rows[-1]] if rows and (len(rows) - 1) % step else [])
    for row in shown:
        print(f"| {row[index]} | {row['wall_s']} | " + " | ".join(str(row[k]) for k in keys) + " |")
    print(f"exit {result['exit']}; growth from {index} {warmup + 1} to the last: ", end="")
    print(result["growth_after_warmup"])
    if mode == "run":
        print(f"steps run: {result['steps_run']:,}; checkpoints kept: {result['checkpoints']}")
    else:
        print(f"summary: {result['summary_lines']}; files of a failed job: ", end="")
        print(result["failed_job_files"])
    print("problems: " + ("; ".join(result["problems"]) or "none"))


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["run", "multirun"])
    parser.add_argument("--out", required=True, help="JSON file of every sample")
    parser.add_argument("--work", help="where the run or sweep goes (default: a new temp dir)")
    parser.add_argument("--steps", type=int, default=10_000_000, help="run: environment steps")
    parser.add_argument("--chunks", type=int, default=100, help="run: learn chunks (checkpoints)")
    parser.add_argument("--time-limit-s", type=float, help="run: SIGTERM after this long")
    parser.add_argument("--jobs", type=int, default=100, help="multirun: jobs")
    parser.add_argument("--failing", type=int, default=10, help="multirun: jobs that fail")
    parser.add_argument("--warmup", type=int, default=5, help="rows before growth is measured")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    args = parser.parse_intermixed_args(argv)  # overrides after the options, or after --
    if not Path("/proc/self/status").exists():
        parser.error("the soak reads /proc: Linux only")
    if error := output_file_error(args.out):
        parser.error(error)
    for name in ("steps", "chunks", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} is invalid: must be >= 1")
    if not 0 <= args.failing <= args.jobs:
        parser.error(f"--failing={args.failing} is invalid: must be in [0, --jobs={args.jobs}]")
    if args.time_limit_s is not None and args.time_limit_s <= 0:
        parser.error(f"--time-limit-s={args.time_limit_s} is invalid: must be > 0")
    if args.work and (error := _work_error(Path(args.work))):
        parser.error(error)
    work = Path(args.work or tempfile.mkdtemp(prefix=f"soak_{args.mode}_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    result = soak_run(args, work) if args.mode == "run" else soak_multirun(args, work)
    result.update(
        mode=args.mode,
        command=" ".join([PROG, *(sys.argv[1:] if argv is None else argv)]),
        work=str(work),
        commit=commit(),
        machine=cpu_description(),
        date=datetime.datetime.now(datetime.UTC).date().isoformat(),
        load_average=os.getloadavg(),
    )
    report(args.mode, result, args.warmup)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["problems"] else 0


def _work_error(work: Path) -> str | None:
    """``--work`` must be a new or empty directory (what appears in it is the soak's)."""
    if work.exists() and (not work.is_dir() or any(work.iterdir())):
        return f"--work {work} is not an empty directory"
    return None
