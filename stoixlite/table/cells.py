"""The table's cells: which are asked for, where each one's run and record live, the commands
that train it, and whether it still needs training.

A cell is (env, difficulty, network[+variant]); its run directory is
``<out>/<env>/<difficulty>/<network>[+<variant>]``, its record
``<records>/<env>/<difficulty>/<network>[+<variant>].json``
(:mod:`stoixlite.results.popgym_records`). ``args`` below is the ``train`` command line
(:mod:`stoixlite.table.cli`): ``seeds``, ``stop_at``, ``variant``, ``overrides`` (after ``--``),
``envs``, ``difficulties``, ``networks``; with several variants (``--variant A B -- key=1,2``),
one view of it per variant (:func:`variant_views`), which each of its cells carries.
"""

from __future__ import annotations

import json
import shlex
import sys
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoixlite.cli.args import checked_run_config
from stoixlite.results.popgym_cells import COLUMNS
from stoixlite.results.popgym_paper import PAPER, paper_best_networks
from stoixlite.results.popgym_records import (
    RecordError,
    changed_settings,
    read_record,
    record_name,
    write_json_atomic,
)

CELL_FILE = "cell.json"  # the runner's bookkeeping in a cell's run directory
PAPER_BEST = "paper_best"  # in --networks: the paper's best model of each published cell
# Every model the table's pages show: the three columns on every cell, and the ports of the
# paper's best models behind "our best" on the published ones (popgym_cells.table_cells).
DEFAULT_NETWORKS = [*COLUMNS, PAPER_BEST]
DEFAULT_SEEDS = [10, 11, 12]


def variant_views(args: Namespace) -> list[Namespace]:
    """The ``train`` arguments of each variant asked for (``args.variants``: ``[(name,
    overrides), ...]``; without it ``args`` itself): ``args`` with that ``variant`` and its
    ``overrides``."""
    variants = getattr(args, "variants", None)
    if not variants:
        return [args]
    return [Namespace(**{**vars(args), "variant": v, "overrides": o}) for v, o in variants]


def config_key(env: str, difficulty: str, network: str, variant: str | None) -> tuple:
    """A cell's key in the runner's ``configs``: ``(env, difficulty, <network>[+<variant>])``."""
    return (env, difficulty, record_name(network, variant))


def cell_dir(out: Path, env: str, difficulty: str, network: str, variant: str | None) -> Path:
    """Where a cell's run lives: ``<out>/<env>/<difficulty>/<network>[+<variant>]``."""
    return out / env / difficulty / record_name(network, variant)


def read_cell(path: Path) -> dict:
    """The run directory's ``cell.json`` (``{}`` when it has none or it is unreadable)."""
    try:
        return json.loads((path / CELL_FILE).read_text())
    except (OSError, ValueError):
        return {}


def write_cell(path: Path, book: dict) -> None:
    """Write ``cell.json`` atomically (:func:`~stoixlite.results.popgym_records.
    write_json_atomic`)."""
    write_json_atomic(path / CELL_FILE, book)


def has_checkpoint(path: Path) -> bool:
    ckpt = path / "checkpoints"
    return ckpt.is_dir() and any(p.name.isdigit() for p in ckpt.iterdir())


def shipped_overrides(env: str, difficulty: str, network: str) -> list[str]:
    """The overrides that select a cell's shipped config: its env, difficulty and model."""
    return [f"env=popgym/{env}", f"env.difficulty={difficulty}", f"network={network}"]


def cell_overrides(args: Namespace, env: str, difficulty: str, network: str) -> list[str]:
    """The cell's overrides of the shipped config (all its seeds in one program)."""
    return [
        *shipped_overrides(env, difficulty, network),
        f"arch.seed={min(args.seeds)}",
        f"arch.num_seeds={len(args.seeds)}",
        f"arch.target_return={args.stop_at}",
        *args.overrides,
    ]


def fresh_command(
    args: Namespace, env: str, difficulty: str, network: str, path: Path
) -> list[str]:
    """The command that trains the cell from scratch."""
    overrides = cell_overrides(args, env, difficulty, network)
    return [sys.executable, "-m", "stoixlite.rec_ppo", *overrides, f"hydra.run.dir={path}"]


def train_command(
    args: Namespace, env: str, difficulty: str, network: str, path: Path
) -> list[str]:
    """The cell's command: ``resume=<dir>`` when it has a checkpoint, else a fresh run."""
    if has_checkpoint(path):
        resume = [f"resume={path}", f"arch.target_return={args.stop_at}"]
        return [sys.executable, "-m", "stoixlite.rec_ppo", *resume]
    return fresh_command(args, env, difficulty, network, path)


def rebuild_command(args: Namespace, env: str, difficulty: str, network: str) -> str:
    """The runner command that trains this one cell again."""
    cmd = ["python", "-m", "stoixlite.table", "train", "--envs", env, "--difficulties",
           difficulty, "--networks", network, "--seeds", *map(str, args.seeds)]  # fmt: skip
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
    args: Namespace | None = None  # the train arguments of its variant (None: the runner's)
    plan: Any = None  # its RunPlan, once the runner asked which program trains it

    def view(self, args: Namespace) -> Namespace:
        """The ``train`` arguments of this cell: its variant's, else ``args``."""
        return self.args if self.args is not None else args

    @property
    def name(self) -> str:
        return f"{self.env} {self.difficulty} {self.path.name}"


def cell_networks(networks: list[str], env: str, difficulty: str) -> list[str]:
    """``--networks`` for one cell: ``paper_best`` replaced by the ports of the paper's best
    model(s) there (:func:`~stoixlite.results.popgym_paper.paper_best_networks`; nothing on an
    unpublished cell), each network once."""
    expanded = []
    for network in networks:
        expanded += paper_best_networks(env, difficulty) if network == PAPER_BEST else [network]
    return list(dict.fromkeys(expanded))


def cell_order(args: Namespace) -> list[tuple[str, str, str]]:
    """``(env, difficulty, network)`` of every cell asked for, the published cells first (the
    ones the page compares with the paper), then by difficulty, env and network as given."""
    cells = [
        (env, difficulty, network)
        for difficulty in args.difficulties
        for env in args.envs
        for network in cell_networks(args.networks, env, difficulty)
    ]
    return sorted(cells, key=lambda cell: cell[1] not in PAPER.get(cell[0], {}))  # stable


def mtime(path: Path) -> int | None:
    """``path``'s modification time in ns (``None`` when it does not exist)."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def pending(args: Namespace, cell: Cell, configs: dict) -> bool:
    """Whether ``cell`` needs training (prints why not). A record trained with other settings
    than the cell's config today (:func:`~stoixlite.results.popgym_records.changed_settings`)
    trains afresh: its record is replaced when the new run finishes. ``configs``: the cells'
    checked configs where known (``{(env, difficulty, <network>[+<variant>]): RunConfig}``)."""
    args = cell.view(args)
    cell.seen = mtime(cell.record)
    if cell.seen is None:
        return True
    try:
        record = read_record(cell.record)
    except RecordError as err:
        print(f"{cell.name}: {err}; it will be replaced", flush=True)
        return True
    cfg = configs.get((cell.env, cell.difficulty, cell.path.name))
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
