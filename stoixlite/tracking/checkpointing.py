"""Orbax checkpoints of a training run: the full learner state plus the host-loop state.

A checkpoint (one step directory under ``<run dir>/checkpoints/``, step = completed chunks) holds

* ``state``: every leaf of the learner-state pytree (params, optimiser state, env states, last
  timesteps, memory carries, PRNG key, update counter; with a leading ``[S]`` axis when several
  seeds are trained together), saved as a flat dict of arrays. Arrays sharded over devices (and
  processes) are saved where they live: every process writes its own shards; the small leaves
  that every device holds whole are stored together as one array of bytes
  (:mod:`stoixlite.tracking.leaf_bundle`: every array of a save costs memory for good inside
  orbax and TensorStore; checkpoints without it, format 1, restore as well). Typed PRNG keys
  (``jax.random.key``) are stored as their raw ``key_data`` plus the key implementation, raw
  ``uint32`` keys as they are; both are restored bit for bit.
* ``host`` (JSON): the host-loop state (chunk index, host PRNG key data, logger step, anything the
  caller adds), the config fingerprint and the saved tree's leaf paths, shapes and dtypes.

Restoring needs a *template* (e.g. a freshly initialised learner state of the same config): the
checkpoint's leaves are put back into the template's tree structure, so flax struct dataclasses,
optax states and named tuples come back with their types, and onto the template's shardings, so a
checkpoint written on 4 devices restores onto 2 (or 1). A checkpoint whose fingerprint (a dict
with a ``hash``, given by the host: :func:`stoixlite.config.fingerprint.config_fingerprint`)
differs from the current run's is refused with a one-line :class:`CheckpointMismatchError`; so
is one whose leaves do not match the template.

Retention: the last ``keep_last`` checkpoints are kept, plus the best one by evaluation return
(``keep_best``). Orbax writes every checkpoint into a temporary directory and renames it when
complete, so an interrupted save never corrupts an existing checkpoint (a partial one is ignored
and cleaned up).

Corruption (a file truncated, zeroed or deleted after the save, e.g. by a full disk or a faulty
copy): restoring the latest checkpoint falls back to the newest one that reads back intact, with
one warning line naming each broken one; a writable :class:`Checkpointer` moves the broken ones to
``<run dir>/checkpoints.broken/`` (kept for inspection, out of the way of new saves). When none is
intact, :class:`CheckpointCorruptError` says so in one line. A failed read leaves nothing of
orbax running that could report later (:mod:`stoixlite.tracking.orbax_calls`).
"""

from __future__ import annotations

import errno
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orbax.checkpoint as ocp

from stoixlite.tracking.broken_checkpoints import move_aside, unreadable_metadata
from stoixlite.tracking.checkpoint_errors import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointWriteError,
    disk_full,
    fingerprint_diff,
    one_line,
)
from stoixlite.tracking.files import BROKEN_DIRNAME, CHECKPOINT_DIRNAME
from stoixlite.tracking.leaf_bundle import bundle, bundle_targets, unbundle
from stoixlite.tracking.orbax_calls import quiet_orbax
from stoixlite.tracking.state_arrays import (
    is_empty,
    leaf_name,
    pack_state,
    restore_targets,
    unpack_state,
)

log = logging.getLogger(__name__)

# 2: the small whole leaves are stored together (stoixlite.tracking.leaf_bundle); 1 restores too
FORMAT_VERSION = 2


@dataclass(frozen=True)
class CheckpointSettings:
    """When a run saves checkpoints and how many it keeps (the host fills it from the run's
    ``checkpoint`` config group)."""

    enabled: bool = True
    every: int = 1  # chunks between checkpoints
    keep_last: int = 2
    keep_best: bool = True


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
    checkpoint with the highest ``eval_return`` passed to :meth:`save`. ``set_aside`` (writable
    only): first move the checkpoints whose metadata is unreadable to ``checkpoints.broken/``;
    each is named, with the checkpoint used instead, by the next :meth:`newest_intact` (or by
    :meth:`close`, if none follows).
    """

    def __init__(
        self,
        directory: str | Path,
        fingerprint: dict[str, Any],
        keep_last: int = 2,
        keep_best: bool = True,
        read_only: bool = False,
        set_aside: bool = False,
    ):
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.directory = Path(directory).resolve()
        self.fingerprint = fingerprint
        self._read_only = read_only
        # Steps whose metrics file is unreadable break orbax's manager itself (it reads every
        # step's metrics when it starts): a read-only checkpointer starts without reading
        # metrics and skips them when restoring; a writable one needs them set aside first
        # (``set_aside``, which the run's recorder asks for). Constructing one never moves
        # anything otherwise.
        self._set_aside: dict[int, tuple[Path, str]] = {}
        if set_aside and not read_only:
            reasons = unreadable_metadata(self.directory)
            moved = move_aside(self.directory, list(reasons))
            self._set_aside = {step: (moved[step], reasons[step]) for step in moved}
        self._broken = unreadable_metadata(self.directory)
        if self._broken and not read_only:
            raise CheckpointCorruptError(
                f"unreadable checkpoints in {self.directory} (steps {sorted(self._broken)}): "
                "set them aside (set_aside=True, or set_aside_unreadable()) before writing there"
            )
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
            # what a save cut short left (a killed process; a lost one of several): never taken
            # for a checkpoint (not renamed into place), removed when the run opens for writing
            cleanup_tmp_directories=not read_only,
            lightweight_initialize=bool(self._broken),
        )
        with quiet_orbax():  # orbax logs what it cannot read as raw ERROR lines
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
        arrays, meta = bundle(*pack_state(state))
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
        try:
            with quiet_orbax():  # orbax's threads log a failed write as raw ERROR lines
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
            if not (disk_full(err) or isinstance(err, OSError)):
                raise
            raise self._write_error(step, kept, err) from None
        return bool(saved)

    def _write_error(self, step: int, kept: int | None, err: BaseException) -> OSError:
        """The one-line error of a checkpoint that could not be written, after removing its
        partial (temporary) directory; the checkpoints written before are left as they are."""
        for partial in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
            shutil.rmtree(partial, ignore_errors=True)
        full = disk_full(err)
        why = "the disk is full (no space left on device)" if full else one_line(err)
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
        with quiet_orbax():
            restored = self._manager.restore(
                step, args=ocp.args.Composite(host=ocp.args.JsonRestore())
            )
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
        set_aside, self._set_aside = self._set_aside, {}
        if not steps and set_aside:
            raise CheckpointCorruptError(
                f"no intact checkpoint in {self.directory}: steps {sorted(set_aside)} are all "
                f"unreadable (moved to {self.directory.parent / BROKEN_DIRNAME})"
            )
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        broken: dict[int, str] = {}
        for step in steps:
            if step in self._broken:
                broken[step] = self._broken[step]
                continue
            try:
                with quiet_orbax():  # orbax logs its own parse errors of a broken file
                    host_item, arrays = self._load(step, template)
            except CheckpointMismatchError:
                raise
            except Exception as err:  # any read error: truncated, zeroed or missing files
                broken[step] = one_line(err)
                continue
            moved = {} if self._read_only else self._quarantine(list(broken))
            for bad, (dest, why) in set_aside.items():
                broken[bad], moved[bad] = why, dest
            for bad, why in sorted(broken.items(), reverse=True) if warn else ():
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
                leaf_name(i): np.zeros(m["shape"], dtype=np.dtype(m["dtype"]))
                for i, m in enumerate(meta)
                if not is_empty(m["shape"])
            }
        stored = bundle_targets(targets, meta)
        with quiet_orbax():  # a failed read leaves no read of it running
            restored = self._manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(stored))
            )
        arrays = dict(restored["state"])
        if set(arrays) != set(stored):
            raise ValueError(f"checkpoint {step} holds {len(arrays)} of {len(stored)} arrays")
        return host_item, unbundle(arrays, targets, meta)

    def _quarantine(self, steps: list[int]) -> dict[int, Path]:
        """Move unreadable checkpoints out of the manager's directory (:func:`move_aside`) and
        reload the manager; returns where each went."""
        moved = move_aside(self.directory, steps)
        if moved:
            with quiet_orbax():
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
        for step, (dest, why) in self._set_aside.items():  # never named by newest_intact
            log.warning(
                "checkpoint %s is unreadable (%s), moved to %s",
                self.directory / str(step),
                why,
                dest,
            )
        self._set_aside = {}
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIRNAME
