"""Small whole leaves of a checkpoint stored as one byte array: a save's cost in arrays.

Every array orbax writes costs a few hundred bytes of the process's memory for good: for each
array of each save orbax resolves a TensorStore key-value store spec to a dict
(``tensorstore_utils._build_ocdbt_kvstore_tspec``), and TensorStore (0.1.80 to 0.1.86 at
least) keeps an extra reference to every key and string value of the dicts its ``to_json``
returns; TensorStore's own per-array state adds about as much outside Python's heap. A learner
state has dozens of leaves (every parameter, optimiser moment, env state field), so a run that
saves a checkpoint every chunk grew by about 50 KiB a chunk. The number of arrays is ours to
choose: :func:`bundle` stores the small leaves that every device holds whole (replicated, or on
one device, in a single-process run) as one ``uint8`` array of their bytes, so a save writes one
array plus the leaves that are sharded or large; :func:`unbundle` cuts them out again, bit for
bit, onto the template's shardings.

Left as they are (each its own array, where it lives): leaves sharded over devices (each
process writes its own shards), leaves larger than :data:`BUNDLE_LEAF_MAX_BYTES` (copying them
to the host once more would cost memory), and every leaf of a multi-process run (orbax chooses
which process writes what). A checkpoint without a bundle (one written before bundling, or with
nothing to bundle) restores as before: the metadata of each bundled leaf holds its offset.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from stoixlite.tracking.state_arrays import leaf_name

BUNDLE_NAME = "bundle"  # never a leaf's name (``leaf_NNNNN``)
OFFSET_KEY = "bundle_offset"
BUNDLE_LEAF_MAX_BYTES = 4 * 2**20


def _nbytes(meta: dict[str, Any]) -> int:
    return math.prod(meta["shape"]) * np.dtype(meta["dtype"]).itemsize


def _bundles(value: Any, meta: dict[str, Any]) -> bool:
    """Whether a leaf goes into the bundle: small, and held whole by every device that has it
    (a host array, or a fully addressable, fully replicated ``jax.Array``)."""
    if _nbytes(meta) > BUNDLE_LEAF_MAX_BYTES:
        return False
    if isinstance(value, jax.Array):
        return value.is_fully_addressable and value.is_fully_replicated
    return True


def bundle(
    arrays: dict[str, Any], meta: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(arrays, meta)`` of :func:`stoixlite.tracking.state_arrays.pack_state` with the small
    whole leaves moved into one ``uint8`` array ``arrays[BUNDLE_NAME]`` (their bytes in leaf
    order, C order) and each one's byte offset in its metadata (``meta[i][OFFSET_KEY]``). The
    inputs are not changed; unchanged outputs when fewer than two leaves qualify or the run has
    several processes."""
    if jax.process_count() > 1:
        return arrays, meta
    names = [leaf_name(i) for i in range(len(meta))]
    chosen = [
        i for i, name in enumerate(names) if name in arrays and _bundles(arrays[name], meta[i])
    ]
    if len(chosen) < 2:
        return arrays, meta
    host = jax.device_get([arrays[names[i]] for i in chosen])
    parts, offsets, offset = [], {}, 0
    for i, value in zip(chosen, host, strict=True):
        part = np.ascontiguousarray(value, dtype=np.dtype(meta[i]["dtype"])).reshape(-1)
        parts.append(part.view(np.uint8))
        offsets[i], offset = offset, offset + part.nbytes
    inside = {names[i] for i in chosen}
    out = {name: value for name, value in arrays.items() if name not in inside}
    out[BUNDLE_NAME] = np.concatenate(parts)
    new_meta = [
        dict(m, **{OFFSET_KEY: offsets[i]}) if i in offsets else m for i, m in enumerate(meta)
    ]
    return out, new_meta


def bundled_size(meta: list[dict[str, Any]]) -> int:
    """Bytes of the bundle that ``meta`` describes (0: the checkpoint has none)."""
    return sum(_nbytes(m) for m in meta if OFFSET_KEY in m)


def bundle_targets(targets: dict[str, Any], meta: list[dict[str, Any]]) -> dict[str, Any]:
    """What to read: ``targets`` (one per stored leaf) with the bundled leaves replaced by one
    host ``uint8`` target of the bundle's size."""
    size = bundled_size(meta)
    if not size:
        return targets
    inside = {leaf_name(i) for i, m in enumerate(meta) if OFFSET_KEY in m}
    out = {name: target for name, target in targets.items() if name not in inside}
    out[BUNDLE_NAME] = np.zeros(size, np.uint8)
    return out


def unbundle(
    restored: dict[str, Any], targets: dict[str, Any], meta: list[dict[str, Any]]
) -> dict[str, Any]:
    """The arrays as :func:`pack_state` gave them: each bundled leaf cut out of
    ``restored[BUNDLE_NAME]`` with its saved shape and dtype, put on its target's sharding
    (``targets``: one per stored leaf, as :func:`~stoixlite.tracking.state_arrays.
    restore_targets` gives) or left a host array."""
    if BUNDLE_NAME not in restored:
        return restored
    blob = np.asarray(restored[BUNDLE_NAME])
    out = {name: value for name, value in restored.items() if name != BUNDLE_NAME}
    for i, m in enumerate(meta):
        if OFFSET_KEY not in m:
            continue
        start = int(m[OFFSET_KEY])
        raw = blob[start : start + _nbytes(m)].copy()
        value = raw.view(np.dtype(m["dtype"])).reshape(m["shape"])
        sharding = getattr(targets.get(leaf_name(i)), "sharding", None)
        out[leaf_name(i)] = value if sharding is None else jax.device_put(value, sharding)
    return out
