"""Stand-ins for the memory models' time recurrences (one elementwise pass): an ablation bound.

``python -m stoixlite.benchmark profile --free-recurrence`` traces the update a second time inside
:func:`free_recurrence`, which replaces the function that runs a model's recurrence over the
``T`` steps of a training sequence (the sequential strategy, the CPU default) by a stand-in of
the same signature and output shapes that costs one elementwise pass over its inputs and
passes the carry through. Everything else (the model's projections, gates, readout and norms,
the heads, the T = 1 rollout step, the optimiser) runs as in training, and every input of the
recurrence stays in use (so XLA keeps the layers that produce it). The stand-in's update time is
therefore a lower bound for *any* implementation of that recurrence with the model's other
layers unchanged: if a throughput target is out of reach even there, no faster scan reaches it
(docs/benchmarks.md, "What the recurrences cost: the free-recurrence bound").

The stand-ins compute nothing meaningful; they exist only for this measurement and are never
used in training.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import jax
import jax.numpy as jnp

Array = jax.Array


def _decay_scan(decay: Array, elems: Array, start: Array, carry: Array) -> Array:
    """For :func:`stoixlite.networks.memory.decay_scan.decay_scan`: ``[T, B, *S]`` states."""
    if elems.shape[2:] != decay.shape:  # FFM: elements repeated over the last state axis
        elems = jnp.broadcast_to(elems[..., None], (*elems.shape, decay.shape[-1]))
    return elems.astype(decay.dtype) * decay + carry.astype(decay.dtype)[None]


def _selective_scan(a, state, dt, du, b, c, start):
    """For mamba's ``selective_scan``: ``(state, y [T, B, E])``."""
    return state, du + dt * jnp.sum(b * c, axis=-1, keepdims=True)


def _mlstm_chunks(carry, q, k, v, i_pre, log_f, start, chunk_size):
    """For mlstm's ``mlstm_chunks``: ``(carry, h [T, B, heads, d])``."""
    return carry, q * k + v * (i_pre + log_f)[..., None]


def _delta_rule_chunks(carry, q, k, v, log_alpha, beta, start, chunk_size):
    """For deltanet's ``delta_rule_chunks``: ``(carry, o [T, B, heads, d])``."""
    return carry, q * k + v * (log_alpha + beta)[..., None]


def _linear_attention_chunks(carry, q, k, v, start, chunk_size, eps):
    """For linear attention's ``linear_attention_chunks``: ``(carry, o [T, B, heads, d_v])``."""
    return carry, v * jnp.sum(q * k, axis=-1, keepdims=True)


_DECAY = ("stoixlite.networks.memory.lru", "decay_scan", _decay_scan)
# network name -> (module, attribute, stand-in): the function the model's T > 1 call looks up
STANDINS: dict[str, tuple[str, str, Callable]] = {
    "memoroid": ("stoixlite.networks.memory.ffm", "decay_scan", _decay_scan),
    "ffm": ("stoixlite.networks.memory.ffm", "decay_scan", _decay_scan),
    "lru": _DECAY,
    "s5": _DECAY,
    "mamba": ("stoixlite.networks.memory.mamba", "selective_scan", _selective_scan),
    "mlstm": ("stoixlite.networks.memory.mlstm", "mlstm_chunks", _mlstm_chunks),
    "deltanet": ("stoixlite.networks.memory.deltanet", "delta_rule_chunks", _delta_rule_chunks),
    "linear_attention": (
        "stoixlite.networks.memory.linear_attention",
        "linear_attention_chunks",
        _linear_attention_chunks,
    ),
}


def standin_error(network: str) -> str | None:
    """One line if ``network`` has no stand-in, else ``None``."""
    if network in STANDINS:
        return None
    allowed = ", ".join(STANDINS)
    return f"--free-recurrence: no stand-in for network {network!r} (allowed: {allowed})"


@contextmanager
def free_recurrence(network: str) -> Iterator[list[int]]:
    """Within the block, ``network``'s recurrence function is the stand-in (restored after).

    Yields a one-element list counting the stand-in's calls while tracing, so the caller can
    check that the traced program used it (a model run with the associative strategy does not).
    """
    module_name, attr, standin = STANDINS[network]
    module = importlib.import_module(module_name)
    original = getattr(module, attr)
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return standin(*args, **kwargs)

    setattr(module, attr, counted)
    try:
        yield calls
    finally:
        setattr(module, attr, original)
