#!/usr/bin/env python
"""Train the POPGym table's cells and write the table (ours against the POPGym paper).

    python scripts/popgym_table.py train         # all 48 cells: 16 envs x 3 difficulties
    python scripts/popgym_table.py train --envs repeat_first --difficulties hard \\
        --networks gru --seeds 0 1 2 --variant popgym -- +protocol=popgym
    python scripts/popgym_table.py report        # docs/popgym_table.md + its figure

``train`` runs one ``python -m stoixlite.rec_ppo`` per cell (env x difficulty x network, all
seeds vmapped in one compiled program: ``arch.seed=<first> arch.num_seeds=<n>``) with the
shipped configs and their whole budget (``arch.target_return=null``: MMER is measured on the
sampled training episodes, which lag a greedy evaluation that already solves the task;
``--stop-at 0.99`` stops once the evaluation does, and the report marks such cells), into
``<out>/<env>/<difficulty>/<network>[+<variant>]``. A cell with a ``cell.json`` marked done is
skipped; an interrupted one with a checkpoint is resumed (``resume=<dir>``); one that stopped
before its first checkpoint starts afresh; an interrupted one whose records came without its
checkpoints (copied from another machine) is kept and not trained. ``--jobs N`` trains N cells
side by side, each its own process (on one GPU, 4-10 small cells together use it far better
than one; Ctrl-C stops them all cleanly). Overrides after ``--`` go to every cell of this call
and must come with ``--variant NAME`` (so that cells trained differently never share a
directory). A failed cell is recorded, the others go on, and the exit status is 1.

``report`` reads every cell below ``--out`` and writes ``--doc`` (default
``docs/popgym_table.md``) and ``--figure``: per cell the random policy's return, then for each
trained model its MMER (the paper's max mean episodic return, from the training episodes of
each update), final and best greedy/sampled eval, with the mean, the sample sd and the 95 %
t-interval over seeds, the steps and the wall time, next to the paper's GRU and best model
where published (:mod:`stoixlite.results.popgym_paper`).
"""

from __future__ import annotations

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

from stoixlite.cli_args import OneLineArgumentParser
from stoixlite.results.machine import machine_description
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS

ROOT = Path(__file__).resolve().parent.parent
CELL_FILE = "cell.json"
DEFAULT_NETWORKS = ["gru", "memoroid", "mlp"]


def cell_dir(out: Path, env: str, difficulty: str, network: str, variant: str | None) -> Path:
    """Where a cell's run lives: ``<out>/<env>/<difficulty>/<network>[+<variant>]``."""
    return out / env / difficulty / (f"{network}+{variant}" if variant else network)


def read_cell(path: Path) -> dict:
    """The cell's ``cell.json`` (``{}`` when it has none or it is unreadable)."""
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


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown"
    commit = out.stdout.strip() or "unknown"
    return commit + ("+changes" if dirty.stdout.strip() else "")


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


def fresh_command(args, env: str, difficulty: str, network: str, path: Path) -> list[str]:
    """The command that trains the cell from scratch (recorded in ``cell.json``)."""
    return [
        sys.executable,
        "-m",
        "stoixlite.rec_ppo",
        f"env=popgym/{env}",
        f"env.difficulty={difficulty}",
        f"network={network}",
        f"arch.seed={min(args.seeds)}",
        f"arch.num_seeds={len(args.seeds)}",
        f"arch.target_return={args.stop_at}",
        f"hydra.run.dir={path}",
        *args.overrides,
    ]


@dataclass
class Launch:
    """A cell being trained: its process, directory, record and start time."""

    name: str
    path: Path
    record: dict
    start: float
    proc: subprocess.Popen


def prepare(args, k: int, total: int, cell: tuple[str, str, str]) -> tuple | None:
    """``(name, path, command)`` of a cell to train, or ``None`` when it is skipped (finished,
    or holding records without a checkpoint to resume from, which are never deleted)."""
    env, difficulty, network = cell
    path = cell_dir(args.out, env, difficulty, network, args.variant)
    record = read_cell(path)
    name = f"[{k}/{total}] {env} {difficulty} {path.name}"
    if record.get("status") == "done":
        print(f"{name}: done, skipped", flush=True)
        return None
    if path.exists() and not has_checkpoint(path):
        # A clean interrupt always saves a checkpoint: an interrupted cell with records and no
        # checkpoint was brought here without them (from another machine) and is kept as is.
        if record.get("status") == "interrupted" and (path / "metrics.jsonl").exists():
            print(
                f"{name}: kept, not trained: it has records but no checkpoint to resume from "
                f"(delete {path} to train it afresh)",
                flush=True,
            )
            return None
        if not args.dry_run:  # a dry run changes nothing
            shutil.rmtree(path)  # stopped before its first checkpoint: nothing to keep
    cmd = train_command(args, env, difficulty, network, path)
    print(f"{name}: {shlex.join(cmd)}", flush=True)
    return name, path, cmd


def launch(args, name: str, path: Path, cmd: list[str]) -> Launch:
    """Start a cell's training process, its record written first (kept if the runner dies)."""
    path.mkdir(parents=True, exist_ok=True)
    start = time.time()
    attempt = {
        "started": datetime.fromtimestamp(start, UTC).isoformat("T", "seconds"),
        "commit": git_commit(),
        "machine": machine_description(),
        "command": shlex.join(cmd),
        "jobs": args.jobs,
    }
    record = read_cell(path)  # what earlier attempts recorded
    if not has_checkpoint(path):  # a fresh run: its command is the cell's
        record = {"command": attempt["command"], "seeds": list(args.seeds)}
    record.setdefault("attempts", []).append({**attempt, "exit": None})
    record["overrides"] = list(args.overrides)
    write_cell(path, {**record, "status": "running"})
    env = dict(os.environ)
    if args.jobs > 1:  # several JAX processes on one GPU: no process takes most of its memory
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
    return Launch(name, path, record, start, proc)


def finish(cell: Launch, code: int) -> None:
    """Record how a cell's process ended: done (0), interrupted (130) or failed."""
    wall = time.time() - cell.start
    cell.record["attempts"][-1].update(exit=code, wall_s=round(wall, 1))
    status = "done" if code == 0 else "interrupted" if code == 130 else "failed"
    cell.record["status"] = status
    write_cell(cell.path, cell.record)
    outcome = status if code in (0, 130) else f"FAILED (exit {code})"
    print(f"{cell.name}: {outcome} in {wall:.0f} s", flush=True)


def wait_all(running: list[Launch]) -> None:
    """After Ctrl-C: every training process got it too (same process group) and saves and
    exits 130 on its own; wait for each (a second Ctrl-C kills them) and record it."""
    for cell in running:
        while True:
            try:
                finish(cell, cell.proc.wait())
                break
            except KeyboardInterrupt:
                for other in running:
                    other.proc.kill()


def train(args) -> int:
    """Train the cells, ``args.jobs`` at a time (each its own process; on one GPU, several
    small runs side by side use it better than one). Exit 0, 1 (a cell failed) or 130."""
    cells = [
        (env, difficulty, network)
        for difficulty in args.difficulties
        for env in args.envs
        for network in args.networks
    ]
    todo = list(enumerate(cells, 1))
    running: list[Launch] = []
    failed = 0
    try:
        while todo or running:
            while todo and len(running) < args.jobs:
                k, cell = todo.pop(0)
                prepared = prepare(args, k, len(cells), cell)
                if prepared and not args.dry_run:
                    running.append(launch(args, *prepared))
            for cell in [c for c in running if c.proc.poll() is not None]:
                running.remove(cell)
                finish(cell, cell.proc.returncode)
                failed += cell.proc.returncode != 0  # an interrupted cell is resumed next call
            if running:
                time.sleep(0.2)
    except KeyboardInterrupt:
        wait_all(running)
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
    tr.add_argument("--networks", nargs="+", default=DEFAULT_NETWORKS)
    tr.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    tr.add_argument("--variant", default=None, help="name of the overrides after --")
    tr.add_argument(
        "--stop-at",
        default="null",
        help="arch.target_return of every cell (default null: the whole budget, since MMER comes "
        "from the sampled training episodes, which lag the greedy eval; e.g. 0.99 to save time)",
    )
    tr.add_argument("--out", type=Path, default=ROOT / "outputs" / "popgym_table")
    tr.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="cells trained side by side, each its own process (default 1; on one GPU 4-10 "
        "small cells together use it better than one)",
    )
    tr.add_argument("--dry-run", action="store_true", help="print the commands only")
    rp = sub.add_parser("report", help="write the table and the figure from the cells")
    rp.add_argument("--out", type=Path, default=ROOT / "outputs" / "popgym_table")
    rp.add_argument("--doc", type=Path, default=ROOT / "docs" / "popgym_table.md")
    rp.add_argument("--figure", type=Path, default=ROOT / "docs" / "img" / "popgym_table.png")
    rp.add_argument(
        "--random-episodes",
        type=int,
        default=512,
        help="episodes of the random policy per cell, computed once (0: leave the column out)",
    )
    args = parser.parse_args(argv)
    args.overrides = overrides
    if args.command == "train":
        return train_checked(parser, args)
    from stoixlite.results.popgym_report import write_report

    return write_report(args)


def train_checked(parser, args) -> int:
    from stoixlite.cli_args import checked_run_config

    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    if args.overrides and not args.variant:
        parser.error("overrides after -- need --variant NAME (the cells' directory suffix)")
    if args.variant and not args.variant.replace("_", "").replace("-", "").isalnum():
        parser.error(f"--variant {args.variant!r}: letters, digits, '-' and '_' only")
    if sorted(args.seeds) != list(range(min(args.seeds), min(args.seeds) + len(args.seeds))):
        parser.error(f"--seeds {args.seeds}: consecutive seeds only (they train in one program)")
    for network in args.networks:
        job = [
            f"env=popgym/{args.envs[0]}",
            f"env.difficulty={args.difficulties[0]}",
            f"network={network}",
            f"arch.seed={min(args.seeds)}",
            f"arch.num_seeds={len(args.seeds)}",
            f"arch.target_return={args.stop_at}",
            *args.overrides,
        ]
        _, error = checked_run_config(job)
        if error is not None:
            parser.error(f"network={network}: {error}")
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
