"""Environment-only throughput: the JAX POPGym ports vs the ``popgym`` package, in one run.

For every registered env that declares a popgym reference (the ports, at one difficulty), or the
envs named by ``--envs`` (port names, or any registered name such as ``craftax/classic_symbolic``;
envs without a reference get the JAX column only):

* **JAX**: ``num_envs`` copies (default 4096) under ``jax.vmap`` with auto-reset
  (:class:`~stoixlite.envs.wrappers.AutoResetWrapper`), uniformly random actions drawn inside the
  loop, ``steps`` iterations of one jitted ``lax.scan``. Steps per second = ``num_envs * steps``
  divided by the wall time of a second call (the first call compiles; compile time is reported
  separately).
* **popgym**: one numpy env (the declared reference class at that difficulty) stepped in a loop
  with ``action_space.sample()`` actions, resetting when an episode ends, for ``ref_steps`` steps.

Prints a markdown table and writes JSON (``--out``)::

    python -m stoixlite.benchmark envs --out env_bench.json
    python -m stoixlite.benchmark envs --envs repeat_previous minesweeper --num-envs 1024
    python -m stoixlite.benchmark envs --envs craftax/classic_symbolic --num-envs 64
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp

from stoixlite.cli.args import OneLineArgumentParser, fail, output_file_error
from stoixlite.envs.registry import available_envs, env_spec, make, missing_modules
from stoixlite.envs.wrappers import ENV_AXIS, AutoResetWrapper, VmapWrapper
from stoixlite.results.machine import cpu_model
from stoixlite.results.random_policy import uniform_actions

PROG = "python -m stoixlite.benchmark envs"


def bench_jax(name: str, difficulty: str, num_envs: int, steps: int, repeats: int) -> dict:
    raw = make(name, difficulty=difficulty) if env_spec(name).difficulties else make(name)
    env = VmapWrapper(AutoResetWrapper(raw, batch_axis=ENV_AXIS), num_envs)

    @jax.jit
    def run(key):
        state, _ = env.reset(key)

        def body(carry, _):
            state, key, total = carry
            key, sub = jax.random.split(key)
            state, ts = env.step(state, uniform_actions(env.action_space, sub, num_envs))
            # Consume reward, observation and step type so XLA cannot drop any of the env's work.
            used = ts.reward.sum() + ts.observation.sum() + ts.step_type.sum()
            return (state, key, total + used), None

        carry, _ = jax.lax.scan(body, (state, key, jnp.float32(0.0)), None, length=steps)
        return carry[2]

    start = time.perf_counter()
    jax.block_until_ready(run(jax.random.PRNGKey(0)))
    compile_s = time.perf_counter() - start
    best = float("inf")
    for i in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.PRNGKey(i + 1)))
        best = min(best, time.perf_counter() - start)
    return {"jax_sps": num_envs * steps / best, "jax_seconds": best, "compile_seconds": compile_s}


def reference_class(name: str, difficulty: str):
    """The popgym class the port ``name`` declares as its reference, at ``difficulty``."""
    return env_spec(name).reference.popgym_class(difficulty)


def bench_reference(name: str, difficulty: str, ref_steps: int) -> dict:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = reference_class(name, difficulty)()
    except Exception as err:  # e.g. the navigation extra (mazelib) is not installed
        return {"popgym_sps": None, "popgym_error": f"{type(err).__name__}: {err}"}
    env.action_space.seed(0)
    env.reset(seed=0)
    episodes = 0
    start = time.perf_counter()
    for _ in range(ref_steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
            episodes += 1
    seconds = time.perf_counter() - start
    return {"popgym_sps": ref_steps / seconds, "popgym_episodes": episodes}


def hardware() -> dict:
    """The CPU, its cores and JAX's backend and devices, for the results."""
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "jax_version": jax.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    """The tool (``python -m stoixlite.benchmark envs``): 0, or exit 2 on bad input and 1 when
    the results cannot be written."""
    parser = OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--envs",
        nargs="*",
        help="port names or registered env names (default: every popgym/* port)",
    )
    parser.add_argument("--difficulty", default="easy", choices=["easy", "medium", "hard"])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=256, help="scan length of the JAX loop")
    parser.add_argument("--repeats", type=int, default=3, help="timed JAX calls (best is kept)")
    parser.add_argument("--ref-steps", type=int, default=5000, help="popgym steps per env")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    for key in ("num_envs", "steps", "repeats", "ref_steps"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} {getattr(args, key)} must be at least 1")
    if args.out and (error := output_file_error(args.out)):
        parser.error(error)

    names = [n for n in available_envs() if env_spec(n).reference is not None]  # the ports
    if args.envs:
        ports = {n.split("/", 1)[1]: n for n in names}
        unknown = [e for e in args.envs if e not in ports and e not in available_envs()]
        if unknown:
            parser.error(
                f"--envs: {unknown} are neither POPGym ports nor registered envs; choose from "
                f"{list(ports)} or {available_envs()}"
            )
        names = [ports.get(e, e) for e in args.envs]
        missing = [f"{n} needs {m}" for n in names for m in missing_modules(n)]
        if missing:
            parser.error(f"--envs: {'; '.join(missing)} (not installed)")
    rows = []
    for name in names:
        row = {"env": name, "difficulty": args.difficulty, "num_envs": args.num_envs}
        row.update(bench_jax(name, args.difficulty, args.num_envs, args.steps, args.repeats))
        if env_spec(name).reference is not None:
            row.update(bench_reference(name, args.difficulty, args.ref_steps))
        row["speedup"] = row["jax_sps"] / row["popgym_sps"] if row.get("popgym_sps") else None
        rows.append(row)
        print(
            f"{name}: jax {row['jax_sps']:.3g} sps, popgym {row.get('popgym_sps') or 0:.3g} sps",
            flush=True,
        )

    result = {"hardware": hardware(), "settings": vars(args), "results": rows}
    print()
    print(
        f"Hardware: {result['hardware']['cpu']} ({result['hardware']['cpu_count']} cores), "
        f"JAX {result['hardware']['jax_backend']}"
    )
    print()
    header = f"JAX steps/s (x{args.num_envs} envs) | compile s | popgym steps/s (1 env)"
    print(f"| env | {header} | speedup |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        ref = f"{r['popgym_sps']:,.0f}" if r.get("popgym_sps") else "n/a"
        speed = f"{r['speedup']:,.0f}x" if r.get("speedup") else "n/a"
        print(
            f"| {r['env']} | {r['jax_sps']:,.0f} | {r['compile_seconds']:.1f} | {ref} | {speed} |"
        )
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(result, indent=2))
        except OSError as err:
            fail(f"the results (printed above) could not be written to {args.out}: {err}", 1, PROG)
    return 0
