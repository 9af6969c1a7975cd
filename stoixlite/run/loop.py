"""The host loop of a training run: compiled learn chunks, evaluation, one record per chunk.

``train(cfg, run_dir)`` runs ``cfg.num_chunks`` chunks: ``arch.num_evaluations``, or fewer equal
chunks where those keep more of the budget (fewer also with an early stop: once the
mean eval return reaches ``arch.target_return``, when set, the run saves a checkpoint and ends).
After each chunk it checks that the
losses and parameters are finite (a non-finite chunk is discarded and the run stops or rolls back,
``arch.on_nonfinite``, see :mod:`stoixlite.run.divergence`), evaluates, then hands the chunk's
record to the :class:`~stoixlite.tracking.recorder.Recorder` (JSON lines, W&B, progress bar,
checkpoints). With several seeds (``arch.num_seeds = S > 1``) the learner state has
a leading ``[S]`` axis (see :mod:`stoixlite.run.build`); ``metrics.jsonl`` then holds the mean
over seeds (plus ``*_seed_std`` of the returns) and ``metrics_per_seed.jsonl`` one record per
seed.

Resume: ``train(cfg, run_dir, resume=True)`` restores the latest checkpoint of ``run_dir``
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
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from stoixlite.run.build import build_run
from stoixlite.run.config import RunConfig, parse, parse_distributed
from stoixlite.run.distributed import check_agreement, initialize, is_primary
from stoixlite.run.divergence import (
    CollapseWatch,
    NonFiniteError,
    first_nonfinite,
    halved_lr,
    nonfinite_message,
)
from stoixlite.run.overrides import (
    afresh_line,
    held_outputs,
    run_dir_in_use,
    stopped_before_first_checkpoint,
)
from stoixlite.run.resume import (
    CONFIG_FILE,
    HostState,
    check_restored_chunks,
    check_resumed_chunks,
    checkpoint_tree,
    load_run_config,
    restore,
)
from stoixlite.run.sharding import to_host
from stoixlite.run.signals import StopRequest, TrainingInterrupted
from stoixlite.specs import Discrete
from stoixlite.tracking.metrics import summarize
from stoixlite.tracking.recorder import METRICS_FILE, PER_SEED_FILE, Recorder

log = logging.getLogger(__name__)


def train(
    cfg: RunConfig | DictConfig,
    run_dir: str | Path,
    resume: bool = False,
    on_chunk_end: Callable[[int, dict[str, float]], None] | None = None,
) -> float:
    """Train as configured, writing outputs to ``run_dir``; returns the final mean eval return.

    ``resume``: continue from the latest checkpoint in ``run_dir``. ``on_chunk_end(chunk,
    record)`` is called after each chunk is logged, before the checkpoint decision (a hook for
    tests and tools).
    """
    initialize(cfg.distributed if isinstance(cfg, RunConfig) else parse_distributed(cfg))
    cfg = parse(cfg)
    run_dir = Path(run_dir)
    if resume:  # before anything is written: the saved config.yaml is still the run's own
        check_resumed_chunks(parse(load_run_config(run_dir / CONFIG_FILE)), cfg)
    # What the run is, not how it was launched: a resumed run may use other processes.
    saved_config = _saved_config(cfg)
    # Looked at before the processes meet, so that no process sees what another one has written
    # since (process 0 creates the checkpoint directory right after); they must agree on it.
    held = [] if resume else held_outputs(run_dir)
    # A run that stopped before its first checkpoint saved nothing: started afresh in place.
    afresh = bool(held) and stopped_before_first_checkpoint(run_dir)
    held = [] if afresh else held
    check_agreement(
        cfg.distributed.num_processes,
        config=saved_config,
        run_dir=str(run_dir.resolve()),
        run_dir_outputs=",".join(held),
    )
    run = build_run(cfg)  # refuses device counts that do not fit, before anything is written
    primary = is_primary()
    if held:  # a new run would append to its records and mix its checkpoints with them
        raise RunDirInUseError(run_dir_in_use(run_dir, held))
    run_dir.mkdir(parents=True, exist_ok=True)
    if afresh and primary:
        print(afresh_line(run_dir))
        for name in (METRICS_FILE, PER_SEED_FILE):  # records of chunks never saved
            (run_dir / name).unlink(missing_ok=True)
    num_chunks, seeds = cfg.num_chunks, cfg.arch.num_seeds
    recorder = Recorder(cfg, run_dir, resume, run.steps_per_chunk * num_chunks, primary)
    host = HostState()
    if resume:
        assert recorder.checkpointer is not None
        state, key, host, step = restore(run, recorder.checkpointer)
        check_restored_chunks(run, state, host, run_dir)
        if primary:
            print(f"resuming {run_dir} from checkpoint {step} (chunk {host.chunk})")
    else:
        state, key = run.init()
    # A run that stopped early at arch.target_return is finished: resuming it trains no further
    # unless the resumed config's target is no longer reached (e.g. arch.target_return=null).
    done = resume and target_reached(host.last_eval_return, cfg.arch.target_return)
    finished = resume and host.chunk >= num_chunks  # every chunk of the budget already trained
    if primary:
        if not (done or finished):  # a resume that trains nothing leaves the saved config as is
            (run_dir / CONFIG_FILE).write_text(saved_config)
        if cfg.budget_note():
            print(cfg.budget_note())
        if done:
            print(
                f"{run_dir} stopped at arch.target_return={cfg.arch.target_return} (eval return "
                f"{host.last_eval_return:.4f} after chunk {host.chunk}): nothing to train "
                "(resume with arch.target_return=null to train on)"
            )
        elif finished:
            print(
                f"{run_dir} has trained all {num_chunks} chunks of arch.total_timesteps="
                f"{cfg.arch.total_timesteps}: nothing to train (to extend it, raise "
                "arch.total_timesteps and arch.num_evaluations alike)"
            )

    start = time.perf_counter()
    learn = run.compile_programs(state, key) if not (done or finished) else None
    compile_s = time.perf_counter() - start
    collapse = CollapseWatch(cfg.system.lr, num_actions(run))
    ok = False
    try:
        recorder.start(host.logger_step, run.steps_per_chunk * host.chunk)
        with StopRequest() as stop:
            while host.chunk < num_chunks and not done:
                assert learn is not None
                chunk = host.chunk
                tic = time.perf_counter()
                state, chunk_metrics = learn(state)
                chunk_metrics = to_host(chunk_metrics)
                train_s = time.perf_counter() - tic
                bad = first_nonfinite(chunk_metrics, to_host(run.params_finite(state.params)))
                if bad is not None:  # discard the chunk: nothing of it is logged or saved
                    ckpt = recorder.checkpointer
                    kept = ckpt.latest_step() if ckpt is not None else None
                    arch = cfg.arch
                    rollbacks = (
                        (host.rollbacks, arch.max_rollbacks)
                        if arch.on_nonfinite == "rollback"
                        else None
                    )
                    message = nonfinite_message(chunk, *bad, kept, run_dir, rollbacks)
                    if arch.on_nonfinite != "rollback" or host.rollbacks >= arch.max_rollbacks:
                        raise NonFiniteError(message)
                    # Rollback: the newest checkpoint (or the initial state), halved lr.
                    rollbacks, old_lr = host.rollbacks + 1, cfg.system.lr
                    cfg = halved_lr(cfg)
                    run = build_run(cfg)
                    state, key = run.init()
                    host = HostState()
                    if kept is not None:
                        assert ckpt is not None
                        state, key, host, _ = restore(run, ckpt, kept)
                    host.rollbacks = rollbacks
                    recorder.rewind(cfg, host.logger_step)
                    if primary:
                        (run_dir / CONFIG_FILE).write_text(_saved_config(cfg))
                    tic = time.perf_counter()
                    learn = run.compile_learn(state)
                    compile_s += time.perf_counter() - tic
                    collapse = CollapseWatch(cfg.system.lr, num_actions(run))
                    log.warning(
                        "rollback %d of %d: %s; restarting from %s with system.lr %g -> %g",
                        rollbacks,
                        arch.max_rollbacks,
                        message.split("; stopped", 1)[0],
                        f"checkpoint {kept}" if kept is not None else "the initial state",
                        old_lr,
                        cfg.system.lr,
                    )
                    recorder.progress.update(run.steps_per_chunk * host.chunk, {})
                    continue
                key, eval_key = run.split(key)
                eval_result = to_host(run.evaluator(state.params, eval_key))
                summary, per_seed = summarize(chunk_metrics, eval_result, seeds)
                record = {
                    "step": run.steps_per_chunk * (chunk + 1),
                    "update": run.ppo.updates_per_chunk * (chunk + 1),
                    **summary,
                    "train/sps": run.steps_per_chunk * seeds / train_s,
                    "time/elapsed_s": host.elapsed_s + time.perf_counter() - start,
                    "time/compile_s": compile_s,
                }
                recorder.log(record, per_seed)
                collapse.observe(record)
                host.chunk, host.logger_step = chunk + 1, host.logger_step + 1
                ret = record["eval/episode_return"]
                host.last_eval_return = ret
                if math.isfinite(ret) and (
                    host.best_eval_return is None or ret > host.best_eval_return
                ):
                    host.best_eval_return = ret
                if on_chunk_end is not None:
                    on_chunk_end(chunk, record)
                elapsed = host.elapsed_s + time.perf_counter() - start
                saved = dataclasses.replace(host, elapsed_s=elapsed)
                stopping = stop.signum is not None
                reached = target_reached(ret, cfg.arch.target_return)
                recorder.checkpoint(
                    host.chunk, checkpoint_tree(state, key), saved, stopping or reached
                )
                if stopping and host.chunk < num_chunks:
                    raise TrainingInterrupted(stop.signum, run_dir, host.chunk)
                if reached:
                    target = cfg.arch.target_return
                    print(f"eval return {ret:.4f} reached arch.target_return={target}: stopping")
                    break
        ok = True
    finally:
        record = recorder.finish(ok, host.best_eval_return)
    final = float(record.get("eval/episode_return", math.nan))
    steps_done = int(record.get("step", run.steps_per_chunk * num_chunks))
    if primary:
        print(
            f"final eval return {final:.4f} after {steps_done} steps "
            f"({time.perf_counter() - start:.1f}s, compile {compile_s:.1f}s); outputs in {run_dir}"
        )
    return final


class RunDirInUseError(FileExistsError):
    """A new run was given a directory that already holds a run's outputs."""


def _saved_config(cfg: RunConfig) -> str:
    """The YAML saved as the run's config: what the run is, not how it was launched (a resumed
    run may use other processes, so ``distributed`` is left out)."""
    return OmegaConf.to_yaml({k: v for k, v in cfg.to_dict().items() if k != "distributed"})


def num_actions(run) -> int | None:
    """The number of actions of a discrete policy (``None`` for continuous actions)."""
    space = getattr(run.env, "action_space", None)
    return int(space.n) if isinstance(space, Discrete) else None


def target_reached(eval_return: float, target: float | None) -> bool:
    """Whether the early stop applies: ``target`` is set and the eval return is at least it."""
    return target is not None and math.isfinite(eval_return) and eval_return >= target
