"""The benchmark tool's command line (``python -m stoixlite.benchmark``); see the package's
docstring for what it measures. A first argument naming one of :data:`TOOLS` runs that tool
instead, with the rest of the command line (``python -m stoixlite.benchmark memory --quick``)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import stoixlite.benchmark as package
from stoixlite.benchmark.gpu_suite import SIZES, backend, report, suite_specs
from stoixlite.benchmark.program_suite import program_report, program_specs
from stoixlite.benchmark.purejaxrl import purejaxrl_source
from stoixlite.benchmark.rows import (
    REFERENCE_LABELS,
    REFERENCE_MODULES,
    REFERENCE_ROWS,
    checkout,
    describe,
    reference_env_error,
)
from stoixlite.benchmark.table import commit, hardware, markdown, merge_rounds
from stoixlite.benchmark.worker import (
    check_rows,
    launch,
    launch_together,
    row_error,
    run_row,
    run_rows,
)
from stoixlite.cli.args import OneLineArgumentParser, fail, output_file_error
from stoixlite.cli.configs import CONFIG_DIR

# The other measurements: the first argument, the module whose ``main(argv)`` runs the rest, and
# what it times.
TOOLS = {
    "envs": ("stoixlite.benchmark.envs", "env steps/s alone: the JAX ports against popgym"),
    "host": (
        "stoixlite.benchmark.host",
        "host-env training: stoixlite's host loop against sb3-contrib's RecurrentPPO",
    ),
    "memory": (
        "stoixlite.benchmark.memory_models",
        "a memory model alone: its training step (forward + backward) and rollout step",
    ),
    "profile": (
        "stoixlite.benchmark.update_phases",
        "where one PPO update's time goes: rollout, GAE, epochs, timed apart",
    ),
    "fused": (
        "stoixlite.benchmark.fused",
        "a sweep's runs as one program (hydra/launcher=fused) against one after another",
    ),
    "sweep": (
        "stoixlite.benchmark.sweep",
        "a whole sweep's processes: hydra/launcher=fused against the basic launcher or one job",
    ),
    "soak": (
        "stoixlite.benchmark.soak",
        "a long run or multirun: memory, open files and disk per chunk or job, litter",
    ),
}


def build_parser() -> OneLineArgumentParser:
    """The tool's options."""
    tools = "\n".join(f"  {name:8s} {what}" for name, (_, what) in TOOLS.items())
    parser = OneLineArgumentParser(
        prog="python -m stoixlite.benchmark",
        description=package.__doc__,
        epilog="other measurements (python -m stoixlite.benchmark TOOL --help):\n" + tools,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-rows", help=argparse.SUPPRESS)
    parser.add_argument("--check-rows", help=argparse.SUPPRESS)
    parser.add_argument(
        "--suite",
        choices=["gpu", "programs"],
        default=None,
        help="gpu: the GPU table (stoixlite.benchmark.gpu_suite: feedforward, gru, memoroid, mlp "
        "against PureJaxRL's set-ups at 64, 1,024, 4,096 envs and 64 envs x 3 seeds, and "
        "arch.branching skip against mask); programs: the jaxpr equations of a rollout step and "
        "a minibatch step and the compiled chunk's fusions, beside PureJaxRL's "
        "(stoixlite.benchmark.program_suite); both take --purejaxrl-dir and --out",
    )
    parser.add_argument(
        "--sizes",
        choices=list(SIZES),
        default="auto",
        help="of --suite gpu: full (its GPU sizes), small (a CPU's, all rows in one process), "
        "auto (full on an accelerator, small on a CPU)",
    )
    parser.add_argument(
        "--networks",
        nargs="*",
        default=None,
        help=f"default: all registered; also {' and '.join(REFERENCE_MODULES)} (CartPole-v1 only)",
    )
    parser.add_argument(
        "--envs", nargs="*", default=["gymnax/CartPole-v1", "popgym/repeat_previous"]
    )
    parser.add_argument("--num-envs", type=int, nargs="*", default=[64])
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument(
        "--chunk-steps",
        type=int,
        default=131072,
        help="env steps per timed call (a compiled chunk of chunk_steps / (envs x steps) updates)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed chunks per row and round")
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="compile each row and report its memory (peak RSS, program MiB); train nothing",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every row this many times, interleaved (ABAB...), pooling the timed chunks",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=128,
        help="hidden/embed/head size of the matrix rows (0: the network config's own)",
    )
    parser.add_argument("--reference-only", action="store_true")
    parser.add_argument(
        "--reference-labels",
        nargs="*",
        default=None,
        help=f"only the reference rows with these labels (of {sorted(REFERENCE_LABELS)})",
    )
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument(
        "--purejaxrl-dir",
        default=None,
        help="a checkout of PureJaxRL: after each purejaxrl_ppo/purejaxrl_ppo_rnn row, time its "
        "own ppo.py/ppo_rnn.py at the same sizes (adapted at run time, label '... (checkout)')",
    )
    parser.add_argument(
        "--devices", nargs="*", type=int, default=None, help="arch.num_devices of each row"
    )
    parser.add_argument(
        "--host-devices", type=int, default=None, help="force this many CPU devices (XLA_FLAGS)"
    )
    parser.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        help="Hydra overrides of every matrix row, e.g. network.encoder=cnn (checked like "
        "rec_ppo's command line before any row runs; shown in the row's note)",
    )
    parser.add_argument("--out", default="benchmark_results.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The tool, or the one of :data:`TOOLS` that ``argv[0]`` names: its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in TOOLS:
        return importlib.import_module(TOOLS[argv[0]][0]).main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(run_row(json.loads(args.worker))))
        return 0
    if args.worker_rows:
        print(json.dumps(run_rows(json.loads(args.worker_rows))))
        return 0
    if args.check_rows:
        print(json.dumps({"error": row_error(json.loads(args.check_rows))}))
        return 0
    if args.suite == "gpu":
        return gpu_suite_main(args, parser, argv)
    if args.suite == "programs":
        return programs_main(args, parser, argv)
    specs = matrix_specs(args, parser)
    rows, failed = run_specs(specs, args, parser)
    print(markdown(rows))
    return finish(rows, failed, len(specs) * args.rounds, args, parser)


def matrix_specs(args: argparse.Namespace, parser: OneLineArgumentParser) -> list[dict]:
    """The rows of the matrix and the reference rows that ``args`` ask for (checked: one line
    and exit 2 for anything wrong, before any row runs)."""
    # Known networks and envs are those with a config (what the rows' overrides select); read
    # from configs/, so that this process never starts JAX (see row_error).
    config_root = Path(CONFIG_DIR)
    configs = {p.stem for p in (config_root / "network").glob("*.yaml")}
    envs = sorted(
        str(p.relative_to(config_root / "env").with_suffix(""))
        for p in (config_root / "env").rglob("*.yaml")
    )
    networks = args.networks or sorted(configs - {"ffm"})  # ffm: the same model as memoroid
    for name in networks:
        if name not in configs and name not in REFERENCE_MODULES:
            parser.error(
                f"unknown network {name!r}; choose from {sorted(configs | set(REFERENCE_MODULES))}"
            )
    for label in args.reference_labels or ():
        if label not in REFERENCE_LABELS:
            parser.error(
                f"unknown reference label {label!r}; choose from {sorted(REFERENCE_LABELS)}"
            )
    for env in args.envs:
        if env not in envs:
            parser.error(f"unknown env {env!r}; choose from {envs}")
    if not args.reference_only:  # the matrix rows
        for name in networks:
            for env in args.envs:
                if error := reference_env_error(name, env):
                    parser.error(error)
    check_common(args, parser)
    for key in ("rollout_length", "epochs", "minibatches", "chunk_steps"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    for n in args.num_envs:
        if n < 1 or n % args.minibatches:
            parser.error(f"--num-envs {n} must be a positive multiple of --minibatches")
        if args.chunk_steps < n * args.rollout_length:
            parser.error(f"--chunk-steps must be at least one update ({n * args.rollout_length})")
    if args.width < 0:
        parser.error(f"--width {args.width} must be positive, or 0 for the network config's own")
    for d in args.devices or ():
        if d < 1:
            parser.error(f"--devices {d} must be at least 1 (devices per row)")
    if args.host_devices is not None and args.host_devices < 1:
        parser.error(f"--host-devices {args.host_devices} must be at least 1")

    def common(num_envs: int, rollout: int) -> dict:
        return {
            "rollout_length": rollout,
            "epochs": args.epochs,
            "minibatches": args.minibatches,
            "updates": args.chunk_steps // (num_envs * rollout),
            "repeats": 0 if args.compile_only else args.repeats,
        }

    specs = []
    if not args.reference_only:
        specs += [
            {
                "network": n,
                "env": e,
                "num_envs": k,
                "width": args.width or None,
                **common(k, args.rollout_length),
                **(
                    {"overrides": args.overrides, "label": " ".join(args.overrides)}
                    if args.overrides
                    else {}
                ),
            }
            for e in args.envs
            for k in args.num_envs
            for n in networks
        ]
    if not args.no_reference:
        specs += [
            {**common(row["num_envs"], 128), **row, "epochs": 4, "minibatches": 4}
            for row in REFERENCE_ROWS
            if args.reference_labels is None or row["label"] in args.reference_labels
        ]
    if args.purejaxrl_dir:  # the original beside each of its reimplementation's rows
        specs = [
            twin
            for spec in specs
            for twin in (
                [spec, {**spec, "purejaxrl_dir": args.purejaxrl_dir, "label": checkout(spec)}]
                if spec["network"] in REFERENCE_MODULES
                else [spec]
            )
        ]
    if args.devices:
        specs = [{**spec, "devices": d} for spec in specs for d in args.devices]
    for spec in specs:  # the reference rows have their own envs x steps
        if spec["updates"] < 1:
            steps = spec["num_envs"] * spec["rollout_length"]
            parser.error(
                f"--chunk-steps must be at least one update ({steps}) of every row: "
                f"{describe(spec)} x {spec['rollout_length']} steps"
            )
    if not specs:
        parser.error(
            "no rows to run: --envs, --num-envs or --reference-labels is empty, or "
            "--reference-only with --no-reference"
        )
    return specs


def check_common(args: argparse.Namespace, parser: OneLineArgumentParser) -> None:
    """The options every run checks: counts, the output file and the PureJaxRL checkout."""
    for key in ("repeats", "rounds"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if args.purejaxrl_dir is not None:
        source = purejaxrl_source(args.purejaxrl_dir)
        if source is None:
            parser.error(
                f"--purejaxrl-dir {args.purejaxrl_dir} is not a PureJaxRL checkout (no "
                "purejaxrl/ppo.py, ppo_rnn.py and wrappers.py in it)"
            )
        args.purejaxrl_dir = str(source.resolve())


def run_specs(
    specs: list[dict],
    args: argparse.Namespace,
    parser: OneLineArgumentParser,
    together: bool = False,
) -> tuple[list[dict], int]:
    """Check the rows (one line, exit 2), then run them ``args.rounds`` times interleaved, each
    printed as it ends: ``(rows pooled over the rounds, failed row runs)``. ``together``: all
    rows of a round in one worker process (:func:`launch_together`)."""
    if error := output_file_error(args.out):
        parser.error(error)
    if error := check_rows(specs, args.host_devices):
        parser.error(error)
    results: list[list[dict]] = [[] for _ in specs]
    for round_ in range(args.rounds):
        if together:
            for i, row in enumerate(launch_together(specs, args.host_devices)):
                results[i].append(row)
                print(f"round {round_ + 1}: " + markdown([row]).splitlines()[-1], flush=True)
            continue
        for i, spec in enumerate(specs):
            results[i].append(launch(spec, args.host_devices))
            print(f"round {round_ + 1}: " + markdown([results[i][-1]]).splitlines()[-1], flush=True)
    rows = [merge_rounds(r) for r in results]
    return rows, sum("error" in r for rounds in results for r in rounds)


def finish(
    rows: list[dict],
    failed: int,
    runs: int,
    args: argparse.Namespace,
    parser: OneLineArgumentParser,
    extra: dict | None = None,
) -> int:
    """Write the results (with the machine and date) to ``args.out``; exit 1 when a row run
    failed or the file cannot be written."""
    result = {"hardware": hardware(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    result.update(extra or {})
    result["rows"] = rows
    print(f"\nHardware: {result['hardware']}; {result['date']}")
    try:
        Path(args.out).write_text(json.dumps(result, indent=2))
    except OSError as err:
        fail(
            f"the results (printed above) could not be written to {args.out}: {err}", 1, parser.prog
        )
    if failed:
        fail(
            f"{failed} of {runs} row runs failed (their errors are in the table and in {args.out})",
            1,
            parser.prog,
        )
    return 0


def gpu_suite_main(args: argparse.Namespace, parser: OneLineArgumentParser, argv: list[str]) -> int:
    """``--suite gpu``: the rows of :mod:`stoixlite.benchmark.gpu_suite`, then its tables."""
    check_common(args, parser)
    platform = backend()
    sizes = args.sizes if args.sizes != "auto" else ("small" if platform == "cpu" else "full")
    repeats = args.repeats if "--repeats" in argv else 2
    specs = suite_specs(sizes, args.purejaxrl_dir, repeats, platform)
    rows, failed = run_specs(specs, args, parser, together=sizes == "small")
    rows = [
        {**{"suite": s["suite"], "purejaxrl_dir": s.get("purejaxrl_dir")}, **r}
        for s, r in zip(specs, rows, strict=True)
    ]
    command = "python -m stoixlite.benchmark " + " ".join(argv)
    print()
    print(report(rows, hardware(), command))
    return finish(
        rows, failed, len(specs) * args.rounds, args, parser, {"suite": "gpu", "sizes": sizes}
    )


def programs_main(args: argparse.Namespace, parser: OneLineArgumentParser, argv: list[str]) -> int:
    """``--suite programs``: :mod:`stoixlite.benchmark.program_suite`'s rows in one worker
    process, then its table."""
    check_common(args, parser)
    specs = program_specs(args.purejaxrl_dir)
    if error := output_file_error(args.out):
        parser.error(error)
    if error := check_rows(specs, args.host_devices):
        parser.error(error)
    rows = launch_together(specs, args.host_devices)
    command = "python -m stoixlite.benchmark " + " ".join(argv)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(program_report(rows, hardware(), command, date, commit()))
    failed = sum("error" in r for r in rows)
    return finish(rows, failed, len(specs), args, parser, {"suite": "programs", "command": command})
