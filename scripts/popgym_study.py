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


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    if unknown_envs or unknown_nets:
        print(
            f"unknown envs {unknown_envs} / networks {unknown_nets}; available: "
            f"{available('env/popgym')} / {available('network')}",
            file=sys.stderr,
        )
        return 2
    cmd = build_command(args, extra)
    print(shlex.join(cmd))
    if args.dry_run:
        return 0
    code = subprocess.call(cmd, cwd=ROOT)
    aggregate = [sys.executable, str(ROOT / "scripts" / "aggregate.py"), str(ROOT / args.out)]
    subprocess.call(aggregate, cwd=ROOT)
    return code


if __name__ == "__main__":
    sys.exit(main())
