"""A fused group's learn chunk against its runs' chunks one after another, in one process.

Builds the run of the given overrides and a fused group of ``--members`` runs like it (seeds
``0..M-1``: the group's program is the same whatever values its members vary), compiles both
learn chunks (compile seconds of each), then per round times ``M`` chunks of the run alone, one
after another (what the basic launcher trains for M jobs, with one compilation shared since the
seed is an input), against one chunk of the group with its members as ``hydra/launcher=fused``
computes them on these devices (:func:`stoixlite.run.member_parts.members_axis`: ``parts`` on a
CPU, one part of members per core at the same time) and one with the other members axis
(``vmap``: one batch), interleaved so that machine load hits all
alike. Reported per round: wall seconds and CPU seconds (this process, all threads: less moved
by other processes' load than wall time) of each side and their ratios group / alone (below 1:
the fused program is faster).

Usage::

    python -m stoixlite.benchmark fused network=gru env=popgym/repeat_previous arch.num_envs=64 \\
        --members 12 --rounds 3
"""

from __future__ import annotations

import argparse
import sys
import time

from stoixlite.cli.args import OneLineArgumentParser, checked_run_config, compile_for_real, fail


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineArgumentParser(
        prog="python -m stoixlite.benchmark fused",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of configs/config.yaml")
    parser.add_argument("--members", type=int, default=12, help="runs in the fused group (>= 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (>= 1)")
    args = parser.parse_args(argv)
    if args.members < 2:
        parser.error(f"--members {args.members} is invalid: at least 2")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds} is invalid: at least 1")
    return args


def timed(fn) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    members = []
    for seed in range(args.members):
        cfg, error = checked_run_config([*args.overrides, f"arch.seed={seed}"])
        if error is not None:
            fail(error)
        members.append(cfg)
    compile_for_real()
    import jax

    from stoixlite.config.plan import plan_run
    from stoixlite.results.machine import cpu_description
    from stoixlite.run.build import build_group, build_run
    from stoixlite.run.member_parts import MemberParts, members_axis, part_sizes, usable_cores

    plans = [plan_run(cfg) for cfg in members]
    sizes = part_sizes(args.members, usable_cores())
    alone, group = build_run(plans[0]), build_group(plans)
    state, _ = alone.init()
    trained = members_axis(group.plan.devices[0].platform, group.placement.mesh)
    other = "vmap" if trained == "parts" else "parts"
    seeds = group.config.arch.num_seeds
    programs = {  # the group's learn chunk with its members batched and in parts
        "vmap": jax.jit(jax.vmap(group.learn_chunk), donate_argnums=0),
        "parts": MemberParts(group.learn_chunk, sizes, seeds, donate=True),
    }
    compile_s = {"alone": timed(lambda: alone.compile_learn(state))[0]}
    compiled = {"alone": alone.compile_learn(state)}
    holder = {"alone": state}
    for axis, program in programs.items():
        holder[axis] = group.init()[0]
        compile_s[axis] = timed(lambda p=program, a=axis: p.lower(holder[a]).compile())[0]
        compiled[axis] = program.lower(holder[axis]).compile()

    def run(side: str) -> None:
        for _ in range(args.members if side == "alone" else 1):
            holder[side], _ = compiled[side](holder[side])
        jax.block_until_ready(holder[side])

    for side in compiled:
        run(side)  # warm-up: first calls
    steps = alone.steps_per_chunk * seeds * args.members
    print(f"{cpu_description()}; JAX {jax.__version__} on {jax.default_backend()}")
    print(f"overrides: {' '.join(args.overrides) or '(defaults)'}; {args.members} members")
    print(
        f"compile: alone {compile_s['alone']:.1f} s, fused group {compile_s[trained]:.1f} s "
        f"(members {trained}{' ' + str(sizes) if trained == 'parts' else ''}, what "
        f"hydra/launcher=fused trains here), {compile_s[other]:.1f} s "
        f"(members {other})"
    )
    print(f"each side trains {steps} env steps a round ({alone.plan.chunking} per run)")
    print(
        f"| round | alone wall s | fused ({trained}) wall s | ratio | {other} ratio | "
        f"alone CPU s | fused ({trained}) CPU s | ratio | {other} ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for number in range(args.rounds):
        a, g, o = (
            timed(lambda: run("alone")),
            timed(lambda: run(trained)),
            timed(lambda: run(other)),
        )
        print(
            f"| {number + 1} | {a[0]:.1f} | {g[0]:.1f} | {g[0] / a[0]:.2f} | {o[0] / a[0]:.2f} | "
            f"{a[1]:.1f} | {g[1]:.1f} | {g[1] / a[1]:.2f} | {o[1] / a[1]:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
