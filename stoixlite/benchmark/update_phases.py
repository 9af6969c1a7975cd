"""Where one PPO update's time goes: the phases timed separately, interleaved, in one process.

Phases of ``stoixlite.ppo.learner.make_update``, each jitted on its own and run ``--updates``
times per call (a ``lax.scan``, like the learn chunk):

* ``rollout``: ``rollout_length`` steps of (network at T=1, env step) and the next values for
  GAE (``rollout.next_values``); its data are summed into the scanned carry, so that XLA cannot
  drop what only training reads (the critic's values, the stored observations);
* ``prepare``: GAE, cutting the sequences;
* ``epochs``: ``epochs x num_minibatches`` minibatch steps (shuffle/gather, forward, backward,
  optimiser);
* ``update``: the whole update as training runs it (the sum of the above plus fusion effects);
* ``minibatch gradient``: one minibatch's loss gradient alone, reported with XLA's count of its
  floating-point operations (exact for models without a loop over time: the attention memories,
  the MLPs; a loop body counts once).

Timings of all phases (and of PureJaxRL ppo.py's whole update with ``--purejaxrl``) are
interleaved over ``--rounds`` rounds and reported as medians, so machine load affects them
alike. ``--free-recurrence`` also times the epochs and the update with the memory's
recurrence over T steps swapped for one elementwise pass (``networks/memory/standins.py``): the
bound that no faster implementation of the recurrence can beat with the model's other layers
unchanged. ``--trace DIR`` also writes a ``jax.profiler`` trace of a few whole updates (open it with
TensorBoard or Perfetto).

Usage::

    python -m stoixlite.benchmark profile network=memoroid arch.num_envs=64 --purejaxrl
    python -m stoixlite.benchmark profile network=feedforward env=gymnax/CartPole-v1 \
        arch.num_envs=4
    python -m stoixlite.benchmark profile network=mamba env=gymnax/CartPole-v1 \
        arch.num_envs=64 --free-recurrence --rounds 2 --updates 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from stoixlite.cli.args import OneLineArgumentParser, compile_for_real, output_dir_error
from stoixlite.networks.memory.standins import free_recurrence, standin_error

PROG = "python -m stoixlite.benchmark profile"


def phase_programs(exp, updates: int) -> tuple[dict[str, Callable], object]:
    """Jitted phase functions (each scanning ``updates`` times) and their shared input state.

    The phases are the learner's own (:func:`stoixlite.ppo.learner.make_update_phases`, built
    with the run's config), so a model that keeps only the sequence-start carries
    (``system.rollout_carries``) is profiled with that rollout, as it trains.
    """
    from stoixlite.ppo.learner import make_update_phases
    from stoixlite.ppo.loss import ppo_loss
    from stoixlite.ppo.sequences import take_minibatch

    cfg, apply_fn = exp.ppo, exp.network.apply
    unroll = exp.config.system.rollout_unroll
    phases = make_update_phases(apply_fn, exp.env, cfg, rollout_unroll=unroll)
    state = exp.init_state(jax.random.PRNGKey(0), exp.hyper)
    _, data = jax.jit(phases.collect)(state)
    sequences, _ = jax.jit(phases.prepare)(data, state.hyper)

    def checksum(tree) -> jax.Array:  # keeps every output of a phase alive
        return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(tree))

    def repeat(step: Callable, s):
        return jax.lax.scan(lambda c, _: (step(c), None), s, None, length=updates)[0]

    def collect_kept(c):  # the rollout's data summed into the carry, so XLA keeps all of it
        s, total = c
        s, d = phases.collect(s)
        return s, total + checksum(d)

    programs = {
        "rollout": jax.jit(lambda s: repeat(collect_kept, (s, jnp.float32(0)))),
        "prepare": jax.jit(
            lambda d, h: jax.lax.map(lambda _: checksum(phases.prepare(d, h)), jnp.arange(updates))
        ),
        "epochs": jax.jit(lambda s, q: repeat(lambda c: phases.epochs(c, q)[0], s)),
        "update": jax.jit(lambda s: repeat(lambda c: exp.update(c)[0], s)),
    }
    args = {
        "rollout": (state,),
        "prepare": (data, state.hyper),
        "epochs": (state, sequences),
        "update": (state,),
    }
    # one minibatch step's gradient alone, on the first (unshuffled) minibatch
    grad_fn = jax.grad(lambda p, b, h: ppo_loss(p, apply_fn, b, cfg, h), has_aux=True)
    unshuffled = jnp.arange(sequences.start.shape[1])
    first = take_minibatch(sequences, unshuffled, 0, cfg.num_minibatches)
    programs["minibatch gradient"] = jax.jit(lambda p, b, h: grad_fn(p, b, h)[0])
    args["minibatch gradient"] = (state.params, first, state.hyper)
    return programs, args


FREE_UPDATE = "update, recurrence free"


def free_recurrence_programs(exp, updates: int, network: str, inputs: dict) -> dict:
    """The epochs and update phases compiled with ``network``'s recurrence as its stand-in
    (:func:`~stoixlite.networks.memory.standins.free_recurrence`); their inputs (the real
    phases') are added to
    ``inputs`` under the new labels."""
    jax.clear_caches()  # nothing traced with the real recurrence may be reused
    out = {}
    with free_recurrence(network) as calls:
        programs, _ = phase_programs(exp, updates)
        for name, label in (("epochs", "epochs, recurrence free"), ("update", FREE_UPDATE)):
            out[label] = programs[name].lower(*inputs[name]).compile()
            inputs[label] = inputs[name]
    if calls[0] == 0:
        raise SystemExit(
            f"error: --free-recurrence: {network}'s recurrence stand-in was not traced (it "
            "replaces the sequential strategy's loop: set network.scan=sequential)"
        )
    for label, fn in out.items():
        jax.block_until_ready(fn(*inputs[label]))
        print(f"compiled {label}", flush=True)
    return out


def flops(compiled) -> float | None:
    """XLA's count of floating-point operations of a compiled program (``None`` if the backend
    gives none). The body of a loop (``lax.scan``) is counted once, not once per iteration."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


def main(argv: list[str] | None = None) -> int:
    """The tool (``python -m stoixlite.benchmark profile``): 0, or exit 2 on bad input."""
    parser = OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides of configs/config.yaml (anywhere)"
    )
    parser.add_argument("--updates", type=int, default=8, help="updates per timed call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--purejaxrl", action="store_true", help="also time ppo.py's update")
    parser.add_argument("--trace", default=None, help="write a jax.profiler trace here")
    parser.add_argument(
        "--free-recurrence",
        action="store_true",
        help="also time epochs and update with the memory's recurrence as one elementwise pass",
    )
    args = parser.parse_intermixed_args(argv)
    for key in ("updates", "rounds"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} {getattr(args, key)} must be at least 1")

    from stoixlite.cli.args import checked_run_config
    from stoixlite.config.plan import plan_run
    from stoixlite.run.build import build_run

    cfg, error = checked_run_config(args.overrides)
    if error is not None:
        parser.error(error)
    if args.trace and (error := output_dir_error(args.trace, "--trace")):
        parser.error(error)
    if args.free_recurrence and (error := standin_error(cfg.network.name)):
        parser.error(error)
    compile_for_real()
    exp = build_run(plan_run(cfg))
    programs, inputs = phase_programs(exp, args.updates)
    if args.purejaxrl:
        from stoixlite.benchmark.peers.purejaxrl_ppo import Settings, build

        init, run_updates = build(
            Settings(
                num_envs=exp.ppo.num_envs,
                rollout_length=exp.ppo.rollout_length,
                epochs=exp.ppo.epochs,
                minibatches=exp.ppo.num_minibatches,
            )
        )
        programs["ppo.py update"] = jax.jit(lambda s: run_updates(s, args.updates)[0])
        inputs["ppo.py update"] = (init(jax.random.PRNGKey(0)),)
    compiled = {}
    for name, fn in programs.items():
        tic = time.perf_counter()
        compiled[name] = fn.lower(*inputs[name]).compile()
        print(f"compiled {name} in {time.perf_counter() - tic:.1f}s", flush=True)
        jax.block_until_ready(compiled[name](*inputs[name]))
    if args.free_recurrence:
        compiled.update(free_recurrence_programs(exp, args.updates, cfg.network.name, inputs))
    times: dict[str, list[float]] = {name: [] for name in compiled}
    for _ in range(args.rounds):
        for name, fn in compiled.items():
            tic = time.perf_counter()
            jax.block_until_ready(fn(*inputs[name]))
            times[name].append((time.perf_counter() - tic) / args.updates * 1e3)
    steps = exp.steps_per_update
    print(
        f"\n{cfg.network.name} on {cfg.env.name}, {exp.ppo.num_envs} x {exp.ppo.rollout_length}, "
        f"{exp.ppo.epochs} x {exp.ppo.num_minibatches} minibatches; median of {args.rounds}"
    )
    print("| phase | ms / update | SPS equivalent |\n|---|---:|---:|")
    for name, t in times.items():
        if name == "minibatch gradient":
            continue
        med = statistics.median(t)
        print(f"| {name} | {med:.2f} | {steps / med * 1e3:,.0f} |")
    if args.free_recurrence:
        free = statistics.median(times[FREE_UPDATE])
        print(
            f"\nwith the recurrence over training sequences free, the update takes {free:.2f} ms "
            f"({steps / free * 1e3:,.0f} SPS): no implementation of that recurrence exceeds this "
            "with the model's other layers and its rollout step as they are"
        )
    grad_ms = statistics.median(times["minibatch gradient"]) * args.updates
    grad_flops = flops(compiled["minibatch gradient"])
    counted = "not reported" if grad_flops is None else f"{grad_flops / 1e9:.2f} GFLOP"
    print(
        f"\none minibatch gradient (forward + backward, no optimiser): {grad_ms:.2f} ms, "
        f"{counted} (XLA's count; a loop body counts once, so exact only without scans)"
    )
    if args.trace:
        with jax.profiler.trace(args.trace):
            jax.block_until_ready(compiled["update"](*inputs["update"]))
        print(f"trace written to {args.trace}")
    return 0
