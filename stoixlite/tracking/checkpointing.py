"""Orbax checkpoints of a training run: the full learner state plus the host-loop state.

A checkpoint (one step directory under ``<run dir>/checkpoints/``, step = completed chunks) holds

* ``state``: every leaf of the learner-state pytree (params, optimiser state, env states, last
  timesteps, memory carries, PRNG key, update counter; with a leading ``[S]`` axis when several
  seeds are trained together), saved as a flat dict of arrays. Arrays sharded over devices (and
  processes) are saved where they live: every process writes its own shards. Typed PRNG keys
  (``jax.random.key``) are stored as their raw ``key_data`` plus the key implementation, raw
  ``uint32`` keys as they are; both are restored bit for bit.
* ``host`` (JSON): the host-loop state (chunk index, host PRNG key data, logger step, anything the
  caller adds), the config fingerprint and the saved tree's leaf paths, shapes and dtypes.

Restoring needs a *template* (e.g. a freshly initialised learner state of the same config): the
checkpoint's leaves are put back into the template's tree structure, so flax struct dataclasses,
optax states and named tuples come back with their types, and onto the template's shardings, so a
checkpoint written on 4 devices restores onto 2 (or 1). A checkpoint whose fingerprint (network
and env config, number of envs and seeds) differs from the current run's is refused with a
one-line :class:`CheckpointMismatchError`; so is one whose leaves do not match the template.

Retention: the last ``keep_last`` checkpoints are kept, plus the best one by evaluation return
(``keep_best``). Orbax writes every checkpoint into a temporary directory and renames it when
complete, so an interrupted save never corrupts an existing checkpoint (a partial one is ignored
and cleaned up).

Corruption (a file truncated, zeroed or deleted after the save, e.g. by a full disk or a faulty
copy): restoring the latest checkpoint falls back to the newest one that reads back intact, with
one warning line naming each broken one; a writable :class:`Checkpointer` moves the broken ones to
``<run dir>/checkpoints.broken/`` (kept for inspection, out of the way of new saves). When none is
intact, :class:`CheckpointCorruptError` says so in one line.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from omegaconf import DictConfig

from stoixlite.run.config import RunConfig, parse

log = logging.getLogger(__name__)

CHECKPOINT_DIRNAME = "checkpoints"
BROKEN_DIRNAME = "checkpoints.broken"  # next to CHECKPOINT_DIRNAME: unreadable checkpoints
FORMAT_VERSION = 1
# arch keys that change the shapes of the learner state (besides the network and env configs).
_SHAPE_ARCH_KEYS = ("num_envs", "num_seeds")
# env keys that change neither the learner state nor the env's dynamics on valid actions.
_UNFINGERPRINTED_ENV_KEYS = ("check_actions",)
# Env keys added after checkpoints existed, with the value every older run had: left out of the
# fingerprint at that value, so checkpoints written before the key existed still restore.
_ADDED_ENV_KEYS = {"obs_prev_action": True}


class CheckpointMismatchError(RuntimeError):
    """A checkpoint cannot be restored into this run (different config or state structure)."""


class CheckpointCorruptError(RuntimeError):
    """No checkpoint of the run reads back intact; the message is one line."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, an unwritable directory): its partial
    files are removed, the checkpoints written before stay; the message is one line."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the disk is full: an ``OSError`` with ``ENOSPC``, or TensorStore's
    ``ValueError('RESOURCE_EXHAUSTED: ... No space left on device [os_error_code=28]')``."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "No space left on device" in text


def _silence_aborted_reads() -> None:
    """Drop the ``RuntimeError('Event loop is closed')`` that orbax's aborted reads of a broken
    checkpoint raise later from their worker threads (printed as bare tracebacks by
    ``sys.unraisablehook``); every other unraisable exception is reported as before."""
    previous = sys.unraisablehook
    if getattr(previous, "_drops_aborted_reads", False):
        return

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
            return
        previous(unraisable)

    hook._drops_aborted_reads = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _unreadable_metrics(directory: Path) -> dict[int, str]:
    """``{step: reason}`` of the step directories whose orbax metrics or checkpoint metadata
    file (read by orbax's manager when it starts) is not a JSON object."""
    broken: dict[int, str] = {}
    if not directory.is_dir():
        return broken
    for step_dir in directory.iterdir():
        if not step_dir.name.isdigit():
            continue
        for name, path in (
            ("metrics", step_dir / "metrics" / "metrics"),
            ("metadata", step_dir / "_CHECKPOINT_METADATA"),
        ):
            if not path.is_file():
                continue
            try:
                value = json.loads(path.read_bytes())
            except (ValueError, UnicodeDecodeError, OSError) as err:
                broken[int(step_dir.name)] = f"{name}: {_one_line(err)}"
                break
            if not isinstance(value, dict) and not (name == "metadata" and value is None):
                broken[int(step_dir.name)] = f"{name}: not a JSON object"
                break
    return broken


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _without_reprs(text: str) -> str:
    """``text`` with each ``<bound method NAME of <...>>`` (what some orbax and TensorStore
    errors hold instead of a message, e.g. a pybind11 function record) replaced by ``NAME``."""
    marker = "<bound method "
    while (start := text.find(marker)) >= 0:
        depth, end = 0, len(text)
        for i in range(start, len(text)):
            depth += {"<": 1, ">": -1}.get(text[i], 0)
            if depth == 0:
                end = i + 1
                break
        name = text[start + len(marker) : end].split(" ", 1)[0].rstrip(">")
        text = text[:start] + name.rsplit(".", 1)[-1] + text[end:]
    return text


def _one_line(err: BaseException, limit: int = 160) -> str:
    text = _without_reprs(" ".join(str(err).split()))
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


# --------------------------------------------------------------------------------------------
# Config fingerprint
# --------------------------------------------------------------------------------------------


def config_fingerprint(cfg: RunConfig | DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """What a checkpoint must agree on with the run restoring it.

    ``{"network": {...}, "env": {...}, "arch": {"num_envs": N, "num_seeds": S}, "hash": str}``
    of the parsed config (:func:`~stoixlite.run.config.parse`: typed values and defaults filled
    in, so a composed config, its parsed form and the saved ``config.yaml`` agree), without
    ``env.check_actions`` (a checked run resumes or evaluates an unchecked one's checkpoint) and
    without keys added later while they hold the value older runs had (``_ADDED_ENV_KEYS``). The
    hash is a short sha256 of the rest.
    """
    container = parse(cfg).to_dict()
    arch = container["arch"]
    env = {
        k: v
        for k, v in container["env"].items()
        if k not in _UNFINGERPRINTED_ENV_KEYS
        and not (k in _ADDED_ENV_KEYS and v == _ADDED_ENV_KEYS[k])
    }
    fingerprint = {
        "network": container.get("network"),
        "env": env,
        "arch": {k: arch.get(k, 1 if k == "num_seeds" else None) for k in _SHAPE_ARCH_KEYS},
    }
    blob = json.dumps(fingerprint, sort_keys=True, default=str).encode()
    return {**fingerprint, "hash": hashlib.sha256(blob).hexdigest()[:16]}


def _flatten_dict(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten_dict(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def fingerprint_diff(saved: dict[str, Any], current: dict[str, Any], limit: int = 4) -> str:
    """``"network.hidden_size: 16 (checkpoint) != 32 (this run), ..."`` for differing keys."""
    a = _flatten_dict({k: v for k, v in saved.items() if k != "hash"})
    b = _flatten_dict({k: v for k, v in current.items() if k != "hash"})
    diffs = [
        f"{k}: {a.get(k, '<unset>')!r} (checkpoint) != {b.get(k, '<unset>')!r} (this run)"
        for k in sorted(set(a) | set(b))
        if a.get(k, "<unset>") != b.get(k, "<unset>")
    ]
    more = f", and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more


# --------------------------------------------------------------------------------------------
# Pytree <-> flat arrays (typed PRNG keys as raw key data)
# --------------------------------------------------------------------------------------------


def _is_typed_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _leaf_name(i: int) -> str:
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


def _is_empty(shape: Any) -> bool:
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
        if not _is_empty(meta[-1]["shape"]):
            arrays[_leaf_name(i)] = jax.random.key_data(leaf) if _is_typed_key(leaf) else leaf
    return arrays, meta


def restore_targets(template: Any) -> dict[str, Any]:
    """What each leaf of ``template`` is restored as: a ``ShapeDtypeStruct`` with the template
    leaf's sharding (a checkpoint written on other devices is resharded onto these), or a host
    array for host leaves (none for leaves with no elements, which are not stored)."""
    out: dict[str, Any] = {}
    for i, leaf in enumerate(jax.tree_util.tree_leaves(template)):
        raw = jax.random.key_data(leaf) if _is_typed_key(leaf) else leaf
        if _is_empty(np.shape(raw)):
            continue
        if isinstance(raw, jax.Array):
            out[_leaf_name(i)] = jax.ShapeDtypeStruct(raw.shape, raw.dtype, sharding=raw.sharding)
        else:
            host = np.asarray(raw)
            out[_leaf_name(i)] = np.zeros(host.shape, host.dtype)
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
        if _is_empty(saved["shape"]):  # not stored: the template's (empty) leaf as it is
            out.append(leaves[i])
            continue
        value = arrays[_leaf_name(i)]
        if "key_impl" in saved:
            value = jax.random.wrap_key_data(value, impl=saved["key_impl"])
        elif not isinstance(value, jax.Array):
            value = jax.numpy.asarray(value)
        out.append(value)
    return None if check_only else jax.tree_util.tree_unflatten(treedef, out)


# --------------------------------------------------------------------------------------------
# Checkpointer
# --------------------------------------------------------------------------------------------


def _metric_or_none(value: float | None) -> dict[str, float] | None:
    if value is None or not math.isfinite(float(value)):
        return None
    return {"eval_return": float(value)}


class Checkpointer:
    """Saves/restores checkpoints of one run under ``directory`` (usually ``<run>/checkpoints``).

    ``keep_last``: number of most recent checkpoints kept (>= 1); ``keep_best``: also keep the
    checkpoint with the highest ``eval_return`` passed to :meth:`save`.
    """

    def __init__(
        self,
        directory: str | Path,
        fingerprint: dict[str, Any],
        keep_last: int = 2,
        keep_best: bool = True,
        read_only: bool = False,
    ):
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.directory = Path(directory).resolve()
        self.fingerprint = fingerprint
        self._read_only = read_only
        # Steps whose metrics file is unreadable break orbax's manager itself (it reads every
        # step's metrics when it starts): a writable checkpointer moves them away first, a
        # read-only one starts without reading metrics and skips them when restoring.
        self._broken = _unreadable_metrics(self.directory)
        if self._broken and not read_only:
            moved = self._quarantine(list(self._broken))
            for step, why in self._broken.items():
                log.warning(
                    "checkpoint %s is unreadable (%s), moved to %s",
                    self.directory / str(step),
                    why,
                    moved.get(step),
                )
            self._broken = {}
        policies: list[Any] = [ocp.checkpoint_managers.LatestN(n=keep_last)]
        if keep_best:
            policies.append(
                ocp.checkpoint_managers.BestN(
                    get_metric_fn=lambda m: m["eval_return"],
                    reverse=False,
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
            best_fn=(lambda m: m["eval_return"]) if keep_best else None,
            best_mode="max",
            enable_async_checkpointing=False,
            create=not read_only,
            read_only=read_only,
            lightweight_initialize=bool(self._broken),
        )
        with _quiet_absl():  # orbax logs what it cannot read as raw ERROR lines
            self._manager = ocp.CheckpointManager(
                self.directory, item_names=("state", "host"), options=options
            )

    # -- queries ---------------------------------------------------------------------------

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        return self._manager.best_step()

    # -- save / restore ----------------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Any,
        host: dict[str, Any],
        eval_return: float | None = None,
    ) -> bool:
        """Save ``state`` (any pytree) and the JSON-able ``host`` dict as checkpoint ``step``.

        Blocks until the checkpoint is on disk (the state may be donated right after). Returns
        False (and saves nothing) when ``step`` is already saved.
        """
        if step in self._manager.all_steps():
            return False
        arrays, meta = pack_state(state)
        host_item = {
            "format_version": FORMAT_VERSION,
            "host": host,
            "fingerprint": self.fingerprint,
            "leaves": meta,
            "eval_return": eval_return
            if eval_return is None or math.isfinite(eval_return)
            else None,
        }
        kept = self.latest_step()
        _silence_aborted_reads()  # a failed write closes orbax's event loop under its workers
        try:
            with _quiet_absl():  # orbax's threads log a failed write as raw ERROR lines
                saved = self._manager.save(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardSave(arrays), host=ocp.args.JsonSave(host_item)
                    ),
                    metrics=_metric_or_none(eval_return),
                    force=True,
                )
                self._manager.wait_until_finished()
        except Exception as err:
            if not (_disk_full(err) or isinstance(err, OSError)):
                raise
            raise self._write_error(step, kept, err) from None
        return bool(saved)

    def _write_error(self, step: int, kept: int | None, err: BaseException) -> OSError:
        """The one-line error of a checkpoint that could not be written, after removing its
        partial (temporary) directory; the checkpoints written before are left as they are."""
        for partial in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
            shutil.rmtree(partial, ignore_errors=True)
        full = _disk_full(err)
        why = "the disk is full (no space left on device)" if full else _one_line(err)
        run_dir = self.directory.parent
        if kept is not None:
            kept_text = (
                f"checkpoint {kept} is kept and intact: free some space, then "
                f"`python -m stoixlite.rec_ppo resume={run_dir}` continues from it"
            )
        else:
            kept_text = "no earlier checkpoint was saved"
        code = errno.ENOSPC if full else getattr(err, "errno", None) or errno.EIO
        return CheckpointWriteError(
            code,
            f"cannot save checkpoint {step} in {self.directory}: {why}; its partial files were "
            f"removed; {kept_text}",
        )

    def read_host(self, step: int | None = None) -> dict[str, Any]:
        """The JSON item of checkpoint ``step`` (latest by default)."""
        step = self._resolve_step(step)
        restored = self._manager.restore(step, args=ocp.args.Composite(host=ocp.args.JsonRestore()))
        return dict(restored["host"])

    def restore(
        self, template: Any, step: int | str | None = None
    ) -> tuple[Any, dict[str, Any], int]:
        """Restore checkpoint ``step`` (latest by default; ``"best"`` for the best one).

        Returns ``(state, host, step)`` with ``state`` in ``template``'s structure and types.
        Raises :class:`CheckpointMismatchError` if the config fingerprint or leaves differ. The
        latest checkpoint falls back to the newest intact one (:meth:`newest_intact`).
        """
        if step is None or step == "latest":
            step, host_item, arrays = self.newest_intact(template=template)
        else:
            step = self._resolve_step(step)
            host_item, arrays = self._load(step, template)
        state = unpack_state(template, arrays, host_item["leaves"])
        return state, dict(host_item["host"]), step

    def newest_intact(
        self, warn: bool = True, template: Any = None
    ) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """``(step, host item, arrays)`` of the newest checkpoint that reads back completely.

        Newer unreadable checkpoints are skipped, each with one warning line (``warn``) naming it
        and the one used instead; unless read-only they are moved to
        ``<run dir>/checkpoints.broken/<step>``. Raises
        :class:`FileNotFoundError` when there is no checkpoint, :class:`CheckpointCorruptError`
        when none is intact and :class:`CheckpointMismatchError` when the newest intact one was
        written with another config.
        """
        steps = sorted(self._manager.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        broken: dict[int, str] = {}
        for step in steps:
            if step in self._broken:
                broken[step] = self._broken[step]
                continue
            try:
                with _quiet_absl():  # orbax logs its own parse errors of a broken file
                    host_item, arrays = self._load(step, template)
            except CheckpointMismatchError:
                raise
            except Exception as err:  # any read error: truncated, zeroed or missing files
                broken[step] = _one_line(err)
                _silence_aborted_reads()
                continue
            moved = {} if self._read_only else self._quarantine(list(broken))
            for bad, why in broken.items() if warn else ():
                where = f", moved to {moved[bad]}" if bad in moved else ""
                log.warning(
                    "checkpoint %s is unreadable (%s)%s; using checkpoint %d, the newest intact",
                    self.directory / str(bad),
                    why,
                    where,
                    step,
                )
            return step, host_item, arrays
        raise CheckpointCorruptError(
            f"no intact checkpoint in {self.directory}: steps {sorted(steps)} are all unreadable"
        )

    def _load(self, step: int, template: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The host item (fingerprint checked) and the state arrays of checkpoint ``step``.

        With a ``template`` the leaves are checked against it before any array is read and come
        back onto its shardings (:func:`restore_targets`); without one, as host numpy arrays of
        the saved shapes (enough to check that the checkpoint reads back)."""
        host_item = self.read_host(step)
        if not {"fingerprint", "leaves", "host"} <= set(host_item):
            raise ValueError("its host item is not a stoixlite checkpoint's (garbage metadata)")
        saved_fp = host_item.get("fingerprint", {})
        if saved_fp.get("hash") != self.fingerprint.get("hash"):
            raise CheckpointMismatchError(
                f"refusing to restore {self.directory / str(step)}: it was written with a "
                f"different network/env config ({fingerprint_diff(saved_fp, self.fingerprint)})"
            )
        meta = host_item["leaves"]
        if template is not None:
            targets = restore_targets(template)
            unpack_state(template, targets, meta, check_only=True)
        else:
            targets = {
                _leaf_name(i): np.zeros(m["shape"], dtype=np.dtype(m["dtype"]))
                for i, m in enumerate(meta)
                if not _is_empty(m["shape"])
            }
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(targets))
        )
        arrays = dict(restored["state"])
        if set(arrays) != set(targets):
            raise ValueError(f"checkpoint {step} holds {len(arrays)} of {len(targets)} leaves")
        return host_item, arrays

    def _quarantine(self, steps: list[int]) -> dict[int, Path]:
        """Move unreadable checkpoints out of the manager's directory (kept, never deleted);
        returns where each went."""
        target = self.directory.parent / BROKEN_DIRNAME
        if not any((self.directory / str(step)).exists() for step in steps):
            return {}  # nothing to move: no empty checkpoints.broken/
        target.mkdir(exist_ok=True)
        moved: dict[int, Path] = {}
        for step in steps:
            source = self.directory / str(step)
            if not source.exists():
                continue
            dest, n = target / str(step), 1
            while dest.exists():
                dest, n = target / f"{step}.{n}", n + 1
            source.rename(dest)
            moved[step] = dest
        if hasattr(self, "_manager"):
            with _quiet_absl():
                self._manager.reload()
        return moved

    def _resolve_step(self, step: int | str | None) -> int:
        if step == "best":
            step = self.best_step()
            if step is None:
                step = self.latest_step()
        elif step is None or step == "latest":
            step = self.latest_step()
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        step = int(step)
        if step not in self._manager.all_steps():
            raise FileNotFoundError(
                f"no checkpoint {step} in {self.directory} (have {self.all_steps()})"
            )
        return step

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIRNAME


def check_resumable(cfg: RunConfig | DictConfig, run_dir: str | Path) -> int:
    """The step ``resume=<run_dir>`` (or the evaluator's ``latest``) will restore, checked
    without compiling anything.

    Reads the newest intact checkpoint (nothing is moved or changed) and checks its config
    fingerprint against ``cfg``. Raises :class:`FileNotFoundError` (no checkpoint),
    :class:`CheckpointCorruptError` (none intact) or :class:`CheckpointMismatchError` (another
    network/env config), each with a one-line message.
    """
    directory = checkpoint_dir(run_dir)
    if not directory.exists():
        raise FileNotFoundError(
            f"no checkpoint in {run_dir}: its {CHECKPOINT_DIRNAME}/ directory is missing (deleted, "
            "or the run had checkpoint.enabled=false), so there is nothing to resume or load; "
            "start a new run in another directory"
        )
    if not directory.is_dir() or not any(p.name.isdigit() for p in directory.iterdir()):
        raise FileNotFoundError(
            f"no checkpoint in {directory}: the run stopped before saving its first one"
        )
    with _quiet_absl(), Checkpointer(directory, config_fingerprint(cfg), read_only=True) as ckpt:
        return ckpt.newest_intact(warn=False)[0]
