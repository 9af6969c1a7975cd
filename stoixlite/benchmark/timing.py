"""What a benchmark row measures: timed calls of a compiled program, its memory, the process's
peak memory, and the return of the training episodes."""

from __future__ import annotations

import time


def program_memory(compiled) -> dict[str, float] | None:
    """XLA's memory analysis of a compiled program, in MiB: ``temp``, ``argument``, ``output``,
    ``alias`` (outputs that reuse an argument's buffer: the donated learner state) and
    ``program`` = argument + temp + output - alias, the device memory it needs while it runs;
    ``None`` where the backend gives no analysis."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    mib = {
        k: getattr(analysis, f"{k}_size_in_bytes") / 2**20
        for k in ("temp", "argument", "output", "alias")
    }
    mib["program"] = mib["argument"] + mib["temp"] + mib["output"] - mib["alias"]
    return mib


def time_chunks(learn_chunk, state, repeats: int) -> tuple[list[float], object, dict]:
    """Warm-up call, then ``repeats`` timed calls; returns (seconds per call, state, metrics).
    With ``repeats == 0`` (``--compile-only``) nothing runs: ``([], state, None)``."""
    import jax

    if repeats == 0:
        return [], state, None
    state, metrics = learn_chunk(state)  # warm-up
    jax.block_until_ready(metrics)
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        state, metrics = learn_chunk(state)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - tic)
    return times, state, metrics


def final_train_return(metrics: dict) -> float:
    """The mean return of the training episodes that ended in a chunk's ``metrics`` (NaN where
    none did)."""
    import numpy as np

    count = np.asarray(metrics["train/episodes"], np.float64)
    returns = np.asarray(metrics["train/episode_return"], np.float64)
    return float((returns * count).sum() / count.sum()) if count.sum() else float("nan")


def peak_memory_mb() -> tuple[float, float | None]:
    """``(process peak RSS, device peak)`` in MiB so far: the RSS from ``resource.getrusage``
    (the host side; it includes the ~0.3 GiB JAX runtime), the device's ``peak_bytes_in_use``
    where its backend reports one (GPU, TPU), else ``None``."""
    import resource

    import jax

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device = jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return rss, stats["peak_bytes_in_use"] / 2**20
    return rss, None
