"""Training the table's cells: ``args.jobs`` programs at a time, each its own process, each
cell locked while it trains, its record written when it ends.

A program is one cell (``python -m stoixlite.rec_ppo``) or several cells that share one compiled
program (:mod:`stoixlite.table.programs`; ``python -m stoixlite.table.fused_cells``, which
writes each cell's run directory as its own process would). The loop (:func:`train`) takes the
next pending program that fits in what is left of ``--time-limit``, claims its cells
(:func:`claim`: a lock and a last look at each record), starts it (:func:`launch`) and records
each cell of a program that ends (:func:`finish`). A fused cell's record is the record of the
cell trained alone (up to float rounding), its attempt naming the program's cells
(``program``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
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
    cell_overrides,
    config_key,
    fresh_command,
    has_checkpoint,
    mtime,
    pending,
    read_cell,
    rebuild_command,
    train_command,
    variant_views,
    write_cell,
)
from stoixlite.table.checkout import COMMITTED_RECORDS, git_state, portable, relative
from stoixlite.table.estimates import estimate, wall_estimates
from stoixlite.table.programs import names, program_units


@dataclass
class Launch:
    """A program being trained (one cell, or several fused): its process, each cell's
    bookkeeping and the lock this runner holds on it (:func:`claim`; released by
    :func:`finish`), the start time, and for fused cells the file of their exit codes."""

    cells: list[Cell]
    books: list[dict]
    start: float
    proc: subprocess.Popen
    locks: list[int]
    root: Path | None  # the checkout it runs from (None: an installed package)
    results: Path | None = None  # fused: {cell directory: exit code} (fused_cells)


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


def results_path(cells: list[Cell]) -> Path:
    """Where a fused program's cell exit codes go: beside its first cell's run directory."""
    return cells[0].path.with_name(cells[0].path.name + ".program.json")


def program_command(args: Namespace, cells: list[Cell], results: Path) -> list[str]:
    """The command that trains ``cells`` (one program key) as one program."""
    cmd = [sys.executable, "-m", "stoixlite.table.fused_cells", "--results", str(results)]
    for cell in cells:
        view = cell.view(args)
        overrides = cell_overrides(view, cell.env, cell.difficulty, cell.network)
        cmd += ["--cell", str(cell.path), *overrides]
    return cmd


def launch(args: Namespace, cells: list[Cell], locks: list[int], root: Path | None) -> Launch:
    """Start the training process of ``cells`` (one cell, or several of one program), each
    cell's bookkeeping (``cell.json``) written first; ``locks``: the cells' locks
    (:func:`claim`), held until :func:`finish`; ``root``: the checkout the runner runs from (the
    process's working directory; ``None``: this one's)."""
    for cell in cells:
        if (cell.fresh or not has_checkpoint(cell.path)) and cell.path.exists():
            shutil.rmtree(cell.path)  # nothing to resume from (or other settings): nothing to keep
    fused = len(cells) > 1
    results = results_path(cells) if fused else None
    if results is not None:
        results.unlink(missing_ok=True)
        cmd = program_command(args, cells, results)
        print(f"{names(cells)}: one program: {portable(cmd, root)}", flush=True)
    else:
        cell = cells[0]
        cmd = train_command(cell.view(args), cell.env, cell.difficulty, cell.network, cell.path)
        print(f"[{cell.k}] {cell.name}: {portable(cmd, root)}", flush=True)
    start = time.time()
    commit, tree = git_state(root)
    books = []
    for cell in cells:
        cell.path.mkdir(parents=True, exist_ok=True)
        attempt = {
            "started": datetime.fromtimestamp(start, UTC).isoformat("T", "seconds"),
            "commit": commit,
            "tree": tree,
            "machine": machine_description(),
            "command": portable(cmd, root),
            "jobs": args.jobs,
            "exit": None,
        }
        if fused:  # the cells of its program: <env>/<difficulty>/<model>[+<variant>]
            attempt["program"] = [f"{c.env}/{c.difficulty}/{c.path.name}" for c in cells]
        book = read_cell(cell.path) if has_checkpoint(cell.path) else {}
        if not book:
            view = cell.view(args)
            fresh = fresh_command(view, cell.env, cell.difficulty, cell.network, cell.path)
            book = {
                "env": cell.env,
                "difficulty": cell.difficulty,
                "model": cell.network,
                "variant": view.variant,
                "overrides": list(view.overrides),
                "seeds": list(view.seeds),
                "command": rebuild_command(view, cell.env, cell.difficulty, cell.network),
                "run_command": portable(fresh, root),
                "attempts": [],
            }
        book["attempts"].append(attempt)
        write_cell(cell.path, {**book, "status": "running"})
        books.append(book)
    env = dict(os.environ)
    if args.jobs > 1:  # several JAX processes on one GPU: no process takes most of its memory
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # Its own process group (start_new_session): a Ctrl-C (or a SIGINT sent to the runner alone)
    # reaches the runner, which passes exactly one SIGINT on to each training process (stop_all);
    # a second one would abort.
    # The process inherits the locks (pass_fds): the cells stay locked while they train, even if
    # this runner dies first.
    proc = subprocess.Popen(
        cmd,
        cwd=root,
        stdout=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        pass_fds=tuple(locks),
    )
    return Launch(cells, books, start, proc, locks, root, results)


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


def cell_codes(run: Launch, code: int) -> list[int]:
    """Each cell's exit code: the process's for a cell alone; for fused cells the code each
    cell's own process would have ended with (:mod:`stoixlite.table.fused_cells`), or the
    process's where it wrote none (killed, crashed)."""
    if run.results is None:
        return [code]
    try:
        codes = json.loads(run.results.read_text())
        run.results.unlink()
    except (OSError, ValueError):
        codes = {}
    return [int(codes.get(str(cell.path.resolve()), code)) for cell in run.cells]


def finish(run: Launch, code: int) -> list[int]:
    """Record how each cell of a program ended (done 0, interrupted 130, else failed): its
    ``cell.json`` and its record; then release the cells' locks. Returns the cells' codes."""
    try:
        codes = cell_codes(run, code)
        for cell, book, cell_code in zip(run.cells, run.books, codes, strict=True):
            _record_end(run, cell, book, cell_code)
        return codes
    finally:
        for lock in run.locks:
            os.close(lock)


def _record_end(run: Launch, cell: Cell, book: dict, code: int) -> None:
    wall = time.time() - run.start
    book["attempts"][-1].update(exit=code, wall_s=round(wall, 1))
    status = "done" if code == 0 else "interrupted" if code == 130 else "failed"
    book["status"] = status
    write_cell(cell.path, book)
    outcome = status if code in (0, 130) else f"FAILED (exit {code})"
    try:
        record = record_from_run(cell.path, book)
    except (RunReadError, OSError, KeyError) as err:
        print(f"[{cell.k}] {cell.name}: {outcome} in {wall:.0f} s; no record: {err}")
        return
    shown = relative(cell.record, run.root)
    if keep_record(cell.record, record):
        write_record(cell.record, record)
        where = f"record {shown}"
    else:
        where = f"record {shown} kept (it trained further)"
    print(f"[{cell.k}] {cell.name}: {outcome} in {wall:.0f} s; {where}", flush=True)


def stop_all(running: list[Launch], sig: int) -> list[int]:
    """Send ``sig`` to every training process (each in its own process group: nothing else sent
    it), wait for each clean stop and record it; a second Ctrl-C kills them. Returns the
    cells' exit codes."""
    for run in running:
        if run.proc.poll() is None:
            run.proc.send_signal(sig)
    codes = []
    for run in running:
        while True:
            try:
                codes += finish(run, run.proc.wait())
                break
            except KeyboardInterrupt:
                for other in running:
                    other.proc.kill()


def plan(args: Namespace, configs: dict, root: Path | None) -> tuple[list[Cell], int]:
    """The pending cells in the order they start: all of them, or with ``--time-limit`` those
    whose estimate fits (known estimates first, then unknown ones; prints the others); and how
    many cells are pending. Each variant's cells follow the cell they vary."""
    views = variant_views(args)
    cells = [
        Cell(
            k,
            env,
            difficulty,
            network,
            cell_dir(args.out, env, difficulty, network, view.variant),
            record_path(args.records, env, difficulty, network, view.variant),
            args=view if len(views) > 1 else None,
        )
        for k, ((env, difficulty, network), view) in enumerate(
            ((cell, view) for cell in cell_order(args) for view in views), 1
        )
    ]
    todo = [cell for cell in cells if pending(args, cell, configs)]
    if args.time_limit is None:
        return todo, len(todo)
    gpu = "GPU:" in machine_description()
    roots = [args.records] + ([root / COMMITTED_RECORDS] if root is not None else [])
    rates = wall_estimates(list(dict.fromkeys(roots)), gpu)
    for cell in todo:
        key = config_key(cell.env, cell.difficulty, cell.network, cell.view(args).variant)
        budget = int(configs[key].arch.total_timesteps)
        cell.estimate = estimate(cell, budget, rates, args.jobs)
    for cell in todo:
        if cell.estimate is not None and cell.estimate > args.time_limit:
            print(f"[{cell.k}] {cell.name}: about {cell.estimate:.0f} s, over "
                  f"--time-limit {args.time_limit}: not started", flush=True)  # fmt: skip
    known = [c for c in todo if c.estimate is not None and c.estimate <= args.time_limit]
    return known + [c for c in todo if c.estimate is None], len(todo)


def unit_estimate(unit: list[Cell]) -> float:
    """A program's estimated wall seconds (0 when unknown): the sum of its cells' (a fused
    program computes every cell's work; on a CPU one after another)."""
    return sum(cell.estimate or 0 for cell in unit)


def train(args: Namespace, configs: dict, root: Path | None) -> int:
    """Train the pending cells (:func:`plan`) in their programs (one cell, or several fused:
    :func:`~stoixlite.table.programs.program_units`; each cell alone with ``--no-fuse``),
    ``args.jobs`` programs at a time; ``root``: the checkout the runner runs from (``None``: an
    installed package). Exit 0, 1 (a cell failed) or 130."""
    todo, waiting = plan(args, configs, root)
    if not waiting:
        print(f"nothing to train: every cell asked for has a finished record in "
              f"{relative(args.records, root)} (--records DIR trains them into another folder)",
              flush=True)  # fmt: skip
        return 0
    fuse = not args.no_fuse and len(todo) > 1
    units = program_units(args, todo, configs) if fuse else [[cell] for cell in todo]
    if args.dry_run:
        for unit in units:
            if len(unit) > 1:
                cmd = program_command(args, unit, results_path(unit))
                print(f"{names(unit)}: one program: {portable(cmd, root)}", flush=True)
                continue
            view = unit[0].view(args)
            cmd = train_command(view, unit[0].env, unit[0].difficulty, unit[0].network,
                                unit[0].path)  # fmt: skip
            print(f"[{unit[0].k}] {unit[0].name}: {portable(cmd, root)}", flush=True)
        return 0
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    running: list[Launch] = []
    failed = 0
    try:
        while units or running:
            left = None if deadline is None else deadline - time.monotonic()
            while units and len(running) < args.jobs:
                fits = [u for u in units if left is None or unit_estimate(u) <= left]
                if not fits:
                    break
                units.remove(fits[0])
                claimed = [(cell, claim(args, cell, configs)) for cell in fits[0]]
                cells = [cell for cell, lock in claimed if lock is not None]
                if cells:
                    locks = [lock for _, lock in claimed if lock is not None]
                    running.append(launch(args, cells, locks, root))
            if left is not None and (left <= 0 or (not running and units)):
                print(f"--time-limit {args.time_limit} s reached: stopping the cells training "
                      "(they are recorded as interrupted)", flush=True)  # fmt: skip
                codes = stop_all(running, signal.SIGINT)
                failed += sum(code not in (0, 130) for code in codes)
                running, units = [], []
                break
            for run in [r for r in running if r.proc.poll() is not None]:
                running.remove(run)
                failed += sum(code != 0 for code in finish(run, run.proc.returncode))
            if running:
                time.sleep(0.2)
    except KeyboardInterrupt:
        stop_all(running, signal.SIGINT)
        print("interrupted: the same command resumes the cells and trains the rest", flush=True)
        return 130
    if failed:
        print(f"{failed} cell(s) failed; run the same command again to retry them", flush=True)
    return 1 if failed else 0
