"""A benchmark row in its own process: the worker (``python -m stoixlite.benchmark --worker
SPEC``) that compiles and times one row, and the parent's side that launches it and checks the
rows before any runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from stoixlite.benchmark.program_suite import program_row
from stoixlite.benchmark.purejaxrl import run_reference_row
from stoixlite.benchmark.rows import (
    REFERENCE_MODULES,
    build_stoixlite_run,
    describe,
    stoixlite_overrides,
)
from stoixlite.benchmark.timing import (
    final_train_return,
    peak_memory_mb,
    program_memory,
    time_chunks,
)
from stoixlite.cli.args import checked_run_config, compile_for_real, last_error_line


def run_stoixlite_row(spec: dict) -> tuple[int, float, list[float], float, int, dict | None]:
    """Worker for a stoixlite row: ``(steps per chunk, compile s, times, final return,
    devices, program memory)``; the steps of a chunk are those of all its seeds."""
    exp = build_stoixlite_run(spec)
    state, _ = exp.init()  # laid out on the run's devices
    tic = time.perf_counter()
    learn_chunk = exp.learn.lower(state).compile()
    compile_s = time.perf_counter() - tic
    times, _, metrics = time_chunks(learn_chunk, state, spec["repeats"])
    final = final_train_return(metrics) if times else float("nan")
    memory = program_memory(learn_chunk)
    steps = exp.steps_per_chunk * exp.config.arch.num_seeds
    return steps, compile_s, times, final, exp.placement.num_devices, memory


def run_row(spec: dict) -> dict:
    """Worker: compile and time the learn chunk for one configuration (runs in a subprocess).

    A timed call is one compiled chunk of ``updates`` updates (the same program training runs);
    it runs ``repeats`` times after one warm-up call. The final return is the mean return of
    the training episodes that ended in the last timed chunk.
    """
    import jax

    compile_for_real()  # the compile seconds of the row are a compilation, not a cache load
    if spec.get("measure") == "programs":
        return program_row(spec)
    if spec["network"] in REFERENCE_MODULES:
        steps, compile_s, times, final, memory = run_reference_row(spec)
        devices = 1
    else:
        steps, compile_s, times, final, devices, memory = run_stoixlite_row(spec)
    peak_rss_mb, device_peak = peak_memory_mb()
    return {
        **{
            k: spec[k]
            for k in ("network", "env", "num_envs", "rollout_length", "epochs", "minibatches")
        },
        "label": spec.get("label", ""),
        "devices": devices,
        "sps_all": [steps / t for t in times],
        "compile_s": compile_s,
        "peak_rss_mb": peak_rss_mb,
        "peak_device_mb": device_peak,
        "program_mb": None if memory is None else memory["program"],
        "program_memory_mb": memory,
        "final_return": final,
        "load_avg": os.getloadavg()[0],
        "backend": jax.default_backend(),
    }


def worker_env(host_devices: int | None = None) -> dict[str, str]:
    """The environment of the worker subprocesses (``--host-devices``: forced CPU devices)."""
    env = dict(os.environ)
    if host_devices:
        forced = f"--xla_force_host_platform_device_count={host_devices}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {forced}"
    return env


def run_worker(flag: str, payload: object, host_devices: int | None = None):
    """The benchmark tool run as a worker subprocess (``flag`` with ``payload`` as JSON)."""
    return subprocess.run(
        [sys.executable, "-m", "stoixlite.benchmark", flag, json.dumps(payload)],
        capture_output=True,
        text=True,
        env=worker_env(host_devices),
    )


def launch(spec: dict, host_devices: int | None = None) -> dict:
    """One row in a worker process of its own (its peak memory is its own)."""
    proc = run_worker("--worker", spec, host_devices)
    if proc.returncode != 0:
        return {**spec, "error": last_error_line(proc.stderr, f"failed (exit {proc.returncode})")}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_rows(specs: list[dict]) -> list[dict]:
    """Worker of :func:`launch_together`: each row in turn in this process (a failing row is
    kept with its error line)."""
    results = []
    for spec in specs:
        try:
            results.append(run_row(spec))
        except Exception as err:  # noqa: BLE001 (the row's error is the result)
            results.append({**spec, "error": f"{type(err).__name__}: {err}".splitlines()[0]})
    return results


def launch_together(specs: list[dict], host_devices: int | None = None) -> list[dict]:
    """The rows in one worker process, one after the other: no start-up per row (for a test of
    a suite at small sizes); a row's peak memory is then the process's up to that row."""
    proc = run_worker("--worker-rows", specs, host_devices)
    if proc.returncode != 0:
        error = last_error_line(proc.stderr, f"failed (exit {proc.returncode})")
        return [{**spec, "error": error} for spec in specs]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row_error(specs: list[dict]) -> str | None:
    """Worker: the first row whose config is invalid (:func:`stoixlite.cli.args.checked_run_config`,
    as ``rec_ppo`` would refuse it) or that asks for more devices than there are, as one line;
    ``None`` when every row can run. Runs in a subprocess like the rows, so that this process
    never starts an accelerator backend (and holds none of its memory while the rows run)."""
    wanted = max((spec.get("devices") or 1 for spec in specs), default=1)
    if wanted > 1:
        import jax

        have = jax.device_count()
        if wanted > have:
            return (
                f"--devices {wanted}: this machine has {have} {jax.default_backend()} device(s) "
                "(--host-devices N forces N CPU devices)"
            )
    seen: set[tuple[str, ...]] = set()
    for spec in specs:
        if spec["network"] in REFERENCE_MODULES:
            continue
        overrides = stoixlite_overrides(spec)
        if tuple(overrides) in seen:
            continue
        seen.add(tuple(overrides))
        _, error = checked_run_config(overrides)
        if error is not None:
            return f"row {describe(spec)}: {error}"
    return None


def check_rows(specs: list[dict], host_devices: int | None = None) -> str | None:
    """:func:`row_error` of ``specs``, run in a subprocess with the workers' environment."""
    proc = run_worker("--check-rows", specs, host_devices)
    if proc.returncode != 0:
        return "checking the rows failed: " + last_error_line(proc.stderr)
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    return verdict["error"]
