#!/usr/bin/env python
"""Run the POPGym study (envs x networks x seeds) as one Hydra multirun, then aggregate it.

    python scripts/popgym_study.py                                   # defaults below
    python scripts/popgym_study.py --envs repeat_previous repeat_first --networks gru memoroid \\
        --seeds 0 1 2 --difficulty easy --out multirun/popgym_study -- arch.total_timesteps=5e6

Every (env, network, seed) is one job of ``python -m stoixlite.rec_ppo -m ...`` with W&B logging
(``logger=wandb``: offline without credentials, and all jobs in one group). ``--vmap-seeds``
instead trains all seeds of an (env, network) pair in one compiled program
(``arch.num_seeds``). A failing job leaves ``error.txt`` in its directory and the sweep goes on.
At the end ``scripts/aggregate.py`` writes ``<out>/aggregate/results.md`` (mean ± std of the
final and max eval return per env x network) and one learning-curve PNG per env. Extra
arguments after ``--`` are passed to every job as Hydra overrides. ``--dry-run`` prints the
command only.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

from stoixlite.cli_args import OneLineArgumentParser

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_ENVS = ["repeat_previous", "repeat_first", "count_recall", "autoencode", "higher_lower"]
DEFAULT_NETWORKS = ["gru", "lstm", "memoroid", "mlp"]


def available(group: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "configs" / group).glob("*.yaml"))


def build_command(args: argparse.Namespace, extra: list[str]) -> list[str]:
    envs = ",".join(f"popgym/{e}" for e in args.envs)
    cmd = [
        sys.executable,
        "-m",
        "stoixlite.rec_ppo",
        "-m",
        f"env={envs}",
        f"network={','.join(args.networks)}",
        f"env.difficulty={args.difficulty}",
        f"hydra.sweep.dir={args.out}",
        "arch.target_return=null",  # whole learning curves: no early stop
    ]
    if args.vmap_seeds:
        cmd += [f"arch.seed={min(args.seeds)}", f"arch.num_seeds={len(args.seeds)}"]
    else:
        cmd += [f"arch.seed={','.join(str(s) for s in args.seeds)}"]
    if not args.no_wandb:
        cmd += ["logger=wandb", f"logger.wandb.group={Path(args.out).name}"]
    return cmd + extra


def seeds_error(seeds: list[int], vmap_seeds: bool) -> str | None:
    """Why ``--seeds`` cannot run as given (``None`` when they can): a seed given twice would
    train the same run twice; ``--vmap-seeds`` trains ``arch.seed, arch.seed + 1, ...`` and so
    takes consecutive seeds only."""
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        return f"--seeds {' '.join(map(str, seeds))}: seed(s) {twice} given more than once"
    if vmap_seeds and sorted(seeds) != list(range(min(seeds), min(seeds) + len(seeds))):
        return (
            f"--seeds {' '.join(map(str, seeds))} with --vmap-seeds: the seeds must be consecutive "
            f"(one program trains arch.seed, arch.seed + 1, ...), e.g. --seeds "
            f"{' '.join(str(min(seeds) + k) for k in range(len(seeds)))}"
        )
    return None


def job_config_error(args: argparse.Namespace, extra: list[str]) -> str | None:
    """One line for the first (env, network) job whose config is invalid, checked as
    ``rec_ppo`` checks a single run (:func:`stoixlite.cli_args.checked_run_config`), so that a bad
    override after ``--`` is refused before any job starts rather than failing every job.
    Overrides with sweep syntax (``a,b``, ``range(...)``) and ``hydra`` keys are left to
    Hydra."""
    from stoixlite.cli_args import checked_run_config

    sweep = ("(", "[", "${", ",")
    checked = [
        o
        for o in extra
        if not o.lstrip("+~").startswith("hydra") and not any(t in o for t in sweep)
    ]
    seeds = [f"arch.seed={min(args.seeds)}"]
    if args.vmap_seeds:
        seeds.append(f"arch.num_seeds={len(args.seeds)}")
    logger = [] if args.no_wandb else ["logger=wandb"]
    for env in args.envs:
        for network in args.networks:
            job = [
                f"env=popgym/{env}",
                f"network={network}",
                f"env.difficulty={args.difficulty}",
                "arch.target_return=null",
                *seeds,
                *logger,
                *checked,
            ]
            _, error = checked_run_config(job)
            if error is not None:
                return f"job env=popgym/{env} network={network}: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = OneLineArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="+", default=DEFAULT_ENVS, help="popgym env names")
    parser.add_argument("--networks", nargs="+", default=DEFAULT_NETWORKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--difficulty", default="easy", choices=["easy", "medium", "hard"])
    parser.add_argument("--out", default=f"multirun/popgym_study_{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--vmap-seeds", action="store_true", help="seeds in one program per job")
    parser.add_argument("--no-wandb", action="store_true", help="local logs only")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    unknown_envs = sorted(set(args.envs) - set(available("env/popgym")))
    unknown_nets = sorted(set(args.networks) - set(available("network")))
    if unknown_envs:
        parser.error(f"--envs: unknown {unknown_envs}; choose from {available('env/popgym')}")
    if unknown_nets:
        parser.error(f"--networks: unknown {unknown_nets}; choose from {available('network')}")
    if error := seeds_error(args.seeds, args.vmap_seeds):
        parser.error(error)
    sweep = ROOT / args.out
    if sweep.exists() and (not sweep.is_dir() or any(sweep.iterdir())):
        parser.error(
            f"--out {args.out} already exists (its runs would be mixed with the new ones): "
            "give a new directory"
        )
    if error := job_config_error(args, extra):
        parser.error(error)
    cmd = build_command(args, extra)
    print(shlex.join(cmd))
    if args.dry_run:
        return 0
    code = subprocess.call(cmd, cwd=ROOT)
    if not sweep.is_dir():  # the sweep was refused before any job ran (its line is above)
        return code or 1
    aggregate = [sys.executable, str(ROOT / "scripts" / "aggregate.py"), str(sweep)]
    aggregated = subprocess.call(aggregate, cwd=ROOT)  # also after failed jobs: it lists them
    return code or aggregated


if __name__ == "__main__":
    sys.exit(main())
