"""A pytree as flat named arrays and back: what a checkpoint's ``state`` item stores.

:func:`pack_state` flattens a pytree into ``{leaf_i: array}`` plus per-leaf metadata (path, shape,
dtype; typed PRNG keys as their raw key data and implementation); :func:`unpack_state` puts
the arrays back into a template's tree structure (types preserved), refusing leaves that differ
with a one-line :class:`CheckpointMismatchError`; :func:`restore_targets` says what each leaf is
restored as (on the template's shardings).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from stoixlite.tracking.checkpoint_errors import CheckpointMismatchError


def _is_typed_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def leaf_name(i: int) -> str:
    return f"leaf_{i:05d}"


def _leaf_meta(path: Any, leaf: Any) -> dict[str, Any]:
    """Path, stored shape/dtype (raw key data for typed keys) and key implementation of a leaf."""
    entry: dict[str, Any] = {"path": jax.tree_util.keystr(path)}
    if _is_typed_key(leaf):
        entry["key_impl"] = str(jax.random.key_impl(leaf))
        leaf = jax.random.key_data(leaf)
    entry["shape"] = list(np.shape(leaf))
    entry["dtype"] = str(np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)
    return entry


def is_empty(shape: Any) -> bool:
    """A leaf with no elements (e.g. the frame stack of ``framestack.frames=1``): orbax cannot
    store one, and nothing needs storing; its metadata alone restores it."""
    return math.prod(shape) == 0


def pack_state(state: Any) -> tuple[dict[str, jax.Array], list[dict[str, Any]]]:
    """Flatten a pytree into ``{leaf_i: array}`` (typed keys as their raw key data, every array
    kept where it lives: a sharded global array stays sharded, so each process saves its own
    shards; leaves with no elements left out) plus per-leaf metadata (path, shape, dtype, key
    implementation for typed keys) of every leaf."""
    leaves_with_path, _ = jax.tree_util.tree_flatten_with_path(state)
    arrays: dict[str, jax.Array] = {}
    meta: list[dict[str, Any]] = []
    for i, (path, leaf) in enumerate(leaves_with_path):
        meta.append(_leaf_meta(path, leaf))
        if not is_empty(meta[-1]["shape"]):
            arrays[leaf_name(i)] = jax.random.key_data(leaf) if _is_typed_key(leaf) else leaf
    return arrays, meta


def restore_targets(template: Any) -> dict[str, Any]:
    """What each leaf of ``template`` is restored as: a ``ShapeDtypeStruct`` with the template
    leaf's sharding (a checkpoint written on other devices is resharded onto these), or a host
    array for host leaves (none for leaves with no elements, which are not stored)."""
    out: dict[str, Any] = {}
    for i, leaf in enumerate(jax.tree_util.tree_leaves(template)):
        raw = jax.random.key_data(leaf) if _is_typed_key(leaf) else leaf
        if is_empty(np.shape(raw)):
            continue
        if isinstance(raw, jax.Array):
            out[leaf_name(i)] = jax.ShapeDtypeStruct(raw.shape, raw.dtype, sharding=raw.sharding)
        else:
            host = np.asarray(raw)
            out[leaf_name(i)] = np.zeros(host.shape, host.dtype)
    return out


def unpack_state(
    template: Any, arrays: dict[str, Any], meta: list[dict[str, Any]], check_only: bool = False
) -> Any:
    """Inverse of :func:`pack_state` into ``template``'s tree structure (types preserved);
    ``check_only``: only compare ``meta`` with the template (returns ``None``).

    Raises :class:`CheckpointMismatchError` when the number, shapes or dtypes of the leaves (or
    the typed-key implementations) differ from the template's.
    """
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(template)
    leaves = [leaf for _, leaf in leaves_with_path]
    template_meta = [_leaf_meta(path, leaf) for path, leaf in leaves_with_path]
    if len(leaves) != len(meta):
        raise CheckpointMismatchError(
            f"checkpoint has {len(meta)} state leaves but this run's learner state has "
            f"{len(leaves)}: it was written by a different network/env/code version"
        )
    out = []
    for i, (saved, expected) in enumerate(zip(meta, template_meta, strict=True)):
        for field in ("shape", "dtype", "key_impl"):
            if saved.get(field) != expected.get(field):
                raise CheckpointMismatchError(
                    f"checkpoint leaf {saved['path']} has {field} {saved.get(field)} but this "
                    f"run expects {expected.get(field)} at {expected['path']}"
                )
        if check_only:
            continue
        if is_empty(saved["shape"]):  # not stored: the template's (empty) leaf as it is
            out.append(leaves[i])
            continue
        value = arrays[leaf_name(i)]
        if "key_impl" in saved:
            value = jax.random.wrap_key_data(value, impl=saved["key_impl"])
        elif not isinstance(value, jax.Array):
            value = jax.numpy.asarray(value)
        out.append(value)
    return None if check_only else jax.tree_util.tree_unflatten(treedef, out)
