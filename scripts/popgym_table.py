#!/usr/bin/env python
"""Train the POPGym table's cells, keep their records, and write the table page.

    python scripts/popgym_table.py train         # every cell without a finished record
    python scripts/popgym_table.py train --envs repeat_first --difficulties hard \\
        --networks gru --variant popgym -- +protocol=popgym
    python scripts/popgym_table.py train --jobs 6 --time-limit 540 --records /tmp/records \\
        --difficulties medium hard --networks gru memoroid mlp paper_best
    python scripts/popgym_table.py report        # docs/popgym_table.md + its figure

``train`` runs one ``python -m stoixlite.rec_ppo`` per cell (env x difficulty x network, all
seeds vmapped in one compiled program: ``arch.seed=<first> arch.num_seeds=<n>``; seeds 10-12 by
default, which no shipped config was tuned on) with the shipped configs and their whole budget
(``arch.target_return=null``), its run directory in
``<out>/<env>/<difficulty>/<network>[+<variant>]``. When a cell finishes or is interrupted, its
record (:mod:`stoixlite.results.popgym_records`) is written to ``--records`` (default
``results/popgym_table/``, committed with the repository).

A cell being trained by another runner (another ``train`` with the same ``--out``, here or in
another terminal) is skipped: each runner holds an exclusive lock on ``<run dir>.lock`` while it
trains the cell, and checks again whether the cell is still pending when it takes the lock (a
runner decides what is pending when it starts, and another may have finished the cell since).

``--networks paper_best`` stands for stoixlite's port of the paper's best model of each published
cell (``lmu`` on repeat_previous medium, ``indrnn`` on autoencode medium, ...; none on unpublished
cells). Published cells train first, then the rest, each group by difficulty, env and network.
A cell whose record is finished (same seeds) is skipped, unless it trained with other settings
than the cell's config today (``env``, ``network``, ``system``, the budget or ``arch.num_envs``
differ: a default changed since), which trains afresh. An interrupted cell with a checkpoint
in its run directory is resumed (``resume=<dir>``); one without (its record came from another
machine, or it stopped before its first checkpoint) trains afresh, and its record is replaced
only by one that trained at least as far. ``--jobs N`` trains N cells side by side, each its own
process (on one GPU, 4-10 small cells together use it far better than one; Ctrl-C stops them all
cleanly). ``--time-limit S`` starts only cells whose estimated wall time (from the records'
wall times on the same kind of machine) fits in what is left of S seconds, and at S stops the
cells still training cleanly, recording them as interrupted. Estimates scale with ``--jobs``:
cells side by side share the machine's throughput. Overrides after ``--`` go to every
cell of this call and must come with ``--variant NAME``. Training refuses a tree with
uncommitted changes to tracked files (a record names the commit it ran at) unless
``--allow-changes`` is given, which records the diff's hash. A failed cell is recorded, the
others go on, and the exit status is 1.

``report`` reads the records below ``--records`` and writes ``--doc`` (default
``docs/popgym_table.md``), ``--runs-doc`` (every trained model and its command; default beside
``--doc``, ``docs/popgym_table_runs.md``) and ``--figure``
(:mod:`stoixlite.results.popgym_report`); it needs no run directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from stoixlite.cli.args import OneLineArgumentParser, checked_run_config
from stoixlite.results.machine import machine_description
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS, PAPER, paper_best_networks
from stoixlite.results.popgym_records import (
    RecordError,
    changed_settings,
    read_record,
    read_records,
    record_from_run,
    record_name,
    record_path,
    record_settings,
    write_record,
)
from stoixlite.results.runs import RunReadError

ROOT = Path(__file__).resolve().parent.parent
CELL_FILE = "cell.json"
DEFAULT_NETWORKS = ["gru", "memoroid", "mlp"]
PAPER_BEST = "paper_best"  # in --networks: the paper's best model of each published cell
DEFAULT_SEEDS = [10, 11, 12]
RECORDS = ROOT / "results" / "popgym_table"


def cell_dir(out: Path, env: str, difficulty: str, network: str, variant: str | None) -> Path:
    """Where a cell's run lives: ``<out>/<env>/<difficulty>/<network>[+<variant>]``."""
    return out / env / difficulty / record_name(network, variant)


def read_cell(path: Path) -> dict:
    """The run directory's ``cell.json`` (``{}`` when it has none or it is unreadable)."""
    try:
        return json.loads((path / CELL_FILE).read_text())
    except (OSError, ValueError):
        return {}


def write_cell(path: Path, record: dict) -> None:
    """Write ``cell.json`` atomically (a temporary file renamed over it)."""
    tmp = path / f".{CELL_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path / CELL_FILE)


def has_checkpoint(path: Path) -> bool:
    ckpt = path / "checkpoints"
    return ckpt.is_dir() and any(p.name.isdigit() for p in ckpt.iterdir())


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def git_state() -> tuple[str, str]:
    """``(commit, tree)``: the short commit of this checkout and ``"clean"``, or ``"changes
    <sha256 of git diff HEAD, 12 hex>"`` when tracked files have uncommitted changes."""
    commit = _git("rev-parse", "--short", "HEAD").strip() or "unknown"
    if not _git("status", "--porcelain", "--untracked-files=no").strip():
        return commit, "clean"
    digest = hashlib.sha256(_git("diff", "HEAD").encode()).hexdigest()[:12]
    return commit, f"changes {digest}"


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def shipped_overrides(env: str, difficulty: str, network: str) -> list[str]:
    """The overrides that select a cell's shipped config: its env, difficulty and model."""
    return [f"env=popgym/{env}", f"env.difficulty={difficulty}", f"network={network}"]


def cell_overrides(args, env: str, difficulty: str, network: str) -> list[str]:
    """The cell's overrides of the shipped config (all its seeds in one program)."""
    return [
        *shipped_overrides(env, difficulty, network),
        f"arch.seed={min(args.seeds)}",
        f"arch.num_seeds={len(args.seeds)}",
        f"arch.target_return={args.stop_at}",
        *args.overrides,
    ]


def fresh_command(args, env: str, difficulty: str, network: str, path: Path) -> list[str]:
    """The command that trains the cell from scratch."""
    overrides = cell_overrides(args, env, difficulty, network)
    return [sys.executable, "-m", "stoixlite.rec_ppo", *overrides, f"hydra.run.dir={path}"]


def train_command(args, env: str, difficulty: str, network: str, path: Path) -> list[str]:
    """The cell's command: ``resume=<dir>`` when it has a checkpoint, else a fresh run."""
    if has_checkpoint(path):
        return [
            sys.executable,
            "-m",
            "stoixlite.rec_ppo",
            f"resume={path}",
            f"arch.target_return={args.stop_at}",
        ]
    return fresh_command(args, env, difficulty, network, path)


def portable(cmd: list[str]) -> str:
    """A command as a user types it: ``python`` for the interpreter, paths below this
    checkout relative to it."""
    root = f"{ROOT}/"
    return shlex.join(["python", *cmd[1:]]).replace(root, "")


def rebuild_command(args, env: str, difficulty: str, network: str) -> str:
    """The runner command that trains this one cell again."""
    cmd = [
        "python",
        "scripts/popgym_table.py",
        "train",
        "--envs",
        env,
        "--difficulties",
        difficulty,
        "--networks",
        network,
        "--seeds",
        *map(str, args.seeds),
    ]
    if args.stop_at != "null":
        cmd += ["--stop-at", args.stop_at]
    if args.variant:
        cmd += ["--variant", args.variant, "--", *args.overrides]
    return shlex.join(cmd)


@dataclass
class Cell:
    """A cell to train: names, run directory, record path and the cell's estimated wall time."""

    k: int
    env: str
    difficulty: str
    network: str
    path: Path
    record: Path
    estimate: float | None = None
    fresh: bool = False  # train from scratch (its record or checkpoint has other settings)
    seen: int | None = None  # the record's mtime when pending() last read it (None: absent)

    @property
    def name(self) -> str:
        return f"{self.env} {self.difficulty} {self.path.name}"


@dataclass
class Launch:
    """A cell being trained: its process, bookkeeping, start time and the lock this runner
    holds on the cell (:func:`claim`; released by :func:`finish`)."""

    cell: Cell
    book: dict
    start: float
    proc: subprocess.Popen
    lock: int


def _mtime(path: Path) -> int | None:
    """``path``'s modification time in ns (``None`` when it does not exist)."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def pending(args, cell: Cell, configs: dict) -> bool:
    """Whether ``cell`` needs training (prints why not). A record trained with other settings
    than the cell's config today (:func:`~stoixlite.results.popgym_records.changed_settings`)
    trains afresh: its record is replaced when the new run finishes."""
    cell.seen = _mtime(cell.record)
    if cell.seen is None:
        return True
    try:
        record = read_record(cell.record)
    except RecordError as err:
        print(f"{cell.name}: {err}; it will be replaced", flush=True)
        return True
    cfg = configs.get((cell.env, cell.difficulty, cell.network))
    if cfg is None:
        cfg, _ = checked_run_config(cell_overrides(args, cell.env, cell.difficulty, cell.network))
    changed = changed_settings(record, cfg) if cfg is not None else []
    if changed:
        shown = ", ".join(changed[:4]) + (", ..." if len(changed) > 4 else "")
        print(f"{cell.name}: its record trained with other settings ({shown}): trained afresh",
              flush=True)  # fmt: skip
        cell.fresh = True
        return True
    if record["status"] == "done":
        if record.get("seeds") == list(args.seeds):
            print(f"{cell.name}: done, skipped", flush=True)
        else:
            print(
                f"{cell.name}: has a finished record with seeds {record.get('seeds')}, not "
                f"{args.seeds}: skipped (delete {cell.record} to train it again)",
                flush=True,
            )
        return False
    return True


def lock_path(cell: Cell) -> Path:
    """The lock file of a cell's run directory: ``<out>/<env>/<difficulty>/<name>.lock`` (beside
    the run directory, which a fresh start removes; the file stays, empty)."""
    return cell.path.with_name(cell.path.name + ".lock")


def claim(args, cell: Cell, configs: dict) -> int | None:
    """Take the cell for this runner just before it starts: an exclusive, non-blocking
    ``flock`` on :func:`lock_path` (released when this runner closes it or dies), then
    :func:`pending` again if the record changed since this runner read it. Returns the lock's
    file descriptor, or ``None`` (prints why) when another runner holds the cell or it is no
    longer pending."""
    path = lock_path(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        print(f"[{cell.k}] {cell.name}: being trained by another runner ({path} is locked): "
              "skipped", flush=True)  # fmt: skip
        return None
    if _mtime(cell.record) != cell.seen and not pending(args, cell, configs):
        os.close(fd)  # another runner finished it since this one started
        return None
    return fd


def launch(args, cell: Cell, lock: int) -> Launch:
    """Start a cell's training process, its bookkeeping (``cell.json``) written first; ``lock``
    is the cell's lock (:func:`claim`), held until :func:`finish`."""
    if (cell.fresh or not has_checkpoint(cell.path)) and cell.path.exists():
        shutil.rmtree(cell.path)  # nothing to resume from (or other settings): nothing to keep
    cmd = train_command(args, cell.env, cell.difficulty, cell.network, cell.path)
    print(f"[{cell.k}] {cell.name}: {portable(cmd)}", flush=True)
    cell.path.mkdir(parents=True, exist_ok=True)
    start = time.time()
    commit, tree = git_state()
    attempt = {
        "started": datetime.fromtimestamp(start, UTC).isoformat("T", "seconds"),
        "commit": commit,
        "tree": tree,
        "machine": machine_description(),
        "command": portable(cmd),
        "jobs": args.jobs,
        "exit": None,
    }
    book = read_cell(cell.path) if has_checkpoint(cell.path) else {}
    if not book:
        book = {
            "env": cell.env,
            "difficulty": cell.difficulty,
            "model": cell.network,
            "variant": args.variant,
            "overrides": list(args.overrides),
            "seeds": list(args.seeds),
            "command": rebuild_command(args, cell.env, cell.difficulty, cell.network),
            "run_command": portable(
                fresh_command(args, cell.env, cell.difficulty, cell.network, cell.path)
            ),
            "attempts": [],
        }
    book["attempts"].append(attempt)
    write_cell(cell.path, {**book, "status": "running"})
    env = dict(os.environ)
    if args.jobs > 1:  # several JAX processes on one GPU: no process takes most of its memory
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # Its own process group (start_new_session): a Ctrl-C (or a SIGINT sent to the runner alone)
    # reaches the runner, which passes exactly one SIGINT on to each training process (stop_all);
    # a second one would abort.
    # The process inherits the lock (pass_fds): the cell stays locked while it trains, even if
    # this runner dies first.
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        pass_fds=(lock,),
    )
    return Launch(cell, book, start, proc, lock)


def keep_record(path: Path, record: dict) -> bool:
    """Whether ``record`` may replace the one at ``path``: always, unless it is an unfinished
    one that trained less far than an unfinished one already there (or any finished one) with
    the same settings."""
    if record["status"] == "done" or not path.exists():
        return True
    try:
        old = read_record(path)
    except RecordError:
        return True
    new = record_settings(record)
    if new is not None and changed_settings(old, new):
        return True  # the old one trained with other settings
    if old["status"] == "done":
        return False
    return old["status"] == "failed" or record["steps"] >= old.get("steps", 0)


def finish(run: Launch, code: int) -> None:
    """Record how a cell's process ended (done 0, interrupted 130, else failed): its
    ``cell.json`` and its record; then release the cell's lock."""
    try:
        _record_end(run, code)
    finally:
        os.close(run.lock)


def _record_end(run: Launch, code: int) -> None:
    wall = time.time() - run.start
    run.book["attempts"][-1].update(exit=code, wall_s=round(wall, 1))
    status = "done" if code == 0 else "interrupted" if code == 130 else "failed"
    run.book["status"] = status
    write_cell(run.cell.path, run.book)
    outcome = status if code in (0, 130) else f"FAILED (exit {code})"
    try:
        record = record_from_run(run.cell.path, run.book)
    except (RunReadError, OSError, KeyError) as err:
        print(f"[{run.cell.k}] {run.cell.name}: {outcome} in {wall:.0f} s; no record: {err}")
        return
    if keep_record(run.cell.record, record):
        write_record(run.cell.record, record)
        where = f"record {_relative(run.cell.record)}"
    else:
        where = f"record {_relative(run.cell.record)} kept (it trained further)"
    print(f"[{run.cell.k}] {run.cell.name}: {outcome} in {wall:.0f} s; {where}", flush=True)


def stop_all(running: list[Launch], sig: int) -> None:
    """Send ``sig`` to every training process (each in its own process group: nothing else sent
    it), wait for each clean stop and record it; a second Ctrl-C kills them."""
    for run in running:
        if run.proc.poll() is None:
            run.proc.send_signal(sig)
    for run in running:
        while True:
            try:
                finish(run, run.proc.wait())
                break
            except KeyboardInterrupt:
                for other in running:
                    other.proc.kill()


def wall_estimates(roots: list[Path], gpu: bool) -> dict:
    """Seconds per env step and per cell trained at once (a record's wall time divided by its
    steps and by the cells that shared its machine) on the same kind of machine (GPU or not):
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
            rate = float(wall) / float(steps) / max(1, int(last.get("jobs") or 1))
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


def cell_networks(networks: list[str], env: str, difficulty: str) -> list[str]:
    """``--networks`` for one cell: ``paper_best`` replaced by the ports of the paper's best
    model(s) there (:func:`~stoixlite.results.popgym_paper.paper_best_networks`; nothing on an
    unpublished cell), each network once."""
    expanded = []
    for network in networks:
        expanded += paper_best_networks(env, difficulty) if network == PAPER_BEST else [network]
    return list(dict.fromkeys(expanded))


def cell_order(args) -> list[tuple[str, str, str]]:
    """``(env, difficulty, network)`` of every cell asked for, the published cells first (the
    ones the page compares with the paper), then by difficulty, env and network as given."""
    cells = [
        (env, difficulty, network)
        for difficulty in args.difficulties
        for env in args.envs
        for network in cell_networks(args.networks, env, difficulty)
    ]
    return sorted(cells, key=lambda cell: cell[1] not in PAPER.get(cell[0], {}))  # stable


def train(args, configs: dict) -> int:
    """Train the pending cells, ``args.jobs`` at a time. Exit 0, 1 (a cell failed) or 130."""
    cells = [
        Cell(
            k,
            env,
            difficulty,
            network,
            cell_dir(args.out, env, difficulty, network, args.variant),
            record_path(args.records, env, difficulty, network, args.variant),
        )
        for k, (env, difficulty, network) in enumerate(cell_order(args), 1)
    ]
    todo = [cell for cell in cells if pending(args, cell, configs)]
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    if deadline is not None:
        gpu = "GPU:" in machine_description()
        rates = wall_estimates(list(dict.fromkeys([args.records, RECORDS])), gpu)
        for cell in todo:
            budget = int(configs[(cell.env, cell.difficulty, cell.network)].arch.total_timesteps)
            cell.estimate = estimate(cell, budget, rates, args.jobs)
        known = [c for c in todo if c.estimate is not None and c.estimate <= args.time_limit]
        for cell in todo:
            if cell.estimate is not None and cell.estimate > args.time_limit:
                print(f"[{cell.k}] {cell.name}: about {cell.estimate:.0f} s, over "
                      f"--time-limit {args.time_limit}: not started", flush=True)  # fmt: skip
        todo = known + [c for c in todo if c.estimate is None]  # known first, then unknown
    if args.dry_run:
        for cell in todo:
            cmd = train_command(args, cell.env, cell.difficulty, cell.network, cell.path)
            print(f"[{cell.k}] {cell.name}: {portable(cmd)}", flush=True)
        return 0
    running: list[Launch] = []
    failed = 0
    try:
        while todo or running:
            left = None if deadline is None else deadline - time.monotonic()
            while todo and len(running) < args.jobs:
                fits = [c for c in todo if left is None or (c.estimate or 0) <= left]
                if not fits:
                    break
                todo.remove(fits[0])
                lock = claim(args, fits[0], configs)
                if lock is not None:
                    running.append(launch(args, fits[0], lock))
            if left is not None and (left <= 0 or (not running and todo)):
                print(f"--time-limit {args.time_limit} s reached: stopping the cells training "
                      "(they are recorded as interrupted)", flush=True)  # fmt: skip
                stop_all(running, signal.SIGINT)
                failed += sum(r.proc.returncode not in (0, 130) for r in running)
                running, todo = [], []
                break
            for run in [r for r in running if r.proc.poll() is not None]:
                running.remove(run)
                finish(run, run.proc.returncode)
                failed += run.proc.returncode != 0
            if running:
                time.sleep(0.2)
    except KeyboardInterrupt:
        stop_all(running, signal.SIGINT)
        print("interrupted: the same command resumes the cells and trains the rest", flush=True)
        return 130
    if failed:
        print(f"{failed} cell(s) failed; run the same command again to retry them", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops, even if ignored
    argv = sys.argv[1:] if argv is None else list(argv)
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = OneLineArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train the cells (skips finished ones, resumes the rest)")
    tr.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS, metavar="ENV")
    tr.add_argument("--difficulties", nargs="+", default=list(DIFFICULTIES), choices=DIFFICULTIES)
    tr.add_argument(
        "--networks",
        nargs="+",
        default=DEFAULT_NETWORKS,
        help=f"networks (configs/network/); {PAPER_BEST}: the port of the paper's best model of "
        "each published cell",
    )
    tr.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS)
    tr.add_argument("--variant", default=None, help="name of the overrides after --")
    tr.add_argument(
        "--stop-at",
        default="null",
        help="arch.target_return of every cell (default null: the whole budget, since MMER comes "
        "from the sampled training episodes, which lag the greedy eval; e.g. 0.99 to save time)",
    )
    tr.add_argument("--out", type=Path, default=ROOT / "outputs" / "popgym_table",
                    help="where the cells' run directories go")  # fmt: skip
    tr.add_argument("--records", type=Path, default=RECORDS,
                    help="where the cells' records go (default results/popgym_table)")  # fmt: skip
    tr.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="cells trained side by side, each its own process (default 1; on one GPU 4-10 "
        "small cells together use it better than one)",
    )
    tr.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="start only cells estimated to finish within S seconds; stop the rest "
                    "cleanly at S")  # fmt: skip
    tr.add_argument(
        "--allow-changes",
        action="store_true",
        help="train from a tree with uncommitted changes (records the diff's hash)",
    )
    tr.add_argument("--dry-run", action="store_true", help="print the commands only")
    rp = sub.add_parser("report", help="write the table and the figure from the records")
    rp.add_argument("--records", type=Path, default=RECORDS)
    rp.add_argument("--doc", type=Path, default=ROOT / "docs" / "popgym_table.md")
    rp.add_argument(
        "--runs-doc",
        type=Path,
        default=None,
        help="the page of every trained model (default: beside --doc, <doc>_runs.md)",
    )
    rp.add_argument("--figure", type=Path, default=ROOT / "docs" / "img" / "popgym_table.png")
    rp.add_argument(
        "--readme",
        type=Path,
        default=ROOT / "README.md",
        help="the file whose POPGym summary block is rewritten (default README.md)",
    )
    rp.add_argument("--no-readme", dest="readme", action="store_const", const=None,
                    help="leave the README alone")  # fmt: skip
    rp.add_argument(
        "--random-episodes",
        type=int,
        default=512,
        help="episodes of the random policy per cell missing from random.json, computed once "
        "(0: leave the missing ones out)",
    )
    rp.add_argument(
        "--no-settings-check",
        dest="check_settings",
        action="store_false",
        help="leave the records' settings_changed marks as they are (by default each record's "
        "config is compared with its cell's shipped config today)",
    )
    args = parser.parse_args(argv)
    args.overrides = overrides
    if args.command == "train":
        return train_checked(parser, args)
    if args.random_episodes < 0:
        parser.error(f"--random-episodes {args.random_episodes}: must be 0 or more")
    from stoixlite.results.popgym_report import write_report

    if args.check_settings and args.records.is_dir():
        mark_changed_settings(args.records)
    return write_report(args)


def mark_changed_settings(root: Path) -> None:
    """Set each record's ``settings_changed`` to the keys whose value in its config differs from
    the cell's shipped config today (:func:`~stoixlite.results.popgym_records.changed_settings`;
    removed when none does), so that the page marks the results of earlier settings. Records
    that cannot be read are left to the report, which names them."""
    for path in sorted(root.glob("*/*/*.json")):
        try:
            record = read_record(path)
        except RecordError:
            continue
        overrides = [
            *shipped_overrides(record["env"], record["difficulty"], record["model"]),
            *record.get("overrides", []),
        ]
        cfg, _ = checked_run_config(overrides)
        changed = changed_settings(record, cfg) if cfg is not None else ["config"]
        if changed != record.get("settings_changed", []):
            if changed:
                record["settings_changed"] = changed
            else:
                record.pop("settings_changed")
            write_record(path, record)


def train_checked(parser, args) -> int:
    """Check the arguments and every cell's config (one line, exit 2), then :func:`train`."""
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    if args.time_limit is not None and not 0 < args.time_limit < float("inf"):
        parser.error(f"--time-limit {args.time_limit}: must be a positive number of seconds")
    if args.overrides and not args.variant:
        parser.error("overrides after -- need --variant NAME (the cells' directory suffix)")
    if args.variant and not args.variant.replace("_", "").replace("-", "").isalnum():
        parser.error(f"--variant {args.variant!r}: letters, digits, '-' and '_' only")
    if sorted(args.seeds) != list(range(min(args.seeds), min(args.seeds) + len(args.seeds))):
        parser.error(f"--seeds {args.seeds}: consecutive seeds only (they train in one program)")
    args.seeds = sorted(args.seeds)
    for flag in ("out", "records"):
        path = getattr(args, flag)
        if path.exists() and not path.is_dir():
            parser.error(f"--{flag} {path}: not a directory")
    configs = {}  # (env, difficulty, network): the cell's RunConfig (all, or each network once)
    checked = set()
    for env, difficulty, network in cell_order(args):
        if args.time_limit is None and network in checked:
            continue  # only estimates need every cell's config (budget): each network once
        cfg, error = checked_run_config(cell_overrides(args, env, difficulty, network))
        if error is not None:
            parser.error(f"network={network}: {error}")
        configs[(env, difficulty, network)] = cfg
        checked.add(network)
    if not args.dry_run and not args.allow_changes and git_state()[1] != "clean":
        parser.error(
            "the checkout has uncommitted changes to tracked files: commit them (a record "
            "names the commit it ran at) or pass --allow-changes (records the diff's hash)"
        )
    return train(args, configs)


if __name__ == "__main__":
    sys.exit(main())
