"""The host loop of a training run: compiled learn chunks, evaluation, one record per chunk.

``train(plan, run_dir)`` runs the plan's chunks (:mod:`stoixlite.config.plan`):
``arch.num_evaluations``, or fewer equal chunks where those keep more of the budget (fewer also
with an early stop: once the mean eval return reaches ``arch.target_return``, when set, the run
saves a checkpoint and ends). After each chunk it checks that the
losses and parameters are finite (a non-finite chunk is discarded and the run stops or rolls back,
``arch.on_nonfinite``, see :mod:`stoixlite.run.divergence`), evaluates, then hands the chunk's
record to the :class:`~stoixlite.tracking.recorder.Recorder` (JSON lines, W&B, progress bar,
checkpoints). With several seeds (``arch.num_seeds = S > 1``) the learner state has
a leading ``[S]`` axis (see :mod:`stoixlite.run.parts`); ``metrics.jsonl`` then holds the mean
over seeds (plus ``*_seed_std`` of the returns) and ``metrics_per_seed.jsonl`` one record per
seed.

Resume: ``train(plan, run_dir, resume=True)`` restores the latest checkpoint of ``run_dir``
(learner state, host PRNG key, chunk index, logger step), cuts the metrics files back to the
records written up to that checkpoint and continues: the final state and metrics are
bit-identical (on CPU) to those of an uninterrupted run. SIGINT or SIGTERM during training
requests a stop: the current chunk finishes, a checkpoint is saved and
:class:`~stoixlite.run.signals.TrainingInterrupted` (a ``SystemExit`` with code 128 + signal)
ends the process cleanly; a second signal aborts at once.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoixlite.config.plan import RunPlan
from stoixlite.config.schema import RunConfig
from stoixlite.envs.host.sources import HostEnvError
from stoixlite.run.build import build_run
from stoixlite.run.distributed import agreed_stop, check_agreement, is_primary
from stoixlite.run.divergence import (
    CollapseWatch,
    NonFiniteError,
    first_nonfinite,
    nonfinite_message,
)
from stoixlite.run.footprint import check_fits, run_devices
from stoixlite.run.outputs import recorder_settings
from stoixlite.run.parts import Run
from stoixlite.run.resume import (
    CONFIG_FILE,
    HostState,
    check_restored_chunks,
    check_resumed_chunks,
    checkpoint_tree,
    load_saved_config,
    restore,
)
from stoixlite.run.run_dir import (
    RunDirInUseError,
    afresh_line,
    held_outputs,
    run_dir_in_use,
    stopped_before_first_checkpoint,
)
from stoixlite.run.sharding import to_host
from stoixlite.run.signals import StopRequest, TrainingInterrupted
from stoixlite.specs import Discrete
from stoixlite.tracking.files import METRICS_FILE, PER_SEED_FILE
from stoixlite.tracking.metrics import summarize
from stoixlite.tracking.recorder import Recorder

log = logging.getLogger(__name__)


@dataclass
class Training:
    """Where a run stands between chunks: its plan and programs (``run``), the learner state and
    host key, the host-loop state saved with checkpoints, the compiled learn program, and the
    outputs."""

    run: Run
    run_dir: Path
    recorder: Recorder
    primary: bool
    state: Any = None
    key: Any = None
    host: HostState = dataclasses.field(default_factory=HostState)
    learn: Callable[[Any], tuple[Any, dict[str, Any]]] | None = None
    compile_s: float = 0.0
    collapse: CollapseWatch | None = None

    @property
    def cfg(self) -> RunConfig:
        return self.run.config


def train(
    plan: RunPlan,
    run_dir: str | Path,
    resume: bool = False,
    on_chunk_end: Callable[[int, dict[str, float]], None] | None = None,
    sweep: str | None = None,
) -> float:
    """Train as planned (:func:`stoixlite.config.plan.plan_run`, once, by the caller), writing
    outputs to ``run_dir``; returns the final mean eval return.

    ``resume``: continue from the latest checkpoint in ``run_dir``. ``on_chunk_end(chunk,
    record)`` is called after each chunk is logged, before the checkpoint decision (a hook for
    tests and tools). ``sweep``: the name of the multirun sweep the run belongs to (the W&B
    group unless ``logger.wandb.group`` is set). A multi-process run (``distributed.enabled``)
    must have joined its processes before (:func:`stoixlite.run.distributed.initialize`, which
    the entry point calls before it parses the config).
    """
    t = open_training(plan, Path(run_dir), resume, sweep)
    num_chunks = t.run.plan.num_chunks
    start = time.perf_counter()
    try:
        done = resume_is_finished(t, resume)
        if not done:
            t.learn = t.run.compile_programs(t.state, t.key)
    except BaseException:  # Ctrl-C while compiling: a host run's envs and workers end here
        t.run.close()
        raise
    t.compile_s = time.perf_counter() - start
    t.collapse = CollapseWatch(t.cfg.system.lr, num_actions(t.run))
    ok = False
    try:
        t.recorder.start(t.host.logger_step, t.run.steps_per_chunk * t.host.chunk)
        with StopRequest() as stop:
            while t.host.chunk < num_chunks and not done:
                chunk = t.host.chunk
                try:
                    record = learn_chunk(t, start)
                except HostEnvError as err:  # e.g. SIGTERM to the process group ended the workers
                    if stop.signum is None:
                        raise
                    raise stopped_mid_chunk(t, stop.signum, err) from None
                if record is None:  # a non-finite chunk, rolled back
                    continue
                if on_chunk_end is not None:
                    on_chunk_end(chunk, record)
                done = end_chunk(t, record, start, agreed_stop(stop.signum))
        ok = True
    finally:
        t.run.close()
        record = t.recorder.finish(ok, t.host.best_eval_return)
    final = float(record.get("eval/episode_return", math.nan))
    steps_done = int(record.get("step", t.run.steps_per_chunk * num_chunks))
    if t.primary:
        print(
            f"final eval return {final:.4f} after {steps_done} steps "
            f"({time.perf_counter() - start:.1f}s, compile {t.compile_s:.1f}s); "
            f"outputs in {t.run_dir}"
        )
    return final


def open_training(plan: RunPlan, run_dir: Path, resume: bool, sweep: str | None) -> Training:
    """Everything checked before a file is written (a resume's chunk size, the processes'
    agreement, the devices, a new run's directory), then the outputs opened and the learner
    state created, or restored from the latest checkpoint with ``resume``."""
    if resume:  # before anything is written: the saved config.yaml is still the run's own
        check_resumed_chunks(load_saved_config(run_dir / CONFIG_FILE), plan)
    # Looked at before the processes meet, so that no process sees what another one has written
    # since (process 0 creates the checkpoint directory right after); they must agree on it.
    held = [] if resume else held_outputs(run_dir)
    # A run that stopped before its first checkpoint saved nothing: started afresh in place.
    afresh = bool(held) and stopped_before_first_checkpoint(run_dir)
    held = [] if afresh else held
    check_agreement(
        plan.config.distributed.num_processes,
        config=plan.saved_config,
        run_dir=str(run_dir.resolve()),
        run_dir_outputs=",".join(held),
    )
    run = build_run(plan)
    try:
        return _open_built(run, run_dir, resume, sweep, held, afresh)
    except BaseException:  # refused, or Ctrl-C: a host run's envs and workers end here
        run.close()
        raise


def _open_built(
    run: Run,
    run_dir: Path,
    resume: bool,
    sweep: str | None,
    held: list[str],
    afresh: bool,
) -> Training:
    """The rest of :func:`open_training` once ``run`` is built."""
    check_fits(run, run_devices(run))  # and a run that cannot fit in memory, before compiling
    if held:  # a new run would append to its records and mix its checkpoints with them
        raise RunDirInUseError(run_dir_in_use(run_dir, held))
    t = open_outputs(run, run_dir, sweep, afresh, resume)
    primary = t.primary
    if resume:
        assert t.recorder.checkpointer is not None
        t.state, t.key, t.host, step = restore(run, t.recorder.checkpointer)
        check_restored_chunks(run, t.state, t.host, run_dir)
        if primary:
            print(f"resuming {run_dir} from checkpoint {step} (chunk {t.host.chunk})")
    else:
        t.state, t.key = run.init()
    return t


def open_outputs(
    run: Run, run_dir: Path, sweep: str | None, afresh: bool, resume: bool = False
) -> Training:
    """The run's directory created (a run started ``afresh`` in place loses the records of
    chunks never saved) and its :class:`Training` with the recorder of ``run.plan`` (a fused
    group's member has a copy of the group's run with its own plan, :mod:`stoixlite.run.fused`);
    no learner state yet."""
    run_dir.mkdir(parents=True, exist_ok=True)
    primary = is_primary()
    if afresh and primary:
        print(afresh_line(run_dir))
        for name in (METRICS_FILE, PER_SEED_FILE):  # records of chunks never saved
            (run_dir / name).unlink(missing_ok=True)
    settings = recorder_settings(run.plan, sweep)
    return Training(run, run_dir, Recorder(settings, run_dir, resume, primary), primary)


def resume_is_finished(t: Training, resume: bool) -> bool:
    """Whether a resumed run has nothing left to train: it stopped early at
    ``arch.target_return`` (and the resumed config's target is still reached; e.g.
    ``arch.target_return=null`` trains on) or trained every chunk of its budget. Writes the run's
    config unless so (a resume that trains nothing leaves the saved config as it is) and prints
    the budget note."""
    cfg, host, num_chunks = t.cfg, t.host, t.run.plan.num_chunks
    stopped = resume and target_reached(host.last_eval_return, cfg.arch.target_return)
    finished = resume and host.chunk >= num_chunks
    if t.primary:
        if not (stopped or finished):
            (t.run_dir / CONFIG_FILE).write_text(t.run.plan.saved_config)
        if t.run.plan.budget_note:
            print(t.run.plan.budget_note)
        if stopped:
            print(
                f"{t.run_dir} stopped at arch.target_return={cfg.arch.target_return} (eval return "
                f"{host.last_eval_return:.4f} after chunk {host.chunk}): nothing to train "
                "(resume with arch.target_return=null to train on)"
            )
        elif finished:
            print(
                f"{t.run_dir} has trained all {num_chunks} chunks of arch.total_timesteps="
                f"{cfg.arch.total_timesteps}: nothing to train (to extend it, raise "
                "arch.total_timesteps and arch.num_evaluations alike)"
            )
    return stopped or finished


def learn_chunk(t: Training, start: float) -> dict[str, float] | None:
    """One compiled learn chunk, checked and evaluated: its record, handed to the recorder; or
    ``None`` when its losses or parameters were not finite and the run rolled back
    (:func:`rollback`; a stop raises :class:`~stoixlite.run.divergence.NonFiniteError`)."""
    assert t.learn is not None and t.collapse is not None
    run, chunk, seeds = t.run, t.host.chunk, t.cfg.arch.num_seeds
    tic = time.perf_counter()
    t.state, chunk_metrics = t.learn(t.state)
    chunk_metrics = to_host(chunk_metrics)
    train_s = time.perf_counter() - tic
    bad = first_nonfinite(chunk_metrics, to_host(run.params_finite(t.state.params)))
    if bad is not None:  # discard the chunk: nothing of it is logged or saved
        rollback(t, chunk, bad)
        return None
    t.key, eval_key = run.split(t.key)
    eval_result = to_host(run.evaluator(t.state.params, t.state.hyper, eval_key))
    summary, per_seed = summarize(chunk_metrics, eval_result, seeds)
    record = {
        "step": run.steps_per_chunk * (chunk + 1),
        "update": run.ppo.updates_per_chunk * (chunk + 1),
        **summary,
        "train/sps": run.steps_per_chunk * seeds / train_s,
        "time/elapsed_s": t.host.elapsed_s + time.perf_counter() - start,
        "time/compile_s": t.compile_s,
    }
    t.recorder.log(record, per_seed)
    t.collapse.observe(record)
    return record


def stopped_mid_chunk(t: Training, signum: int, err: Exception) -> TrainingInterrupted:
    """The stop of a run whose chunk in progress failed after a stop signal arrived (a signal to
    the whole process group, as schedulers and ``kill -- -PGID`` send, also ends a host env's
    worker processes): reported as the stop it is, from the newest saved checkpoint."""
    ckpt = t.recorder.checkpointer
    saved = ckpt.latest_step() if ckpt is not None else None
    return TrainingInterrupted(signum, t.run_dir, saved, lost=str(err))


def end_chunk(t: Training, record: dict[str, float], start: float, signum: int | None) -> bool:
    """The host-loop state after a logged chunk, and its checkpoint when due; raises
    :class:`~stoixlite.run.signals.TrainingInterrupted` on a stop request before the last chunk.
    Returns whether the run stops early (``arch.target_return`` reached)."""
    host, chunk = t.host, t.host.chunk
    host.chunk, host.logger_step = chunk + 1, host.logger_step + 1
    ret = record["eval/episode_return"]
    host.last_eval_return = ret
    if math.isfinite(ret) and (host.best_eval_return is None or ret > host.best_eval_return):
        host.best_eval_return = ret
    saved = dataclasses.replace(host, elapsed_s=host.elapsed_s + time.perf_counter() - start)
    stopping = signum is not None
    reached = target_reached(ret, t.cfg.arch.target_return)
    t.recorder.checkpoint(host.chunk, checkpoint_tree(t.state, t.key), saved, stopping or reached)
    if stopping and host.chunk < t.run.plan.num_chunks:
        raise TrainingInterrupted(signum, t.run_dir, host.chunk)
    if reached:
        target = t.cfg.arch.target_return
        print(f"eval return {ret:.4f} reached arch.target_return={target}: stopping")
    return reached


def rollback(t: Training, chunk: int, bad: tuple[str, int]) -> None:
    """A non-finite chunk (``arch.on_nonfinite``): stop with one line
    (:class:`~stoixlite.run.divergence.NonFiniteError`), or, within ``arch.max_rollbacks``,
    go back to the newest checkpoint (or the initial state) with ``system.lr`` halved."""
    ckpt = t.recorder.checkpointer
    kept = ckpt.latest_step() if ckpt is not None else None
    arch = t.cfg.arch
    rolling = arch.on_nonfinite == "rollback"
    limits = (t.host.rollbacks, arch.max_rollbacks) if rolling else None
    message = nonfinite_message(chunk, *bad, kept, t.run_dir, limits)
    if not rolling or t.host.rollbacks >= arch.max_rollbacks:
        raise NonFiniteError(message)
    rollbacks, old_lr = t.host.rollbacks + 1, t.cfg.system.lr
    plan = t.run.plan.with_lr(old_lr / 2)
    t.run.close()
    t.run = build_run(plan)
    t.state, t.key = t.run.init()
    t.host = HostState()
    if kept is not None:
        assert ckpt is not None
        t.state, t.key, t.host, _ = restore(t.run, ckpt, kept)
    t.host.rollbacks = rollbacks
    t.recorder.rewind(t.host.logger_step)
    if t.primary:
        (t.run_dir / CONFIG_FILE).write_text(plan.saved_config)
    tic = time.perf_counter()
    t.learn = t.run.compile_learn(t.state)
    t.compile_s += time.perf_counter() - tic
    t.collapse = CollapseWatch(t.cfg.system.lr, num_actions(t.run))
    log.warning(
        "rollback %d of %d: %s; restarting from %s with system.lr %g -> %g",
        rollbacks,
        arch.max_rollbacks,
        message.split("; stopped", 1)[0],
        f"checkpoint {kept}" if kept is not None else "the initial state",
        old_lr,
        t.cfg.system.lr,
    )
    t.recorder.progress.update(t.run.steps_per_chunk * t.host.chunk, {})


def num_actions(run: Run) -> int | None:
    """The number of actions of a discrete policy (``None`` for continuous actions)."""
    space = getattr(run.env, "action_space", None)
    return int(space.n) if isinstance(space, Discrete) else None


def target_reached(eval_return: float, target: float | None) -> bool:
    """Whether the early stop applies: ``target`` is set and the eval return is at least it."""
    return target is not None and math.isfinite(eval_return) and eval_return >= target
