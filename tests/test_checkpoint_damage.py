"""A damaged checkpoint is read quietly (docs/reliability.md): whichever file of the newest
checkpoint is zeroed, ``resume=`` and ``python -m stoixlite.evaluate`` say in one line which
checkpoint is unreadable and which one they use (or, where orbax never reads the zeroed file,
restore the checkpoint exactly), and orbax's reads still pending when another failed never report
later (``Exception ignored in: <coroutine object _read_array_index_and_device_put>``, ``Event
loop is closed``: thousands of lines after the warning, before the fix)."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY, run_config

from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.plan import plan_run
from stoixlite.run import loop
from stoixlite.run.build import build_run
from stoixlite.run.resume import checkpoint_tree
from stoixlite.run.signals import TrainingInterrupted
from stoixlite.tracking.checkpointing import BROKEN_DIRNAME, Checkpointer, checkpoint_dir
from stoixlite.tracking.state_arrays import pack_state


def zero(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)


@pytest.mark.slow(
    reason="real orbax reads racing a failed one (16 MB, five reads); "
    "the mechanism is tested deterministically by the next test"
)
def test_a_failed_read_leaves_no_read_running(tmp_path, monkeypatch):
    """Many large arrays, the largest data file zeroed: the read fails while the other arrays'
    reads are in flight (in most tries: read five times); nothing of them may reach
    ``sys.unraisablehook`` afterwards. Each array stored on its own (not bundled:
    stoixlite/tracking/leaf_bundle.py), so that there are many reads."""
    from stoixlite.tracking import leaf_bundle

    monkeypatch.setattr(leaf_bundle, "BUNDLE_LEAF_MAX_BYTES", 0)
    state = {f"w{i}": jax.random.normal(jax.random.key(i), (512, 512)) for i in range(16)}
    directory = tmp_path / "checkpoints"
    with Checkpointer(directory, {"hash": "h"}, keep_last=3) as ckpt:
        ckpt.save(1, state, {"chunk": 1})
        ckpt.save(2, state, {"chunk": 2})
    data = [p for p in (directory / "2").rglob("*") if p.is_file() and p.parent.name == "d"]
    zero(max(data, key=lambda p: p.stat().st_size))

    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(repr(u.exc_value)))
    for _ in range(5):
        with Checkpointer(directory, {"hash": "h"}, read_only=True) as ckpt:
            step, _, arrays = ckpt.newest_intact(warn=False, template=state)
        assert step == 1
        np.testing.assert_array_equal(arrays["leaf_00003"], state["w11"])  # sorted by name
    for _ in range(20):  # the reads that were pending end and are collected meanwhile
        gc.collect()
        time.sleep(0.05)
    assert not reported, (len(reported), reported[:3])


def test_a_closing_orbax_loop_settles_its_pending_reads(monkeypatch):
    """The mechanism, deterministically, through orbax's own ``run_sync``: one read fails while
    another is pending and converts whatever ends it into an exception (as orbax's
    ``_read_array_index_and_device_put`` does); under ``quiet_orbax`` the pending one is
    cancelled and collected before the loop closes, so nothing is reported later."""
    import asyncio

    from orbax.checkpoint._src import asyncio_utils

    from stoixlite.tracking.orbax_calls import quiet_orbax

    async def pending_read():
        try:
            await asyncio.sleep(60)
        except BaseException as err:
            raise Exception("Encountered error while reading array index") from err

    async def failing_read():
        await asyncio.sleep(0)
        raise ValueError("zeroed data file")

    async def read_all():
        await asyncio.gather(pending_read(), failing_read())

    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(repr(u.exc_value)))
    with quiet_orbax(), pytest.raises(ValueError, match="zeroed"):
        asyncio_utils.run_sync(read_all())
    gc.collect()
    assert not reported, reported
    assert isinstance(asyncio.get_event_loop_policy(), asyncio.DefaultEventLoopPolicy)
    fresh = asyncio.new_event_loop()
    fresh.close()
    assert type(fresh).__name__ != "SettlingLoop"  # the policy before is restored after


def test_a_closed_settling_loop_drops_what_other_threads_schedule():
    """A read cancelled when its loop closed still completes in TensorStore's threads, which
    then schedule its result on the loop (``call_soon_threadsafe``): a closed
    :class:`SettlingLoop` drops it (a plain loop raises "Event loop is closed", which Python
    reported as an "Exception ignored" traceback); an open one runs it as usual."""
    import asyncio
    import threading

    from stoixlite.tracking.orbax_calls import SettlingLoop

    ran, errors = [], []

    def schedule(loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.call_soon_threadsafe(ran.append, type(loop).__name__)
        except RuntimeError as err:
            errors.append(str(err))

    for closed in (SettlingLoop(), asyncio.SelectorEventLoop()):
        closed.close()
        worker = threading.Thread(target=schedule, args=(closed,))
        worker.start()
        worker.join()
    assert ran == [] and errors == ["Event loop is closed"]  # the plain loop's error only
    running = SettlingLoop()
    worker = threading.Thread(target=schedule, args=(running,))
    worker.start()
    worker.join()
    running.run_until_complete(asyncio.sleep(0))
    running.close()
    assert ran == ["SettlingLoop"] and len(errors) == 1


# --------------------------------------------------------------------------------------------
# From the command line: resume and evaluate with each file of the newest checkpoint zeroed
# --------------------------------------------------------------------------------------------

# 3 chunks of 1 update; hidden sizes large enough that orbax keeps the arrays in data files of
# their own (``state/ocdbt.process_0/d/``) rather than inside the database's index.
RUN = TINY + [
    "arch.total_timesteps=192",
    "arch.num_evaluations=3",
    "logger.plot=false",
    "network.hidden_size=128",
    "network.embed_size=64",
    "network.head_size=64",
]


def _kind(relative: Path, step_dir: Path) -> str:
    """A file's name in a checkpoint with its content hash replaced by its size rank among
    the data files of its directory (``state/ocdbt.process_0/d/#0`` is the largest)."""
    if relative.parent.name != "d":
        return str(relative)
    sizes = sorted((p.stat().st_size for p in (step_dir / relative.parent).iterdir()), reverse=True)
    return f"{relative.parent}/#{sizes.index((step_dir / relative).stat().st_size)}"


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """``(config, run dir stopped after chunk 2, {kind: file of checkpoint 2}, checkpoint 2's
    arrays, the uninterrupted run's final arrays)``."""
    cfg = run_config(RUN)
    full = tmp_path_factory.mktemp("full")
    loop.train(plan_run(cfg), full)
    run_dir = tmp_path_factory.mktemp("stopped")

    def stop_after_second_chunk(chunk, record):
        if chunk == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted):
        loop.train(plan_run(cfg), run_dir, on_chunk_end=stop_after_second_chunk)
    step_dir = checkpoint_dir(run_dir) / "2"
    files = {}
    for path in sorted(p for p in step_dir.rglob("*") if p.is_file()):
        files.setdefault(_kind(path.relative_to(step_dir), step_dir), path.relative_to(step_dir))
    return cfg, run_dir, files, saved(cfg, run_dir, 2), saved(cfg, full)


def saved(cfg, run_dir: Path, step: int | None = None) -> dict:
    fingerprint = config_fingerprint(cfg.to_dict())
    with Checkpointer(checkpoint_dir(run_dir), fingerprint, read_only=True) as ckpt:
        tree, _, _ = ckpt.restore(checkpoint_tree(*build_run(plan_run(cfg)).init()), step)
    return pack_state(tree)[0]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=600
    )


def _one_line(result: subprocess.CompletedProcess, run_dir: Path) -> bool:
    """Whether the output says the newest checkpoint is unreadable: then in one line, naming it
    and the one used instead. Never a report or traceback, at most 3 lines on stderr."""
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert len([line for line in result.stderr.splitlines() if line.strip()]) <= 3, out
    assert "Exception ignored" not in out and "Traceback" not in out, out
    broken = [line for line in out.splitlines() if "unreadable" in line]
    assert len(broken) <= 1, out
    if broken:
        assert f"{checkpoint_dir(run_dir) / '2'} is unreadable" in broken[0], out
        assert "using checkpoint 1" in broken[0], out
    return bool(broken)


# The largest data file (array values) for resume by default; every kind of file with both
# resume and the evaluator under `-m slow`. This run's leaves are all small and on one device,
# so they are stored as one array of bytes (stoixlite/tracking/leaf_bundle.py): a checkpoint
# that also stores arrays on their own has `state/_sharding` and `state/array_metadatas/` too
# (tests/test_checkpointing.py::test_damaged_files_of_arrays_stored_on_their_own).
KINDS = [
    "_CHECKPOINT_METADATA",
    "commit_success.txt",
    "host/metadata",
    "metrics/metrics",
    "state/_METADATA",
    "state/manifest.ocdbt",
    "state/d/#0",
    "state/ocdbt.process_0/manifest.ocdbt",
    "state/ocdbt.process_0/d/#0",
    "state/ocdbt.process_0/d/#1",
]
DEFAULT = {("state/ocdbt.process_0/d/#0", "resume")}
BROKEN_BY_DEFAULT = {"state/ocdbt.process_0/d/#0", "state/_METADATA"}


@pytest.mark.parametrize(
    ("kind", "tool"),
    [
        (kind, tool)
        if (kind, tool) in DEFAULT
        else pytest.param(kind, tool, marks=pytest.mark.slow(reason="a resume or evaluation"))
        for kind in KINDS
        for tool in ("resume", "evaluate")
    ],
)
def test_a_zeroed_file_is_one_line(stopped_run, tmp_path, kind, tool):
    cfg, stopped, files, step_two, final = stopped_run
    assert kind in files, sorted(files)
    run_dir = tmp_path / "run"
    shutil.copytree(stopped, run_dir)
    zero(checkpoint_dir(run_dir) / "2" / files[kind])

    if tool == "evaluate":
        fell_back = _one_line(cli("stoixlite.evaluate", str(run_dir), "--episodes", "2"), run_dir)
        assert (checkpoint_dir(run_dir) / "2").is_dir()  # the evaluator moves nothing
        if not fell_back:  # a file orbax does not read: the checkpoint is whole
            restored = saved(cfg, run_dir, 2)
            for name, value in step_two.items():
                np.testing.assert_array_equal(restored[name], value, err_msg=name)
    else:
        fell_back = _one_line(cli("stoixlite.rec_ppo", f"resume={run_dir}"), run_dir)
        assert (run_dir / BROKEN_DIRNAME / "2").is_dir() == fell_back  # moved aside if broken
        # From checkpoint 1 or 2, the run ends exactly as the uninterrupted one.
        for name, value in saved(cfg, run_dir).items():
            np.testing.assert_array_equal(value, final[name], err_msg=name)
    assert fell_back or kind not in BROKEN_BY_DEFAULT
