"""Training the table's cells: ``args.jobs`` at a time, each its own ``python -m
stoixlite.rec_ppo`` process, each cell locked while it trains, its record written when it ends.

The loop (:func:`train`) takes the next pending cells that fit in what is left of
``--time-limit``, claims each (:func:`claim`: a lock and a last look at its record), starts it
(:func:`launch`) and records each that ends (:func:`finish`). One process trains one cell; a
runner that trains several cells in one program would replace :func:`launch` and
:func:`finish` for a group of claimed cells and keep the rest of the loop.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from argparse import Namespace
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from stoixlite.results.machine import machine_description
from stoixlite.results.popgym_records import (
    RecordError,
    changed_settings,
    read_record,
    record_from_run,
    record_path,
    record_settings,
    write_record,
)
from stoixlite.results.runs import RunReadError
from stoixlite.table.cells import (
    Cell,
    cell_dir,
    cell_order,
    fresh_command,
    has_checkpoint,
    mtime,
    pending,
    read_cell,
    rebuild_command,
    train_command,
    write_cell,
)
from stoixlite.table.checkout import COMMITTED_RECORDS, git_state, portable, relative
from stoixlite.table.estimates import estimate, wall_estimates


@dataclass
class Launch:
    """A cell being trained: its process, bookkeeping, start time and the lock this runner
    holds on the cell (:func:`claim`; released by :func:`finish`)."""

    cell: Cell
    book: dict
    start: float
    proc: subprocess.Popen
    lock: int
    root: Path | None  # the checkout it runs from (None: an installed package)


def lock_path(cell: Cell) -> Path:
    """The lock file of a cell's run directory: ``<out>/<env>/<difficulty>/<name>.lock`` (beside
    the run directory, which a fresh start removes; the file stays, empty)."""
    return cell.path.with_name(cell.path.name + ".lock")


def claim(args: Namespace, cell: Cell, configs: dict) -> int | None:
    """Take the cell for this runner just before it starts: an exclusive, non-blocking
    ``flock`` on :func:`lock_path` (released when this runner closes it or dies), then
    :func:`~stoixlite.table.cells.pending` again if the record changed since this runner read
    it. Returns the lock's file descriptor, or ``None`` (prints why) when another runner holds
    the cell or it is no longer pending."""
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
    if mtime(cell.record) != cell.seen and not pending(args, cell, configs):
        os.close(fd)  # another runner finished it since this one started
        return None
    return fd


def launch(args: Namespace, cell: Cell, lock: int, root: Path | None) -> Launch:
    """Start a cell's training process, its bookkeeping (``cell.json``) written first; ``lock``
    is the cell's lock (:func:`claim`), held until :func:`finish`; ``root``: the checkout the
    runner runs from (the process's working directory; ``None``: this one's)."""
    if (cell.fresh or not has_checkpoint(cell.path)) and cell.path.exists():
        shutil.rmtree(cell.path)  # nothing to resume from (or other settings): nothing to keep
    cmd = train_command(args, cell.env, cell.difficulty, cell.network, cell.path)
    print(f"[{cell.k}] {cell.name}: {portable(cmd, root)}", flush=True)
    cell.path.mkdir(parents=True, exist_ok=True)
    start = time.time()
    commit, tree = git_state(root)
    attempt = {
        "started": datetime.fromtimestamp(start, UTC).isoformat("T", "seconds"),
        "commit": commit,
        "tree": tree,
        "machine": machine_description(),
        "command": portable(cmd, root),
        "jobs": args.jobs,
        "exit": None,
    }
    book = read_cell(cell.path) if has_checkpoint(cell.path) else {}
    if not book:
        fresh = fresh_command(args, cell.env, cell.difficulty, cell.network, cell.path)
        book = {
            "env": cell.env,
            "difficulty": cell.difficulty,
            "model": cell.network,
            "variant": args.variant,
            "overrides": list(args.overrides),
            "seeds": list(args.seeds),
            "command": rebuild_command(args, cell.env, cell.difficulty, cell.network),
            "run_command": portable(fresh, root),
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
        cwd=root,
        stdout=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        pass_fds=(lock,),
    )
    return Launch(cell, book, start, proc, lock, root)


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
    shown = relative(run.cell.record, run.root)
    if keep_record(run.cell.record, record):
        write_record(run.cell.record, record)
        where = f"record {shown}"
    else:
        where = f"record {shown} kept (it trained further)"
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


def plan(args: Namespace, configs: dict, root: Path | None) -> tuple[list[Cell], int]:
    """The pending cells in the order they start: all of them, or with ``--time-limit`` those
    whose estimate fits (known estimates first, then unknown ones; prints the others); and how
    many cells are pending."""
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
    if args.time_limit is None:
        return todo, len(todo)
    gpu = "GPU:" in machine_description()
    roots = [args.records] + ([root / COMMITTED_RECORDS] if root is not None else [])
    rates = wall_estimates(list(dict.fromkeys(roots)), gpu)
    for cell in todo:
        budget = int(configs[(cell.env, cell.difficulty, cell.network)].arch.total_timesteps)
        cell.estimate = estimate(cell, budget, rates, args.jobs)
    for cell in todo:
        if cell.estimate is not None and cell.estimate > args.time_limit:
            print(f"[{cell.k}] {cell.name}: about {cell.estimate:.0f} s, over "
                  f"--time-limit {args.time_limit}: not started", flush=True)  # fmt: skip
    known = [c for c in todo if c.estimate is not None and c.estimate <= args.time_limit]
    return known + [c for c in todo if c.estimate is None], len(todo)


def train(args: Namespace, configs: dict, root: Path | None) -> int:
    """Train the pending cells (:func:`plan`), ``args.jobs`` at a time; ``root``: the checkout
    the runner runs from (``None``: an installed package). Exit 0, 1 (a cell failed) or 130."""
    todo, waiting = plan(args, configs, root)
    if not waiting:
        print(f"nothing to train: every cell asked for has a finished record in "
              f"{relative(args.records, root)} (--records DIR trains them into another folder)",
              flush=True)  # fmt: skip
        return 0
    if args.dry_run:
        for cell in todo:
            cmd = train_command(args, cell.env, cell.difficulty, cell.network, cell.path)
            print(f"[{cell.k}] {cell.name}: {portable(cmd, root)}", flush=True)
        return 0
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
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
                    running.append(launch(args, fits[0], lock, root))
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
