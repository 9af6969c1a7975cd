"""Host-env training throughput: stoixlite's host loop against Stable-Baselines3's
``RecurrentPPO`` (sb3-contrib), on Gymnasium's CartPole-v1, in one run.

Each row is one vector (``sync``: the envs step in the training process, stoixlite's
``env.vector=sync`` and sb3's ``DummyVecEnv``; ``async``: a worker process per env, stoixlite's
``env.vector=async`` (Gymnasium's ``AsyncVectorEnv``) and sb3's ``SubprocVecEnv``) at one
``--num-envs``, and times both frameworks at the same envs x ``--rollout-length`` steps,
``--epochs`` and ``--minibatches``. A timed call is ``--updates`` whole updates (acting on the
host, then learning) after one warm-up call (stoixlite's policy step and learner compiled before
it, sb3 compiles nothing); ``--repeats`` timed calls per row and round. Every run is a fresh
subprocess; ``--rounds R`` repeats the list R times, interleaved, with the order of the two
frameworks swapped every round, so that machine load hits both alike. Reported per row: env
steps/s (median, range, count) of each, their ratio stoixlite/sb3, setup seconds (envs, network
and compiling; excluded from steps/s), peak RSS of the training process (async workers not
included), the final return (evidence that each learns) and the highest 1-minute load average.

The networks, as alike as the two libraries allow: stoixlite ``network=gru`` with
``network.shared_memory=false`` (a memory for the actor and one for the critic, like sb3's
default ``enable_critic_lstm``), no encoder (``network.encoder_layers=0``: sb3 feeds the raw
observation to its LSTM), ``network.hidden_size=--width``, heads 2 x 64 tanh
(``network.head_size=64 network.head_layers=2 network.activation=tanh``, sb3's default
``net_arch``) and the observation alone (``env.obs_prev_action=false``); sb3
``MlpLstmPolicy`` with its defaults but ``lstm_hidden_size=--width``. The memories differ (GRU:
3 gates, LSTM: 4). The PPO losses are each library's own.

sb3 runs in :mod:`stoixlite.benchmark.peers.sb3_recurrent_ppo` (as a file), in the Python of
``--sb3-python PATH`` (a venv with sb3-contrib: ``python -m venv sb3 && sb3/bin/pip install
'sb3-contrib>=2.9.2'``), or in this Python when it has the ``sb3`` extra (``pip install
'stoixlite[sb3]'``); stoixlite never imports it. ``--no-sb3`` times stoixlite alone.

``--overlap off on`` times stoixlite both ways, ``arch.host_overlap=false`` and ``true`` (an actor
thread collecting the next rollout while the learner updates, docs/host_envs.md), in the same
rounds; a second table then gives each row's steps/s with and without overlap and their ratio.
Usage::

    python -m stoixlite.benchmark host --sb3-python /path/to/sb3venv/bin/python
    python -m stoixlite.benchmark host --num-envs 8 --vectors sync --rounds 3 --no-sb3
    python -m stoixlite.benchmark host --num-envs 8 64 --overlap off on --no-sb3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from stoixlite.benchmark.host_table import label, markdown
from stoixlite.benchmark.rows import build_stoixlite_run
from stoixlite.benchmark.table import hardware, merge_rounds
from stoixlite.benchmark.timing import final_train_return, peak_memory_mb, time_chunks
from stoixlite.cli.args import (
    OneLineArgumentParser,
    compile_for_real,
    fail,
    last_error_line,
    output_file_error,
)

PROG = "python -m stoixlite.benchmark host"
SB3_WORKER = Path(__file__).resolve().parent / "peers" / "sb3_recurrent_ppo.py"
ENV = "gymnasium/CartPole-v1"
VECTORS = ("sync", "async")
OVERLAP = ("off", "on")  # stoixlite's arch.host_overlap
HEAD_SIZE = 64  # sb3's default net_arch: pi=[64, 64], vf=[64, 64], tanh


def stoixlite_spec(spec: dict) -> dict:
    """The benchmark tool's row of a stoixlite run (see the module docstring)."""
    return {
        **spec,
        "env": ENV,
        "network": "gru",
        "width": None,
        "overrides": [
            f"env.vector={spec['vector']}",
            f"arch.host_overlap={str(spec.get('overlap', False)).lower()}",
            "env.obs_prev_action=false",
            f"network.hidden_size={spec['width']}",
            "network.shared_memory=false",
            "network.encoder_layers=0",
            f"network.head_size={HEAD_SIZE}",
            "network.head_layers=2",
            "network.activation=tanh",
            "arch.num_eval_envs=1",  # the evaluation vector (never used here) stays small
        ],
    }


def run_stoixlite(spec: dict) -> dict:
    """Worker: time stoixlite's host loop for ``spec`` (in a subprocess, like sb3's)."""
    import os

    compile_for_real()
    tic = time.perf_counter()
    exp = build_stoixlite_run(stoixlite_spec(spec))
    state, key = exp.init()
    exp.compile_programs(state, key)
    setup_s = time.perf_counter() - tic
    try:
        times, _, metrics = time_chunks(exp.learn_chunk, state, spec["repeats"])
    finally:
        exp.close()
    return {
        "sps_all": [exp.steps_per_chunk / t for t in times],
        "compile_s": setup_s,
        "peak_rss_mb": peak_memory_mb()[0],
        "final_return": final_train_return(metrics),
        "load_avg": os.getloadavg()[0],
    }


def sb3_command(python: str, spec: dict) -> list[str]:
    """The command that times sb3 for ``spec`` (or, with ``spec=None``, prints its versions)."""
    payload = "--versions" if spec is None else json.dumps(spec)
    return [python, str(SB3_WORKER), payload]


def worker_command(spec: dict, sb3_python: str | None) -> list[str]:
    """The subprocess of one run: this tool as a worker, or sb3's worker in ``sb3_python``."""
    if spec["framework"] == "sb3":
        assert sb3_python is not None
        return sb3_command(sb3_python, spec)
    return [sys.executable, *PROG.split()[1:], "--worker", json.dumps(spec)]


def launch(spec: dict, sb3_python: str | None) -> dict:
    """One run in a fresh subprocess: the spec with its measurement, or with ``error``."""
    proc = subprocess.run(worker_command(spec, sb3_python), capture_output=True, text=True)
    if proc.returncode != 0:
        return {**spec, "error": last_error_line(proc.stderr, f"failed (exit {proc.returncode})")}
    return {**spec, **json.loads(proc.stdout.strip().splitlines()[-1])}


def sb3_versions(python: str) -> tuple[dict | None, str | None]:
    """``(versions, None)`` of the sb3 worker's packages in ``python``, or ``(None, error)``."""
    try:
        proc = subprocess.run(sb3_command(python, None), capture_output=True, text=True)
    except OSError as err:
        return None, f"--sb3-python {python}: {err.strerror}"
    if proc.returncode != 0:
        why = last_error_line(proc.stderr, f"exit {proc.returncode}")
        return None, (
            f"--sb3-python {python} cannot run sb3-contrib ({why}): pip install "
            "'stoixlite[sb3]', or name a venv's python that has sb3-contrib, or --no-sb3"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def make_specs(args: argparse.Namespace) -> list[dict]:
    """One spec per run of a row (stoixlite once per ``--overlap`` value, then sb3), per vector
    and envs count (the runs of a row adjacent)."""
    runs = [("stoixlite", {"overlap": o == "on"}) for o in dict.fromkeys(args.overlap)]
    runs += [] if args.no_sb3 else [("sb3", {})]
    return [
        {
            "framework": f,
            **extra,
            "vector": v,
            "num_envs": n,
            "rollout_length": args.rollout_length,
            "epochs": args.epochs,
            "minibatches": args.minibatches,
            "updates": args.updates,
            "repeats": args.repeats,
            "width": args.width,
            **({"torch_threads": args.sb3_threads} if f == "sb3" and args.sb3_threads else {}),
        }
        for v in args.vectors
        for n in args.num_envs
        for f, extra in runs
    ]


def round_order(specs: list[dict], round_: int) -> list[int]:
    """The order of the runs in round ``round_``: the rows in turn, the runs of a row in reverse
    order every other round."""
    rows: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        rows.setdefault((spec["vector"], spec["num_envs"]), []).append(i)
    step = -1 if round_ % 2 else 1
    return [i for runs in rows.values() for i in runs[::step]]


def parse_args(argv: list[str]) -> tuple[OneLineArgumentParser, argparse.Namespace]:
    """The parser and the checked arguments (``parser.error`` on bad ones; sb3 is not asked)."""
    parser = OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--vectors", nargs="+", choices=VECTORS, default=list(VECTORS))
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--updates", type=int, default=1, help="updates per timed call")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per run")
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs of every row, interleaved (order swapped)"
    )
    parser.add_argument(
        "--width", type=int, default=128, help="stoixlite's GRU width and sb3's LSTM width"
    )
    parser.add_argument(
        "--sb3-python",
        default=None,
        help="the python of a venv with sb3-contrib (default: this one, with the sb3 extra)",
    )
    parser.add_argument(
        "--sb3-threads",
        type=int,
        default=0,
        help="torch's compute threads in the sb3 runs (default 0: torch's own, one per core)",
    )
    parser.add_argument(
        "--overlap",
        nargs="+",
        choices=OVERLAP,
        default=["off"],
        help="stoixlite's arch.host_overlap: off (default), on, or both ways (off on)",
    )
    parser.add_argument("--no-sb3", action="store_true", help="time stoixlite alone")
    parser.add_argument("--out", default="benchmark_host.json")
    args = parser.parse_args(argv)
    if args.worker:
        return parser, args
    for key in ("rollout_length", "epochs", "minibatches", "updates", "repeats", "rounds", "width"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    for n in args.num_envs:
        if n < 1 or n % args.minibatches:
            parser.error(f"--num-envs {n} must be a positive multiple of --minibatches")
    if args.sb3_threads < 0:
        parser.error("--sb3-threads must be at least 0 (0: torch's own)")
    if args.no_sb3 and args.sb3_python:
        parser.error("--no-sb3 and --sb3-python: choose one")
    if error := output_file_error(args.out):
        parser.error(error)
    return parser, args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_stoixlite(json.loads(args.worker))))
        return 0
    versions = None
    if not args.no_sb3:
        args.sb3_python = args.sb3_python or sys.executable
        versions, error = sb3_versions(args.sb3_python)
        if error:
            parser.error(error)

    specs = make_specs(args)
    result = {
        "hardware": hardware(),
        "sb3": versions,
        "command": " ".join([PROG, *argv]),
    }

    def write(rows: list[dict], complete: bool) -> None:
        """The results so far to ``--out`` (after every run: an interrupted run keeps them)."""
        result.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), complete=complete)
        try:
            Path(args.out).write_text(json.dumps({**result, "rows": rows}, indent=2))
        except OSError as err:
            fail(f"the results could not be written to {args.out}: {err}", 1, PROG)

    results: list[list[dict]] = [[] for _ in specs]
    for round_ in range(args.rounds):
        for i in round_order(specs, round_):
            results[i].append(launch(specs[i], args.sb3_python))
            r = results[i][-1]
            what = r.get("error") or f"{statistics.median(r['sps_all']):,.0f} steps/s"
            print(f"round {round_ + 1}: {label(r)} {r['vector']} {r['num_envs']}: {what}")
            sys.stdout.flush()
            write([merge_rounds(runs) for runs in results if runs], complete=False)
    rows = [merge_rounds(r) for r in results]
    write(rows, complete=True)
    print(f"\nHardware: {result['hardware']}; {result['date']}; sb3: {versions}\n")
    print(markdown(rows))
    failed = sum("error" in r for runs in results for r in runs)
    if failed:
        fail(f"{failed} of {len(specs) * args.rounds} runs failed (see the table)", 1, parser.prog)
    return 0
