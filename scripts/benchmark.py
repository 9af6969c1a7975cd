"""Training throughput benchmark: env steps/s (compile excluded), compile time, peak memory.

Each row trains the real ``rec_ppo`` learn chunk (rollout + GAE + epochs x minibatches) in a fresh
subprocess, so peak memory is per row. Rows:

* the matrix ``--networks`` x ``--envs`` at ``--num-envs`` x ``--rollout-length`` (default: every
  registered memory model x {gymnax/CartPole-v1, popgym/repeat_previous}, 64 envs x 128 steps);
* reference rows at PureJaxRL ``ppo_rnn.py`` defaults: CartPole, GRU/embedding 128, 4 envs x 128
  steps, 4 epochs x 4 minibatches, 5e5 timesteps budget (and the same at 64 envs), to compare
  side by side with PureJaxRL and Stoix (figures in docs/benchmarks.md).

Usage::

    python scripts/benchmark.py                        # full table, JSON to benchmark_results.json
    python scripts/benchmark.py --networks gru memoroid --envs gymnax/CartPole-v1 --out r.json
    python scripts/benchmark.py --reference-only       # only the PureJaxRL-configuration rows
    python scripts/benchmark.py --networks gru --envs popgym/repeat_previous --no-reference \
        --num-envs 1024 --devices 1 2 4 8             # SPS per device count (arch.num_devices)
    python scripts/benchmark.py ... --devices 1 2 4 --host-devices 4
                                                       # forced CPU devices: correctness, not speed
    python scripts/benchmark.py --env-only [...]       # env throughput: every POPGym port vs popgym
                                                       # (arguments go to scripts/benchmark_envs.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REFERENCE_ROWS = [
    # PureJaxRL ppo_rnn.py defaults (CartPole-v1): 4 envs x 128 steps, 4 epochs x 4 minibatches.
    {
        "network": "gru",
        "env": "gymnax/CartPole-v1",
        "num_envs": 4,
        "label": "PureJaxRL ppo_rnn config",
    },
    {
        "network": "gru",
        "env": "gymnax/CartPole-v1",
        "num_envs": 64,
        "label": "PureJaxRL/Stoix 64 envs",
    },
    {
        "network": "mlp",
        "env": "gymnax/CartPole-v1",
        "num_envs": 4,
        "label": "feed-forward reference",
    },
    {
        "network": "mlp",
        "env": "gymnax/CartPole-v1",
        "num_envs": 64,
        "label": "feed-forward reference",
    },
    {"network": "memoroid", "env": "gymnax/CartPole-v1", "num_envs": 4, "label": "memoroid (FFM)"},
    {"network": "memoroid", "env": "gymnax/CartPole-v1", "num_envs": 64, "label": "memoroid (FFM)"},
]


def hardware() -> str:
    """CPU model (and GPU if JAX sees one), for the results table."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import jax

    devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    backend = jax.default_backend()
    return f"{model}, {os.cpu_count()} cores; JAX {jax.__version__} on {backend} ({devices})"


def run_row(spec: dict) -> dict:
    """Worker: compile and time the learn chunk for one configuration (runs in a subprocess)."""
    import resource

    import jax
    from hydra import compose, initialize_config_dir

    from stoixlite.rec_ppo import CONFIG_DIR
    from stoixlite.run.build import build_run

    steps_per_update = spec["num_envs"] * spec["rollout_length"]
    overrides = [
        f"env={spec['env']}",
        f"network={spec['network']}",
        f"arch.num_envs={spec['num_envs']}",
        f"system.rollout_length={spec['rollout_length']}",
        f"system.epochs={spec['epochs']}",
        f"system.num_minibatches={spec['minibatches']}",
        f"arch.total_timesteps={steps_per_update * spec['updates']}",
        "arch.num_evaluations=1",
        "network.hidden_size=128",
        "network.embed_size=128",
        "network.head_size=128",
        *([f"arch.num_devices={spec['devices']}"] if spec.get("devices") else []),
        *spec.get("overrides", []),
    ]
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("config", overrides=overrides)
    exp = build_run(cfg)
    state, _ = exp.init()  # laid out on the run's devices
    tic = time.perf_counter()
    learn_chunk = exp.learn.lower(state).compile()
    compile_s = time.perf_counter() - tic
    state, metrics = learn_chunk(state)  # warm-up
    jax.block_until_ready(metrics)
    times = []
    for _ in range(spec["repeats"]):
        tic = time.perf_counter()
        state, metrics = learn_chunk(state)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - tic)
    best = min(times)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device_peak = None
    stats = jax.devices()[0].memory_stats() if hasattr(jax.devices()[0], "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        device_peak = stats["peak_bytes_in_use"] / 2**20
    return {
        **{
            k: spec[k]
            for k in ("network", "env", "num_envs", "rollout_length", "epochs", "minibatches")
        },
        "label": spec.get("label", ""),
        "devices": exp.placement.num_devices,
        "sps": exp.steps_per_chunk / best,
        "sps_median": exp.steps_per_chunk / sorted(times)[len(times) // 2],
        "compile_s": compile_s,
        "peak_rss_mb": peak_rss_mb,
        "peak_device_mb": device_peak,
        "backend": jax.default_backend(),
    }


def launch(spec: dict, host_devices: int | None = None) -> dict:
    env = dict(os.environ)
    if host_devices:
        forced = f"--xla_force_host_platform_device_count={host_devices}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {forced}"
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        return {**spec, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown(rows: list[dict]) -> str:
    head = (
        "| network | env | envs x steps | devices | SPS (best) | SPS (median) | compile s "
        "| peak RSS MiB | note |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['network']} | {r['env']} | {r['num_envs']} | {r.get('devices') or '-'} "
                f"| error: {r['error']} |||||"
            )
            continue
        lines.append(
            f"| {r['network']} | {r['env']} | {r['num_envs']} x {r['rollout_length']} "
            f"| {r.get('devices', 1)} | {r['sps']:,.0f} | {r['sps_median']:,.0f} "
            f"| {r['compile_s']:.1f} | {r['peak_rss_mb']:,.0f} | {r['label']} |"
        )
    return "\n".join(lines)


def main() -> None:
    if "--env-only" in sys.argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchmark_envs import main as env_benchmark

        env_benchmark([a for a in sys.argv[1:] if a != "--env-only"])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--networks", nargs="*", default=None, help="default: all registered")
    parser.add_argument(
        "--envs", nargs="*", default=["gymnax/CartPole-v1", "popgym/repeat_previous"]
    )
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--updates", type=int, default=10, help="updates per timed chunk")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed chunks per row (best is reported)"
    )
    parser.add_argument("--reference-only", action="store_true")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument(
        "--devices", nargs="*", type=int, default=None, help="arch.num_devices of each row"
    )
    parser.add_argument(
        "--host-devices", type=int, default=None, help="force this many CPU devices (XLA_FLAGS)"
    )
    parser.add_argument("--out", default="benchmark_results.json")
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(run_row(json.loads(args.worker))))
        return

    from stoixlite.networks.memory import available_memories

    common = {
        "rollout_length": args.rollout_length,
        "epochs": args.epochs,
        "minibatches": args.minibatches,
        "updates": args.updates,
        "repeats": args.repeats,
    }
    specs = []
    if not args.reference_only:
        networks = args.networks or [m for m in available_memories() if m != "ffm"]
        specs += [
            {"network": n, "env": e, "num_envs": args.num_envs, **common}
            for e in args.envs
            for n in networks
        ]
    if not args.no_reference:
        registered = set(available_memories())
        specs += [
            {**common, **row, "rollout_length": 128, "epochs": 4, "minibatches": 4}
            for row in REFERENCE_ROWS
            if row["network"] in registered
        ]
    if args.devices:
        specs = [{**spec, "devices": d} for spec in specs for d in args.devices]
    rows = []
    for spec in specs:
        row = launch(spec, args.host_devices)
        rows.append(row)
        print(markdown([row]).splitlines()[-1], flush=True)
    result = {"hardware": hardware(), "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nHardware: {result['hardware']}\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
