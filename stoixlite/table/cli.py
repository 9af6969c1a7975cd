"""The command line of ``python -m stoixlite.table``: ``train`` and ``report``.

``train`` runs one ``python -m stoixlite.rec_ppo`` per cell (env x difficulty x network, all
seeds vmapped in one compiled program: ``arch.seed=<first> arch.num_seeds=<n>``; seeds 10-12
by default, which no shipped config was tuned on) with the shipped configs and their whole
budget (``arch.target_return=null``), its run directory in
``<out>/<env>/<difficulty>/<network>[+<variant>]``. When a cell finishes or is interrupted, its
record (:mod:`stoixlite.results.popgym_records`) is written to ``--records``.

Several variants in one call: ``--variant A B C D -- system.lr=1e-3,3e-3 system.ent_coef=0,0.01``
names the combinations of the comma lists (Hydra's sweep syntax and order: the last list varies
fastest), one cell per network and variant. Cells that share one compiled program (the variants
of a cell that change only values the program takes as inputs) train as one program
(:mod:`stoixlite.table.programs`), each cell with its own run directory and the record it would
have alone, whose attempt names the program's cells (``program``); ``--no-fuse`` trains each
cell in its own process.

A cell being trained by another runner (another ``train`` with the same ``--out``, here or in
another terminal) is skipped: each runner holds an exclusive lock on ``<run dir>.lock`` while it
trains the cell, and checks again whether the cell is still pending when it takes the lock.

``--networks paper_best`` stands for stoixlite's port of the paper's best model of each
published cell (``lmu`` on repeat_previous medium, ``indrnn`` on autoencode medium, ...; none on
unpublished cells). Published cells train first, then the rest, each group by difficulty, env
and network. A cell whose record is finished (same seeds) is skipped, unless it trained with
other settings than the cell's config today (``env``, ``network``, ``system``, the budget or
``arch.num_envs`` differ: a default changed since), which trains afresh. An interrupted cell
with a checkpoint in its run directory is resumed (``resume=<dir>``); one without trains
afresh, and its record is replaced only by one that trained at least as far. ``--jobs N``
trains N programs (a cell, or cells fused) side by side, each its own process.
``--time-limit S`` starts only cells whose estimated wall time (from the records' wall times on
the same kind of machine, scaled by ``--jobs``; a fused program: its cells' sum) fits in what
is left of S seconds, and at S stops the cells still training cleanly,
recording them as interrupted. Overrides after ``--`` go to every cell of this call and must
come with ``--variant NAME``. In a source checkout, training refuses a tree with uncommitted
changes to tracked files (a record names the commit it ran at) unless ``--allow-changes`` is
given, which records the diff's hash. A failed cell is recorded, the others go on, and the exit
status is 1.

``report`` reads the records and writes the table's page, the page of every trained model and
the figure into ``--out`` (:mod:`stoixlite.table.report`); ``--docs`` writes a checkout's
``docs/popgym_table.md``, ``docs/popgym_table_runs.md``, ``docs/img/popgym_table.png`` and the
README's block instead. It prints every file it wrote and needs no run directory.

Places: in a source checkout ``--records`` defaults to the committed ``results/popgym_table/``,
``train --out`` to ``outputs/popgym_table/`` and ``report --out`` to
``outputs/popgym_table_report/`` of the checkout. From an installed package (no checkout)
``--records`` must be given, ``report`` needs ``--out`` (or ``--doc``), and ``train --out``
defaults to ``outputs/popgym_table/`` of the current directory.
"""

from __future__ import annotations

import signal
import sys
from argparse import ArgumentParser, Namespace
from pathlib import Path

from stoixlite.cli.args import OneLineArgumentParser, checked_run_config
from stoixlite.cli.sweep_overrides import sweep_combinations
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS
from stoixlite.table import checkout
from stoixlite.table.cells import (
    DEFAULT_NETWORKS,
    DEFAULT_SEEDS,
    PAPER_BEST,
    cell_order,
    cell_overrides,
    config_key,
    variant_views,
)

TRAIN_OUT = Path("outputs") / "popgym_table"
REPORT_OUT = Path("outputs") / "popgym_table_report"


def parser() -> OneLineArgumentParser:
    """The ``train`` and ``report`` command line."""
    top = OneLineArgumentParser(
        prog="python -m stoixlite.table",
        description="Train the POPGym table's cells, keep their records, and write its pages.",
    )
    sub = top.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train the cells (skips finished ones, resumes the rest)")
    records_help = "the records folder (default in a checkout: results/popgym_table)"
    tr.add_argument("--records", type=Path, default=None, help=records_help)
    tr.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS, metavar="ENV")
    tr.add_argument("--difficulties", nargs="+", default=list(DIFFICULTIES), choices=DIFFICULTIES)
    tr.add_argument(
        "--networks",
        nargs="+",
        default=DEFAULT_NETWORKS,
        help=f"networks (configs/network/); {PAPER_BEST}: the port of the paper's best model of "
        f"each published cell (default: {' '.join(DEFAULT_NETWORKS)})",
    )
    tr.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS)
    tr.add_argument(
        "--variant",
        nargs="+",
        default=None,
        metavar="NAME",
        help="name of the overrides after --; with comma lists there (key=a,b: Hydra's sweep "
        "syntax), one name per combination in Hydra's order (the last list varies fastest)",
    )
    tr.add_argument(
        "--stop-at",
        default="null",
        help="arch.target_return of every cell (default null: the whole budget, since MMER comes "
        "from the sampled training episodes, which lag the greedy eval; e.g. 0.99 to save time)",
    )
    tr.add_argument("--out", type=Path, default=None,
                    help=f"where the cells' run directories go (default {TRAIN_OUT})")  # fmt: skip
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
        help="train from a checkout with uncommitted changes (records the diff's hash)",
    )
    tr.add_argument(
        "--no-fuse",
        action="store_true",
        help="train every cell in its own process (by default cells that share one compiled "
        "program, e.g. variants that change only system.lr or ent_coef, train as one program)",
    )
    tr.add_argument("--dry-run", action="store_true", help="print the commands only")
    rp = sub.add_parser("report", help="write the table's pages and figure from the records")
    rp.add_argument("--records", type=Path, default=None, help=records_help)
    rp.add_argument("--out", type=Path, default=None,
                    help=f"where the pages and the figure go (default {REPORT_OUT})")  # fmt: skip
    rp.add_argument(
        "--docs",
        action="store_true",
        help="write the checkout's docs/popgym_table.md, docs/popgym_table_runs.md, "
        "docs/img/popgym_table.png and README.md's block instead of --out",
    )
    rp.add_argument("--doc", type=Path, default=None, help="the table's page (a file)")
    rp.add_argument(
        "--runs-doc",
        type=Path,
        default=None,
        help="the page of every trained model (default: beside --doc, <doc>_runs.md)",
    )
    rp.add_argument("--figure", type=Path, default=None, help="the figure (a PNG file)")
    rp.add_argument("--readme", type=Path, default=None,
                    help="a file whose POPGym block is rewritten (default with --docs: "
                    "README.md; else none)")  # fmt: skip
    rp.add_argument("--no-readme", action="store_true", help="with --docs: leave the README alone")
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
    return top


def records_place(top: ArgumentParser, args: Namespace) -> Path:
    """``--records``, or the checkout's committed records; refused without either."""
    if args.records is not None:
        return args.records
    if checkout.CHECKOUT is None:
        top.error(f"{args.command} needs --records DIR outside a source checkout (an installed "
                  "package has no committed records)")  # fmt: skip
    return checkout.CHECKOUT / checkout.COMMITTED_RECORDS


def main(argv: list[str] | None = None) -> int:
    """``python -m stoixlite.table train|report ...``; returns the exit status."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops, even if ignored
    argv = sys.argv[1:] if argv is None else list(argv)
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    top = parser()
    args = top.parse_args(argv)
    args.overrides = overrides
    args.records = records_place(top, args)
    if args.command == "train":
        return train_checked(top, args)
    return report_checked(top, args)


def report_checked(top: ArgumentParser, args: Namespace) -> int:
    """Check ``report``'s places (one line, exit 2), then write the report."""
    from stoixlite.table.report import FIGURE, PAGE, mark_changed_settings, write_report

    if args.overrides:
        top.error("report takes no overrides after --")
    if args.random_episodes < 0:
        top.error(f"--random-episodes {args.random_episodes}: must be 0 or more")
    root = checkout.CHECKOUT
    if args.docs:
        if root is None:
            top.error("--docs writes a source checkout's docs; this stoixlite is an installed "
                      "package: give --out DIR")  # fmt: skip
        if args.out is not None:
            top.error("--docs and --out: choose one place")
        base = root / "docs"
        readme = args.readme or (None if args.no_readme else root / "README.md")
    else:
        if args.out is None and args.doc is None and root is None:
            top.error("report needs --out DIR outside a source checkout")
        base = args.out if args.out is not None else (root or Path.cwd()) / REPORT_OUT
        readme = args.readme
    if base.exists() and not base.is_dir():
        top.error(f"--out {base}: not a directory")
    doc = args.doc or base / PAGE
    figure = args.figure or base / FIGURE
    if args.check_settings and args.records.is_dir():
        mark_changed_settings(args.records)
    source = checkout.relative(args.records, root)
    return write_report(
        args.records, doc, figure, args.runs_doc, readme, args.random_episodes, source
    )


def train_checked(top: ArgumentParser, args: Namespace) -> int:
    """Check the arguments and every cell's config (one line, exit 2), then train."""
    from stoixlite.table.runner import train

    if args.jobs < 1:
        top.error(f"--jobs {args.jobs}: must be at least 1")
    if args.time_limit is not None and not 0 < args.time_limit < float("inf"):
        top.error(f"--time-limit {args.time_limit}: must be a positive number of seconds")
    if args.overrides and not args.variant:
        top.error("overrides after -- need --variant NAME (the cells' directory suffix)")
    for name in args.variant or []:
        if not name.replace("_", "").replace("-", "").isalnum():
            top.error(f"--variant {name!r}: letters, digits, '-' and '_' only")
    if args.variant and len(set(args.variant)) != len(args.variant):
        top.error(f"--variant {' '.join(args.variant)}: each name once")
    try:
        combinations = sweep_combinations(args.overrides)
    except ValueError as err:
        top.error(f"overrides after --: {err}")
    if args.variant and len(combinations) != len(args.variant):
        top.error(
            f"--variant gives {len(args.variant)} name(s) for the {len(combinations)} "
            "combination(s) of the overrides after -- (one name per combination, in Hydra's "
            "order: the last comma list varies fastest)"
        )
    several = bool(args.variant) and len(args.variant) > 1
    args.variants = list(zip(args.variant, combinations, strict=True)) if several else None
    args.variant = args.variant[0] if args.variant else None
    if sorted(args.seeds) != list(range(min(args.seeds), min(args.seeds) + len(args.seeds))):
        top.error(f"--seeds {args.seeds}: consecutive seeds only (they train in one program)")
    args.seeds = sorted(args.seeds)
    root = checkout.CHECKOUT
    if args.out is None:
        args.out = (root or Path.cwd()) / TRAIN_OUT
    for flag in ("out", "records"):
        path = getattr(args, flag)
        if path.exists() and not path.is_dir():
            top.error(f"--{flag} {path}: not a directory")
    configs = {}  # (env, difficulty, network[+variant]): the cell's RunConfig (all, or some)
    checked = set()
    for view in variant_views(args):
        for env, difficulty, network in cell_order(args):
            if args.time_limit is None and (network, view.variant) in checked:
                continue  # only estimates need every cell's config (budget): each network once
            cfg, error = checked_run_config(cell_overrides(view, env, difficulty, network))
            if error is not None:
                shown = f" (--variant {view.variant})" if len(args.variants or []) > 1 else ""
                top.error(f"network={network}{shown}: {error}")
            configs[config_key(env, difficulty, network, view.variant)] = cfg
            checked.add((network, view.variant))
    dirty = root is not None and checkout.git_state(root)[1] != "clean"
    if not args.dry_run and not args.allow_changes and dirty:
        top.error(
            "the checkout has uncommitted changes to tracked files: commit them (a record "
            "names the commit it ran at) or pass --allow-changes (records the diff's hash)"
        )
    return train(args, configs, root)
