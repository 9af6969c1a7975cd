"""A fused group: runs that share one compiled program, trained together as its members.

Runs whose configs give the same programs (:func:`~stoixlite.run.build.program_key`: they differ
only in their seeds, their :class:`~stoixlite.ppo.types.Hyper` values, their outputs and the host
loop's own keys) train as one program over ``members x seeds`` lanes
(:func:`~stoixlite.run.build.build_group`). Each member is still a run of its own: its directory,
``config.yaml``, metrics files, checkpoints (its lanes of the learner state, the tree a run of
its config alone saves, so ``resume=`` and ``python -m stoixlite.evaluate`` read it like any
run's), learning curve and W&B run, with the records a run of its config alone writes (up to
float rounding: tested).

:func:`train_group` runs the chunks of the group. After each chunk every member in training is
handled as :mod:`stoixlite.run.loop` handles a run: its chunk checked for non-finite values (a
bad member stops alone with its one line, or with ``arch.on_nonfinite=rollback`` goes back to
its newest checkpoint with ``system.lr`` halved, without recompiling: the rate is an input),
evaluated, logged, checkpointed, and stopped at its ``arch.target_return``. A member that is done
(finished, stopped at its target, failed) keeps its lanes in the program, which computes them
unused, until every member is done; its outputs are final when it is done. ``train/sps`` of a
member is its own env steps over the chunk's wall time (the group's steps are the sum). Once a
chunk's records show that the next chunk is needed and trains as it would after them (no stop
signal, no member rolling back, a member still training), the next chunk computes (in a thread
of its own) while the members' records are handed on and their checkpoints saved.
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from stoixlite.config.plan import RunPlan
from stoixlite.run import footprint
from stoixlite.run.build import build_group
from stoixlite.run.divergence import (
    CollapseWatch,
    NonFiniteError,
    first_nonfinite,
    nonfinite_message,
)
from stoixlite.run.footprint import check_fits, run_devices
from stoixlite.run.loop import Training, end_chunk, num_actions, open_outputs, target_reached
from stoixlite.run.parts import Run, make_raw_env, run_hyper
from stoixlite.run.resume import CONFIG_FILE, HostState, checkpoint_tree
from stoixlite.run.run_dir import (
    RunDirInUseError,
    held_outputs,
    run_dir_in_use,
    stopped_before_first_checkpoint,
)
from stoixlite.run.sharding import to_host
from stoixlite.run.signals import StopRequest, TrainingInterrupted
from stoixlite.tracking.metrics import summarize

log = logging.getLogger(__name__)


@dataclass
class Member:
    """One run of a fused group: its plan and directory (and W&B group, ``sweep``); after
    :func:`train_group`, its final eval return (NaN unless it trained) and its failure, if any
    (a one-line error: its chunk was not finite, its directory was in use, ...)."""

    plan: RunPlan
    run_dir: Path
    sweep: str | None = None
    final: float = math.nan
    error: BaseException | None = None


@dataclass
class _Seat:
    """A member in training: its run's outputs and host-loop state (:class:`Training`, whose
    ``state`` and ``key`` hold the member's lanes after each chunk), its lanes, whether it is
    done, and the line of a non-finite chunk it rolls back from before the next chunk."""

    member: Member
    t: Training
    lanes: slice
    done: bool = False  # finished, stopped early, failed or stopped by a signal
    completed: bool = False  # finished or stopped early: its outputs are a complete run's
    closed: bool = False  # its outputs are closed (when it is done, or when the group ends)
    rollback: str | None = None

    @property
    def seeds(self) -> int:
        return self.lanes.stop - self.lanes.start


def fitting_size(
    plans: list[RunPlan], max_members: int | None = None, cap: str = "max_members"
) -> tuple[int, str]:
    """How many of ``plans`` (at least two, one :func:`~stoixlite.run.build.program_key`) one
    program may hold, and why fewer than all (``""`` when all): the group's memory estimate
    (:func:`~stoixlite.run.footprint.estimate`, every member counted) against its devices'
    memory, and ``max_members`` (``None``: no cap; named ``cap`` in the reason). Builds the
    group's run; compiles nothing."""
    size, why = len(plans), ""
    run = build_group(plans)
    total = footprint.estimate(run).total
    memory = footprint.device_memory(run_devices(run))
    if memory is not None and total > memory[0]:
        size = max(1, int(memory[0] // math.ceil(total / len(plans))))
        why = f"they need at least {footprint.size_text(total)} of memory and {memory[1]} has "
        why += footprint.size_text(memory[0])
    if max_members is not None and max_members < size:
        size, why = max_members, f"{cap}={max_members}"
    return min(size, len(plans)), why if size < len(plans) else ""


def train_group(
    members: list[Member],
    on_chunk_end: Callable[[int, int, dict[str, float]], None] | None = None,
) -> None:
    """Train ``members`` (plans with one :func:`~stoixlite.run.build.program_key`) as one
    program; fills each member's ``final`` and ``error``. Raises what stops the whole group: a
    config that cannot build or fit (before anything is written), an error of the program
    itself, or :class:`~stoixlite.run.signals.TrainingInterrupted` after a stop signal (every
    member in training saved a checkpoint first; the other members' ``resume=`` lines are
    printed; members done before keep their outputs).
    ``on_chunk_end(member index, chunk, record)`` is called after a member's chunk is logged."""
    run = build_group([m.plan for m in members])
    check_fits(run, run_devices(run))  # the launcher splits groups that do not fit
    seeds = run.config.arch.num_seeds
    seats = [_open(m, run, i, seeds) for i, m in enumerate(members)]
    if all(seat is None for seat in seats):
        return
    start = time.perf_counter()
    state, key = run.init()
    chunk_programs = (  # what each chunk calls besides a run's own programs
        (run.lanes_finite, (state.params,)),
        (run.member_lanes, (checkpoint_tree(state, key), np.int32(0))),
    )
    learn = run.compile_programs(state, key, also=chunk_programs)
    compile_s = time.perf_counter() - start
    if run.plan.budget_note:
        print(run.plan.budget_note)
    training = [seat for seat in seats if seat is not None]
    chunks = ThreadPoolExecutor(1, thread_name_prefix="fused-chunk")  # where a chunk computes
    try:
        for seat in training:
            seat.t.compile_s = compile_s
            seat.t.recorder.start(0, 0)
        with StopRequest() as stop:
            started = None
            while not all(seat.done for seat in training):
                started = started or _Started.begin(chunks, learn, state)
                state, key, stops, started = _chunk(
                    run, learn, started, key, seats, start, stop, on_chunk_end, chunks
                )
                state, key = _rollbacks(run, state, key, seats)
                if stops:
                    for line in stops[:-1]:
                        print(str(line), file=sys.stderr)
                    raise stops[-1]
    finally:
        chunks.shutdown(wait=False, cancel_futures=True)
        for seat in training:
            _finish(seat, start)  # the members still open: stopped, or the group failed


def _open(member: Member, run: Run, index: int, seeds: int) -> _Seat | None:
    """The member's outputs opened (its directory checked and created, its recorder), or
    ``None`` with ``member.error`` set when its directory holds another run's outputs."""
    run_dir = member.run_dir
    held = held_outputs(run_dir)
    afresh = bool(held) and stopped_before_first_checkpoint(run_dir)
    if held and not afresh:
        member.error = RunDirInUseError(run_dir_in_use(run_dir, held))
        return None
    view = copy.copy(run)  # the group's programs, the member's plan (Training.cfg, its outputs)
    view.plan, view.hyper = member.plan, run.member_hypers[index]
    t = open_outputs(view, run_dir, member.sweep, afresh)
    (run_dir / CONFIG_FILE).write_text(member.plan.saved_config)
    t.collapse = CollapseWatch(member.plan.config.system.lr, num_actions(run))
    return _Seat(member, t, slice(index * seeds, (index + 1) * seeds))


@dataclass
class _Started:
    """A learn chunk computing (``future``: the learn program's ``(state, metrics)``), and when it
    was started."""

    future: Future
    at: float

    @classmethod
    def begin(
        cls, pool: ThreadPoolExecutor, learn: Callable[[Any], tuple[Any, Any]], state: Any
    ) -> _Started:
        """``learn(state)`` started in ``pool`` (``state`` is donated to it)."""
        return cls(pool.submit(learn, state), time.perf_counter())


def _chunk(
    run: Run,
    learn: Callable[[Any], tuple[Any, dict[str, Any]]],
    started: _Started,
    key: jax.Array,
    seats: list[_Seat | None],
    start: float,
    stop: StopRequest,
    on_chunk_end: Callable[[int, int, dict[str, float]], None] | None,
    pool: ThreadPoolExecutor,
) -> tuple[Any, jax.Array, list[TrainingInterrupted], _Started | None]:
    """The ``started`` learn chunk of every lane, then each member in training's record and
    checkpoint (:func:`_record`). Returns the group's learner state and host key, the stops of
    the members that saved their checkpoint for a stop signal, and the next chunk when it was
    started already: as soon as the records show that it is trained as it would be after them
    (no stop signal, no member rolling back, a member still training after this chunk), it
    computes while the members' records are handed on and their checkpoints saved (the state
    returned is then the next chunk's input, donated to it)."""
    state, metrics = started.future.result()
    metrics = to_host(metrics)
    train_s = time.perf_counter() - started.at
    signum, stops = stop.signum, []
    finite = np.asarray(to_host(run.lanes_finite(state.params))).reshape(-1)
    key, eval_key = run.split(key)
    evaluation = to_host(run.evaluator(state.params, state.hyper, eval_key))
    parts = run.split_members(checkpoint_tree(state, key))
    records: dict[int, dict[str, float]] = {}
    for index, seat in enumerate(seats):
        if seat is None or seat.done:
            continue
        bad = first_nonfinite(_lanes(metrics, seat), bool(finite[seat.lanes].all()))
        if bad is not None:  # discarded: nothing of it is logged or saved
            _nonfinite(seat, bad)
            continue
        seat.t.state, seat.t.key = parts[index]["learner"], parts[index]["host_key"]
        records[index] = _record(
            run, seat, _lanes(metrics, seat), _lanes(evaluation, seat), train_s, start
        )
    following = None
    if signum is None and not any(s is not None and s.rollback for s in seats):
        if any(_continues(run, seats[index], record) for index, record in records.items()):
            jax.block_until_ready(parts)  # the members' trees, read before the state is donated
            following = _Started.begin(pool, learn, state)
    for index, record in records.items():
        seat = seats[index]
        assert seat is not None
        if on_chunk_end is not None:
            on_chunk_end(index, seat.t.host.chunk, record)
        try:
            reached = end_chunk(seat.t, record, start, signum)
        except TrainingInterrupted as interrupted:
            stops.append(interrupted)
            continue
        seat.done = seat.completed = reached or seat.t.host.chunk >= run.plan.num_chunks
        if seat.done:  # its outputs are final now: curve, W&B summary, its line
            _finish(seat, start)
    if signum is not None:  # members without a new chunk: they stop at their latest checkpoint
        for seat in seats:
            if seat is not None and not seat.done and seat.rollback is not None:
                ckpt = seat.t.recorder.checkpointer
                saved = ckpt.latest_step() if ckpt is not None else None
                stops.append(TrainingInterrupted(signum, seat.t.run_dir, saved))
    return state, key, stops, following


def _continues(run: Run, seat: _Seat | None, record: dict[str, float]) -> bool:
    """Whether the member of ``record`` (its chunk's, not yet handed to :func:`end_chunk`) trains
    another chunk after it: neither its last chunk nor its ``arch.target_return`` reached."""
    assert seat is not None
    target = seat.t.cfg.arch.target_return
    last = seat.t.host.chunk + 1 >= run.plan.num_chunks
    return not last and not target_reached(record["eval/episode_return"], target)


def _lanes(tree: Any, seat: _Seat) -> Any:
    """A member's part of host arrays with a leading lane axis (the axis dropped for one seed:
    a run of one seed has none)."""
    pick = seat.lanes if seat.seeds > 1 else seat.lanes.start
    return jax.tree.map(lambda x: np.asarray(x)[pick], tree)


def _record(
    run: Run,
    seat: _Seat,
    metrics: dict[str, Any],
    evaluation: dict[str, Any],
    train_s: float,
    start: float,
) -> dict[str, float]:
    """The member's finite chunk as a run logs it (:func:`stoixlite.run.loop.learn_chunk`)."""
    t, chunk = seat.t, seat.t.host.chunk
    summary, per_seed = summarize(metrics, evaluation, seat.seeds)
    record = {
        "step": run.steps_per_chunk * (chunk + 1),
        "update": run.ppo.updates_per_chunk * (chunk + 1),
        **summary,
        "train/sps": run.steps_per_chunk * seat.seeds / train_s,
        "time/elapsed_s": t.host.elapsed_s + time.perf_counter() - start,
        "time/compile_s": t.compile_s,
    }
    t.recorder.log(record, per_seed)
    assert t.collapse is not None
    t.collapse.observe(record)
    return record


def _nonfinite(seat: _Seat, bad: tuple[str, int]) -> None:
    """A member's non-finite chunk: it fails with its one line, or (``arch.on_nonfinite=
    rollback``, within ``arch.max_rollbacks``) rolls back before the next chunk."""
    t = seat.t
    ckpt = t.recorder.checkpointer
    kept = ckpt.latest_step() if ckpt is not None else None
    arch = t.cfg.arch
    rolling = arch.on_nonfinite == "rollback"
    limits = (t.host.rollbacks, arch.max_rollbacks) if rolling else None
    message = nonfinite_message(t.host.chunk, *bad, kept, t.run_dir, limits)
    if rolling and t.host.rollbacks < arch.max_rollbacks:
        seat.rollback = message
        return
    seat.member.error = NonFiniteError(message)
    seat.done = True
    seat.t.recorder.finish(False, seat.t.host.best_eval_return)
    seat.closed = True


def _rollbacks(
    run: Run, state: Any, key: jax.Array, seats: list[_Seat | None]
) -> tuple[Any, jax.Array]:
    """Every member marked by :func:`_nonfinite` back at its newest checkpoint (or its initial
    state) with ``system.lr`` halved, as :func:`stoixlite.run.loop.rollback` takes a run back:
    its lanes of the group's state and host key replaced (the halved rate is an input: nothing
    recompiles), its config, metrics files and host-loop state rewound."""
    for index, seat in enumerate(seats):
        if seat is None or seat.rollback is None:
            continue
        t, message = seat.t, seat.rollback
        seat.rollback = None
        ckpt = t.recorder.checkpointer
        kept = ckpt.latest_step() if ckpt is not None else None
        rollbacks, old_lr = t.host.rollbacks + 1, t.cfg.system.lr
        plan = seat.member.plan = t.run.plan.with_lr(old_lr / 2)
        t.run = copy.copy(t.run)
        t.run.plan = plan
        if kept is not None:
            assert ckpt is not None
            like = run.split_members(checkpoint_tree(state, key))[index]
            tree, host, _ = ckpt.restore(like, kept)
            t.host = HostState(**host)
        else:
            tree = run.split_members(checkpoint_tree(*run.init()))[index]
            t.host = HostState()
        t.host.rollbacks = rollbacks
        t.state, t.key = tree["learner"], tree["host_key"]
        hyper = run_hyper(plan, make_raw_env(plan.config))
        state, key = run.put_member(state, key, index, tree, hyper)
        t.recorder.rewind(t.host.logger_step)
        (t.run_dir / CONFIG_FILE).write_text(plan.saved_config)
        t.collapse = CollapseWatch(t.cfg.system.lr, num_actions(run))
        log.warning(
            "%s: rollback %d of %d: %s; restarting from %s with system.lr %g -> %g",
            t.run_dir,
            rollbacks,
            t.cfg.arch.max_rollbacks,
            message.split("; stopped", 1)[0],
            f"checkpoint {kept}" if kept is not None else "the initial state",
            old_lr,
            t.cfg.system.lr,
        )
    return state, key


def _finish(seat: _Seat, start: float) -> None:
    """Close the member's outputs (complete when it finished or stopped early) unless they are
    closed; its final eval return and line, as a run prints them."""
    if seat.closed:
        return
    seat.closed = True
    t = seat.t
    record = t.recorder.finish(seat.completed, t.host.best_eval_return)
    if not seat.completed:
        return
    seat.member.final = float(record.get("eval/episode_return", math.nan))
    steps = int(record.get("step", 0))
    print(
        f"final eval return {seat.member.final:.4f} after {steps} steps "
        f"({time.perf_counter() - start:.1f}s, compile {t.compile_s:.1f}s, fused); "
        f"outputs in {t.run_dir}"
    )
