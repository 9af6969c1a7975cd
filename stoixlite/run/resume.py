"""Resuming and loading runs: the resume policy, in one place.

The checks of a checkpoint against the config fingerprint of the run restoring it
(:func:`check_resumable`; the fingerprint is the run plan's,
:attr:`~stoixlite.config.plan.RunPlan.fingerprint`), the chunk size a resume must keep
(:func:`check_resumed_chunks`, :func:`check_restored_chunks`), the host-loop state saved with
every checkpoint (:class:`HostState`) and :func:`restore`, the one way a checkpoint comes back
(the trainer resuming and the evaluator loading a run both use it).

Everything a resume or an evaluation needs from the run directory is checked before anything is
compiled, each mistake one line: the directory, its ``config.yaml``
(:func:`~stoixlite.config.parse.load_run_config`) and an intact checkpoint written with the
same config (:func:`find_checkpoint`, :func:`check_resumable`); the latest checkpoint falls
back to the newest intact one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.parse import load_run_config, parse
from stoixlite.config.plan import RunPlan, chunking_line, config_chunks, plan_run
from stoixlite.config.schema import RunConfig
from stoixlite.config.strict import ConfigError
from stoixlite.run.build import build_run
from stoixlite.run.parts import Run
from stoixlite.run.sharding import to_host
from stoixlite.tracking.checkpoint_errors import CheckpointCorruptError
from stoixlite.tracking.checkpointing import Checkpointer, checkpoint_dir, quiet_orbax
from stoixlite.tracking.files import CHECKPOINT_DIRNAME, CONFIG_FILE


def check_resumable(fingerprint: Mapping[str, Any], run_dir: str | Path) -> int:
    """The step ``resume=<run_dir>`` (or the evaluator's ``latest``) will restore, checked
    without compiling anything.

    Reads the newest intact checkpoint (nothing is moved or changed) and checks its config
    fingerprint against ``fingerprint`` (the run plan's). Raises :class:`FileNotFoundError` (no
    checkpoint), :class:`~stoixlite.tracking.checkpointing.CheckpointCorruptError` (none intact) or
    :class:`~stoixlite.tracking.checkpointing.CheckpointMismatchError` (another network/env
    config), each with a one-line message.
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
    with quiet_orbax(), Checkpointer(directory, dict(fingerprint), read_only=True) as ckpt:
        return ckpt.newest_intact(warn=False)[0]


@dataclass
class HostState:
    """Host-loop state saved with every checkpoint."""

    chunk: int = 0  # chunks completed
    logger_step: int = 0  # records written to metrics.jsonl
    best_eval_return: float | None = None
    elapsed_s: float = 0.0  # training wall-clock before this process (for time/elapsed_s)
    rollbacks: int = 0  # non-finite chunks rolled back (arch.on_nonfinite=rollback)
    last_eval_return: float | None = None  # of the newest chunk (a resume checks the early stop)


def checkpoint_tree(state: Any, key: jax.Array) -> dict[str, Any]:
    """What a checkpoint's ``state`` item holds: the learner state without its ``hyper`` (the
    run's config gives those values, so a resume with ``system.lr=...`` and a rollback's halved
    rate apply, and checkpoints of every stoixlite version restore) and the host PRNG key."""
    return {"learner": state.replace(hyper=None), "host_key": key}


def restore(
    run: Run, ckpt: Checkpointer, step: int | str | None = None
) -> tuple[Any, jax.Array, HostState, int]:
    """``(learner state, host key, host state, step)`` of checkpoint ``step`` (latest by
    default, or ``"best"``), restored into the structure of ``run``'s initial state, with the
    run's :class:`~stoixlite.ppo.types.Hyper` values."""
    state, key = run.init()
    tree, host, step = ckpt.restore(checkpoint_tree(state, key), step)
    return tree["learner"].replace(hyper=state.hyper), tree["host_key"], HostState(**host), step


def check_restored_chunks(run: Run, state: Any, host: HostState, run_dir: Path) -> None:
    """One-line :class:`ConfigError` unless the restored learner has trained exactly
    ``host.chunk`` chunks of this run's ``updates_per_chunk`` updates (``update_step``), i.e.
    the checkpoint counts chunks of the size this config gives (a checkpoint of a stoixlite
    whose chunk split differed, or of a config edited by hand, would be read in other units)."""
    updates = int(to_host(state.update_step).reshape(-1)[0])  # the same for every seed
    per_chunk = run.ppo.updates_per_chunk
    if updates == host.chunk * per_chunk:
        return
    raise ConfigError(
        [
            f"resume={run_dir}: its checkpoint holds {updates} updates in {host.chunk} chunks, "
            f"not chunks of {per_chunk} updates as {run.plan.chunking} gives: set "
            "arch.total_timesteps and arch.num_evaluations so that a chunk keeps its size, or "
            "start a new run instead"
        ]
    )


def check_resumed_chunks(saved: RunConfig, plan: RunPlan) -> None:
    """One-line :class:`ConfigError` unless the resumed run of ``plan`` keeps the chunk size of
    the ``saved`` config.

    A checkpoint counts chunks (``HostState.chunk``) of ``updates_per_chunk`` updates of
    ``num_envs x rollout_length`` steps; a resume whose overrides change either would read that
    count in other units (train nothing although the budget grew, or log steps twice). The
    number of chunks may change: ``arch.total_timesteps`` with ``arch.num_evaluations`` scaled
    alike extends a run (or shortens it), and the learning-rate schedule is then the new
    budget's (annealed to 0 at its end).
    """
    resumed = plan.config
    was_chunks, chunk = config_chunks(saved)
    if (saved.steps_per_update, chunk) == (plan.steps_per_update, plan.ppo.updates_per_chunk):
        return
    hint = "start a new run instead"
    evaluations = resumed.arch.total_timesteps // resumed.steps_per_update // chunk
    if saved.steps_per_update == resumed.steps_per_update and evaluations >= 1:
        arch = dataclasses.replace(resumed.arch, num_evaluations=evaluations)
        if config_chunks(dataclasses.replace(resumed, arch=arch))[1] == chunk:
            hint = f"keep the chunk size with arch.num_evaluations={evaluations}, or {hint}"
    keys = (
        "arch.total_timesteps",
        "arch.num_evaluations",
        "arch.num_envs",
        "system.rollout_length",
    )
    given = ", ".join(
        f"{key}={_select(resumed, key)} (saved: {_select(saved, key)})"
        for key in keys
        if _select(saved, key) != _select(resumed, key)
    )
    raise ConfigError(
        [
            f"{given or 'the resumed config'} changes the chunks of the resumed run "
            f"({chunking_line(was_chunks, chunk, saved.steps_per_update)} -> {plan.chunking}), "
            f"which its checkpoints count: {hint}"
        ]
    )


def _select(cfg: RunConfig, key: str) -> Any:
    group, name = key.split(".")
    return getattr(getattr(cfg, group), name)


def load_saved_config(path: Path) -> RunConfig:
    """A run directory's saved ``config.yaml``, parsed
    (:func:`~stoixlite.config.parse.load_run_config`)."""
    return parse(load_run_config(path))


def find_checkpoint(run_dir: str | Path, checkpoint: str | int = "latest") -> tuple[RunConfig, int]:
    """``(parsed config, step)`` of checkpoint ``checkpoint`` (``latest``, ``best`` or a step)
    in ``run_dir``, checked without building or compiling anything.

    Raises :class:`FileNotFoundError`, :class:`ConfigError` or a checkpoint error with one line
    in the user's terms: no such directory, not a run directory, no (intact) checkpoint, no such
    step, another config.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is a file, not a run directory")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    config_path = run_dir / CONFIG_FILE
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} not found: is {run_dir} a stoixlite run directory?")
    cfg = load_saved_config(config_path)
    fingerprint = config_fingerprint(cfg.to_dict())
    latest = check_resumable(fingerprint, run_dir)  # some checkpoint is there and intact
    if checkpoint == "latest":
        return cfg, latest
    with Checkpointer(checkpoint_dir(run_dir), fingerprint, read_only=True) as ckpt:
        steps = ckpt.all_steps()
        step = (ckpt.best_step() or latest) if checkpoint == "best" else int(checkpoint)
    if step not in steps:
        raise FileNotFoundError(f"--checkpoint {checkpoint}: no such checkpoint (have {steps})")
    return cfg, step


def load_run(run_dir: str | Path, checkpoint: str | int = "latest") -> tuple[Run, Any, int]:
    """``(run, learner state, step)`` of a run directory's checkpoint (``latest``, ``best`` or a
    step): its saved config checked (:func:`find_checkpoint`), parsed, planned (the evaluator's
    one plan of the saved run) and built like the trainer's, the state restored (the latest falls
    back to the newest intact checkpoint)."""
    cfg, step = find_checkpoint(run_dir, checkpoint)
    run = build_run(plan_run(cfg))
    directory = checkpoint_dir(run_dir)
    with Checkpointer(directory, run.plan.fingerprint, read_only=True) as ckpt:
        try:
            state, _, _, step = restore(run, ckpt, None if checkpoint == "latest" else step)
        except ValueError as err:  # a chosen checkpoint's garbled metadata (a JSON parser's text)
            if isinstance(err, ConfigError):
                raise
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise CheckpointCorruptError(
                f"checkpoint {step} in {directory} is unreadable ({reason})"
            ) from err
    return run, state, step
