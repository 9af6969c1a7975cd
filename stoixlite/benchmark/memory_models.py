"""Training-step benchmark of the memory models (forward + backward, jitted).

For each model (every registered one by default; models with a ``scan`` option under both
strategies) and sequence length T:
one jitted ``value_and_grad`` of ``sum(w * y)`` w.r.t. the parameters on ``x [T, B, F]`` with
random episode starts (p = 1/64), from ``initialize_carry``. Compile time is measured
separately; the step time is the median of several runs after compilation. Each configuration
runs in its own subprocess so that its peak memory is its own: ``jax.devices()[0].memory_stats()``
(``peak_bytes_in_use``) where the backend provides it (GPU/TPU), else the process peak RSS
(``resource.getrusage``, includes the ~0.3 GB JAX runtime).

Also measured: the rollout step (T = 1, forward only), the latency-bound hot loop of PPO
(``--modes train`` leaves it out). The parent process never starts a JAX backend (on a GPU it
would hold the memory the subprocesses need); the backend and device come from the subprocesses.

    python -m stoixlite.benchmark memory                  # T in 64, 256, 1024, 4096
    python -m stoixlite.benchmark memory --quick          # T in 16, 64 (smoke run)
    python -m stoixlite.benchmark memory --out bench.json --models gru ffm
    python -m stoixlite.benchmark memory --lengths 1024 --modes train  # the T = 1024 GPU table

Prints markdown tables and writes JSON (``--out``). Configurations whose memory would exceed
``--max-state-mb`` are skipped and reported as such (the estimate: T copies of the carry for the
scanned models, e.g. linear attention at T = 4096; the ``[B, heads, T, M + T]`` score matrices of
every layer for windowed attention, which trains in parallel over T). ``--scans sequential``
measures only one strategy of the models that have both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from stoixlite.benchmark.timing import peak_memory_mb
from stoixlite.cli.args import (
    OneLineArgumentParser,
    compile_for_real,
    fail,
    last_error_line,
    output_file_error,
)
from stoixlite.results.machine import cpu_model

PROG = "python -m stoixlite.benchmark memory"


def _registry():
    from stoixlite.networks import memory

    return memory


def default_models() -> list[str]:
    """Every registered model except ``mlp`` (no memory), aliases once (``memoroid`` = ``ffm``)."""
    memory = _registry()
    seen, names = set(), []
    for name in memory.available_memories():
        cls = memory.memory_class(name)
        if cls not in seen and name not in ("mlp", "memoroid"):
            seen.add(cls)
            names.append(name)
    return names


def scans(name: str) -> tuple[str, ...]:
    """Both scan strategies for models with a ``scan`` option, else ``("-",)``."""
    if "scan" in _registry().memory_fields(name):
        return ("associative", "sequential")
    return ("-",)


def _state_floats(model, batch: int) -> int:
    """Floats (complex counts 2) in one step's carry, all layers."""
    import jax
    import jax.numpy as jnp

    total = 0
    # Shapes only (eval_shape): the parent process must not start a backend.
    carry = jax.eval_shape(lambda: model.initialize_carry(batch))
    for leaf in jax.tree_util.tree_leaves(carry):
        total += leaf.size * (2 if jnp.iscomplexobj(leaf) else 1)
    return total


def run_one(name: str, scan: str, length: int, batch: int, hidden: int, mode: str, reps: int):
    """Measure one configuration in this process; returns a result dict."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from stoixlite.networks.memory import build_memory

    compile_for_real()  # compile_s is a compilation, not a cache load
    kwargs = {"hidden_size": hidden}
    if scan != "-":
        kwargs["scan"] = scan
    model = build_memory(name, **kwargs)
    kx, ks, kw, kp = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(kx, (length, batch, hidden), jnp.float32)
    start = jax.random.bernoulli(ks, 1.0 / 64, (length, batch)).at[0].set(True)
    w = jax.random.normal(kw, (length, batch, hidden), jnp.float32)
    carry = model.initialize_carry(batch)
    params = jax.jit(model.init)(kp, carry, (x, start))

    if mode == "train":

        @jax.jit
        def step(p, x):
            def loss(p):
                return jnp.sum(w * model.apply(p, carry, (x, start))[1])

            return jax.value_and_grad(loss)(p)

    else:

        @jax.jit
        def step(p, x):
            return model.apply(p, carry, (x, start))

    t0 = time.perf_counter()
    jax.block_until_ready(step(params, x))
    compile_s = time.perf_counter() - t0
    times = []
    t_end = time.perf_counter() + 20.0
    while len(times) < reps or (len(times) < 3 * reps and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        jax.block_until_ready(step(params, x))
        times.append(time.perf_counter() - t0)
        if len(times) >= reps and time.perf_counter() > t_end:
            break
    rss_mb, device_mb = peak_memory_mb()
    if device_mb is not None:
        peak_mb, source = device_mb, "device peak_bytes_in_use"
    else:
        peak_mb, source = rss_mb, "process RSS"
    return {
        "model": name,
        "scan": scan,
        "T": length,
        "batch": batch,
        "hidden": hidden,
        "mode": mode,
        "ms": float(np.median(times) * 1e3),
        "ms_min": float(np.min(times) * 1e3),
        "runs": len(times),
        "compile_s": compile_s,
        "peak_mb": peak_mb,
        "memory_source": source,
        "state_mb": _state_floats(model, batch) * 4 * length / 2**20,
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind),
        "jax": jax.__version__,
    }


def _configs(models, lengths, only_scans=None, modes=("rollout", "train")):
    """``(model, scan, T, mode)`` of every configuration to measure, in order."""
    for name in models:
        for scan in scans(name):
            if only_scans and scan != "-" and scan not in only_scans:
                continue
            if "rollout" in modes:
                yield name, scan, 1, "rollout"
            if "train" in modes:
                for length in lengths:
                    yield name, scan, length, "train"


def _estimate_state_mb(
    name: str, length: int, batch: int, hidden: int, scan: str = "sequential"
) -> float:
    from stoixlite.networks.memory import build_memory
    from stoixlite.networks.memory.attention import WindowedAttention

    model = build_memory(name, hidden_size=hidden)
    if isinstance(model, WindowedAttention):
        # Windowed attention trains in parallel over the T steps: what grows with T are the
        # score matrices [B, heads, T, M + T] per layer, not T copies of the cache.
        slots = model.memory_length + length
        floats = model.num_layers * batch * model.num_heads * length * slots
        return floats * 4 / 2**20
    chunk = getattr(model, "chunk_size", None)
    if chunk and scan != "associative":
        # Chunkwise forms (mlstm, deltanet) form the state once per chunk, not per step.
        return _state_floats(model, batch) * 4 * -(-length // chunk) / 2**20
    return _state_floats(model, batch) * 4 * length / 2**20


def _pivot(results, lengths, key, fmt) -> str:
    rows = {}
    for r in results:
        if r.get("mode") != "train":
            continue
        cell = fmt(r[key]) if key in r else r.get("status", "?")
        rows.setdefault((r["model"], r["scan"]), {})[r["T"]] = cell
    head = "| model | scan | " + " | ".join(f"T={t}" for t in lengths) + " |"
    sep = "|---|---|" + "---:|" * len(lengths)
    body = [
        f"| {m} | {s} | " + " | ".join(cells.get(t, "") for t in lengths) + " |"
        for (m, s), cells in rows.items()
    ]
    return "\n".join([head, sep, *body])


def _rollout_table(results) -> str:
    lines = ["| model | scan | T=1 forward ms | compile s |", "|---|---|---:|---:|"]
    for r in results:
        if r.get("mode") == "rollout":
            ms = f"{r['ms']:.3f}" if "ms" in r else r.get("status", "?")
            comp = f"{r['compile_s']:.2f}" if "compile_s" in r else ""
            lines.append(f"| {r['model']} | {r['scan']} | {ms} | {comp} |")
    return "\n".join(lines)


def settings_error(models: list[str], hidden: int) -> str | None:
    """One line for the first model that cannot be built at width ``hidden`` (its
    ``config_errors``, as the run config's parser reports them), else ``None``."""
    memory = _registry()
    for name in models:
        kwargs = {"hidden_size": hidden}
        for scan in scans(name):
            if scan != "-":
                kwargs["scan"] = scan
            for key, value, allowed in memory.memory_config_errors(name, kwargs):
                return f"--hidden {hidden} does not suit model {name!r}: {key}={value!r} {allowed}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="T in 16, 64 and fewer runs")
    ap.add_argument("--lengths", type=int, nargs="*", default=None)
    ap.add_argument("--models", nargs="*", default=None, help="default: every registered model")
    ap.add_argument(
        "--scans",
        nargs="+",
        choices=("associative", "sequential"),
        default=None,
        help="only these scan strategies of the models that have both (default: both)",
    )
    ap.add_argument(
        "--modes",
        nargs="+",
        choices=("rollout", "train"),
        default=("rollout", "train"),
        help="rollout: the T = 1 forward step; train: forward + backward at each --lengths",
    )
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5, help="minimum timed runs per configuration")
    ap.add_argument("--max-state-mb", type=float, default=1024.0)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per configuration")
    ap.add_argument("--out", type=str, default=None, help="write JSON results here")
    ap.add_argument(
        "--single", nargs=4, metavar=("MODEL", "SCAN", "T", "MODE"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    known = _registry().available_memories()
    for name in args.models or ():
        if name not in known:
            ap.error(f"unknown model {name!r}; choose from {', '.join(sorted(known))}")
    sizes = {"lengths": args.lengths or [], "batch": [args.batch], "hidden": [args.hidden]}
    sizes["reps"] = [args.reps]
    for key, values in sizes.items():
        for v in values:
            if v < 1:
                ap.error(f"--{key} {v} must be at least 1")
    if not args.max_state_mb > 0:  # NaN too; inf: no limit
        ap.error(f"--max-state-mb {args.max_state_mb} must be positive (inf: no limit)")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        ap.error(f"--timeout {args.timeout} must be a finite number of seconds > 0")

    if args.single:
        name, scan, length, mode = args.single
        res = run_one(name, scan, int(length), args.batch, args.hidden, mode, args.reps)
        print("RESULT " + json.dumps(res))
        return 0

    models = args.models or default_models()
    if error := settings_error(models, args.hidden):
        ap.error(error)
    if args.out and (error := output_file_error(args.out)):
        ap.error(error)

    lengths = args.lengths or ([16, 64] if args.quick else [64, 256, 1024, 4096])
    reps = 3 if args.quick else args.reps
    # This process never starts a JAX backend: on a GPU it would hold the memory the
    # configurations' subprocesses allocate (JAX preallocates most of the card). The backend,
    # device and JAX version come from the subprocesses' results.
    hardware = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(f"hardware: {hardware}", flush=True)
    results = []
    for name, scan, length, mode in _configs(models, lengths, args.scans, args.modes):
        tag = f"{name:16s} {scan:11s} {mode:7s} T={length:<5d}"
        try:
            state_mb = _estimate_state_mb(name, length, args.batch, args.hidden, scan)
        except Exception as exc:  # noqa: BLE001 - the model cannot be built: a failed row
            res = {"model": name, "scan": scan, "T": length, "mode": mode, "status": "failed"}
            res["error"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"{tag} failed: {res['error']}", flush=True)
            results.append(res)
            continue
        if state_mb > args.max_state_mb:
            res = {"model": name, "scan": scan, "T": length, "mode": mode}
            res["status"] = f"skipped (states {state_mb:.0f} MB)"
            print(f"{tag} {res['status']}", flush=True)
            results.append(res)
            continue
        cmd = [sys.executable, *PROG.split()[1:], "--single", name, scan, str(length), mode]
        cmd += ["--batch", str(args.batch), "--hidden", str(args.hidden), "--reps", str(reps)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not line:
                raise RuntimeError(f"rc={proc.returncode}: {last_error_line(proc.stderr)}")
            res = json.loads(line[-1][len("RESULT ") :])
            hardware.update({k: res.pop(k) for k in ("backend", "device", "jax")})
            print(
                f"{tag} {res['ms']:10.2f} ms  peak {res['peak_mb']:8.0f} MB  "
                f"compile {res['compile_s']:.1f} s  ({res['runs']} runs)",
                flush=True,
            )
        except (subprocess.TimeoutExpired, RuntimeError) as exc:
            res = {"model": name, "scan": scan, "T": length, "mode": mode, "status": "failed"}
            res["error"] = (
                f"timed out after {args.timeout:g} s (--timeout)"
                if isinstance(exc, subprocess.TimeoutExpired)
                else str(exc)[:300]
            )
            print(f"{tag} failed: {res['error']}", flush=True)
        results.append(res)

    print(f"\nhardware: {hardware}")
    print("\n### Training step (forward + backward), ms, median\n")
    print(_pivot(results, lengths, "ms", lambda v: f"{v:.1f}"))
    print("\n### Peak memory, MB\n")
    print(_pivot(results, lengths, "peak_mb", lambda v: f"{v:.0f}"))
    print("\n### Rollout step (T = 1, forward only)\n")
    print(_rollout_table(results))
    if args.out:
        payload = {
            "hardware": hardware,
            "batch": args.batch,
            "hidden": args.hidden,
            "lengths": lengths,
            "results": results,
        }
        try:
            Path(args.out).write_text(json.dumps(payload, indent=2))
        except OSError as err:
            fail(
                f"the results (printed above) could not be written to {args.out}: {err}", 1, ap.prog
            )
        print(f"\nwrote {args.out}")
    failed = [r for r in results if r.get("status") == "failed"]
    if failed:
        first = failed[0]
        fail(
            f"{len(failed)} of {len(results)} configurations failed; first: {first['model']} "
            f"{first['scan']} {first['mode']} T={first['T']}: {first['error']}",
            1,
            ap.prog,
        )
    return 0
