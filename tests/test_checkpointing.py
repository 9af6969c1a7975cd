"""Checkpoints: exact round trip of a real learner state (typed and raw keys, struct dataclasses,
optimiser state, uint8 image observations), retention of the last k plus the best, refusal of a
different config, and no corruption of existing checkpoints by an interrupted save."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY, run_config

from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.plan import plan_run
from stoixlite.ppo.types import LearnerState
from stoixlite.run.build import build_run
from stoixlite.tracking.checkpointing import Checkpointer, CheckpointMismatchError
from stoixlite.tracking.state_arrays import pack_state


@pytest.fixture(scope="module")
def exp_and_state():
    cfg = run_config(TINY + ["network=lstm"])
    exp = build_run(plan_run(cfg))
    state = exp.init_state(jax.random.PRNGKey(3), exp.hyper)
    state, _ = exp.learn(state)  # non-trivial optimiser state, carries, env states
    return cfg, exp, state


def assert_trees_identical(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jax.dtypes.issubdtype(y.dtype, jax.dtypes.prng_key)
            assert jax.random.key_impl(x) == jax.random.key_impl(y)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_round_trip_exact(tmp_path, exp_and_state):
    cfg, exp, state = exp_and_state
    # A typed key and a raw key side by side, and the learner state itself.
    tree = {"learner": state, "typed": jax.random.key(7), "raw": jax.random.PRNGKey(9)}
    ckpt = Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict()))
    host = {"chunk": 1, "host_key": np.asarray(jax.random.PRNGKey(1)).tolist(), "logger_step": 1}
    assert ckpt.save(1, tree, host, eval_return=0.5)
    template = {
        "learner": exp.init_state(jax.random.PRNGKey(0), exp.hyper),
        "typed": jax.random.key(0),
        "raw": jax.random.PRNGKey(0),
    }
    restored, host_back, step = ckpt.restore(template)
    assert step == 1 and host_back == host
    assert isinstance(restored["learner"], LearnerState)
    assert_trees_identical(restored, tree)
    # The restored state trains exactly like the original.
    a, ma = exp.learn(jax.tree.map(jnp.array, state))
    b, mb = exp.learn(restored["learner"])
    assert_trees_identical(a, b)
    ckpt.close()


def test_round_trip_with_empty_leaves(tmp_path):
    """Leaves with no elements (framestack with one frame keeps no previous frames; zero-sized
    extras in general) are not stored, which orbax refuses, and come back with their shapes
    (found by an independent sweep: the run crashed at its first checkpoint)."""
    cfg = run_config(TINY + ["network=framestack", "network.frames=1"])
    exp = build_run(plan_run(cfg))
    state, _ = exp.learn(exp.init_state(jax.random.PRNGKey(3), exp.hyper))
    empty = {"none": jnp.zeros((4, 0, 3)), "also": np.zeros((0,), np.int32)}
    assert any(x.size == 0 for x in jax.tree.leaves(state))
    tree = {"learner": state, **empty}
    with Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict())) as ckpt:
        assert ckpt.save(1, tree, {"chunk": 1}, eval_return=0.5)
        template = {"learner": exp.init_state(jax.random.PRNGKey(0), exp.hyper), **empty}
        restored, _, step = ckpt.restore(template)
        assert step == 1
        assert_trees_identical(restored, tree)
        assert ckpt.newest_intact(template=None)[0] == 1  # reads back without a template too
    a, _ = exp.learn(jax.tree.map(jnp.array, state))
    b, _ = exp.learn(restored["learner"])
    assert_trees_identical(a, b)


# Under `pytest -m slow` (CI runs it: .ci/run-slow): a pixel learner's
# compile, about 10 s of CPU. By default the round trip is exact for vector observations (above)
# and a pixel run saves, resumes and evaluates from the CLI (test_cnn_encoder.py).
@pytest.mark.slow
def test_round_trip_with_uint8_image_observations(tmp_path):
    """A learner state holding uint8 frames (the env's last timesteps, ``pixel/colour_cue`` with
    the cnn encoder) comes back exactly, uint8 included, and trains on identically."""
    cfg = run_config(TINY + ["env=pixel/colour_cue", "network.cnn_channels=[4,8]"])
    exp = build_run(plan_run(cfg))
    state, _ = exp.learn(exp.init_state(jax.random.PRNGKey(3), exp.hyper))
    assert state.timestep.observation.dtype == jnp.uint8
    with Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict())) as ckpt:
        assert ckpt.save(1, {"learner": state}, {"chunk": 1}, eval_return=0.5)
        restored, _, _ = ckpt.restore({"learner": exp.init_state(jax.random.PRNGKey(0), exp.hyper)})
    assert_trees_identical(restored, {"learner": state})
    a, _ = exp.learn(jax.tree.map(jnp.array, state))
    b, _ = exp.learn(restored["learner"])
    assert_trees_identical(a, b)


def test_keep_last_and_best(tmp_path, exp_and_state):
    cfg, _, state = exp_and_state
    ckpt = Checkpointer(
        tmp_path / "ckpt", config_fingerprint(cfg.to_dict()), keep_last=2, keep_best=True
    )
    returns = {1: 0.1, 2: 0.9, 3: 0.2, 4: 0.3, 5: float("nan")}
    for step, ret in returns.items():
        ckpt.save(step, state, {"chunk": step}, eval_return=ret)
    assert ckpt.all_steps() == [2, 4, 5]
    assert ckpt.best_step() == 2
    assert ckpt.latest_step() == 5
    assert ckpt.read_host("best")["host"]["chunk"] == 2
    assert not ckpt.save(5, state, {"chunk": 5})  # an existing step is never overwritten
    ckpt.close()


def test_refuses_other_network_config(tmp_path, exp_and_state):
    cfg, _, state = exp_and_state
    Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict())).save(1, state, {"chunk": 1})
    other = run_config(TINY + ["network=lstm", "network.hidden_size=16"])
    ckpt = Checkpointer(tmp_path / "ckpt", config_fingerprint(other.to_dict()))
    other_run = build_run(plan_run(other))
    with pytest.raises(CheckpointMismatchError, match=r"network\.hidden_size: 8 .* != 16") as err:
        ckpt.restore(other_run.init_state(jax.random.PRNGKey(0), other_run.hyper))
    assert "\n" not in str(err.value)
    # Same fingerprint but a template with different leaves: refused, not silently reshaped.
    same = Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict()))
    with pytest.raises(CheckpointMismatchError, match="shape"):
        same.restore(jax.tree.map(lambda x: x[..., None] if x.ndim else x, state))


def test_interrupted_save_leaves_existing_checkpoints_intact(tmp_path, exp_and_state, monkeypatch):
    cfg, exp, state = exp_and_state
    ckpt = Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict()))
    ckpt.save(1, state, {"chunk": 1})
    arrays_before, _ = pack_state(state)

    import orbax.checkpoint._src.handlers.json_checkpoint_handler as jch

    def boom(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(jch.JsonCheckpointHandler, "async_save", boom)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(2, state, {"chunk": 2})
    monkeypatch.undo()
    partial = list((tmp_path / "ckpt").glob("2.orbax-checkpoint-tmp*"))
    assert partial  # what the cut save left: never taken for a checkpoint ...
    with Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict()), read_only=True) as ro:
        assert ro.all_steps() == [1]
    assert all(p.exists() for p in partial)  # (a reader moves and removes nothing)
    fresh = Checkpointer(tmp_path / "ckpt", config_fingerprint(cfg.to_dict()))
    assert fresh.all_steps() == [1]
    restored, host, step = fresh.restore(exp.init_state(jax.random.PRNGKey(0), exp.hyper))
    assert step == 1 and host == {"chunk": 1}
    arrays_after, _ = pack_state(restored)
    for k, v in arrays_before.items():
        np.testing.assert_array_equal(arrays_after[k], v)
    fresh.close()
    assert not any(p.exists() for p in partial)  # ... and removed by the run that writes next
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["1"]


def test_opening_checkpoints_moves_nothing_setting_aside_does(tmp_path, exp_and_state):
    """A checkpoint whose metrics file is unreadable: a writable Checkpointer refuses to open
    over it and moves nothing (no side effect at construction), a read-only one skips it, and
    ``set_aside_unreadable`` moves it to ``checkpoints.broken/`` after which writing works."""
    from stoixlite.tracking.broken_checkpoints import set_aside_unreadable
    from stoixlite.tracking.checkpointing import BROKEN_DIRNAME, CheckpointCorruptError

    cfg, _, state = exp_and_state
    directory = tmp_path / "checkpoints"
    with Checkpointer(directory, config_fingerprint(cfg.to_dict())) as ckpt:
        ckpt.save(1, state, {"chunk": 1}, eval_return=0.1)
        ckpt.save(2, state, {"chunk": 2}, eval_return=0.2)
    (directory / "2" / "metrics" / "metrics").write_text("{not json")
    before = sorted(p.name for p in directory.iterdir())
    with pytest.raises(CheckpointCorruptError, match="set_aside_unreadable"):
        Checkpointer(directory, config_fingerprint(cfg.to_dict()))
    with Checkpointer(directory, config_fingerprint(cfg.to_dict()), read_only=True) as ckpt:
        assert ckpt.latest_step() is not None
    assert sorted(p.name for p in directory.iterdir()) == before  # nothing moved
    assert not (tmp_path / BROKEN_DIRNAME).exists()
    assert set_aside_unreadable(directory) == {2: tmp_path / BROKEN_DIRNAME / "2"}
    assert set_aside_unreadable(directory) == {}  # nothing left to move
    with Checkpointer(directory, config_fingerprint(cfg.to_dict())) as ckpt:
        assert ckpt.all_steps() == [1]
        ckpt.save(3, state, {"chunk": 3}, eval_return=0.3)
        assert ckpt.latest_step() == 3


def _gc_objects_after(action, times: int) -> int:
    """How many more objects the garbage collector tracks after ``times`` calls of ``action``."""
    import gc

    gc.collect()
    before = len(gc.get_objects())
    for i in range(times):
        action(i)
    gc.collect()
    return len(gc.get_objects()) - before


def test_saves_and_restores_keep_no_objects(tmp_path):
    """A long run saves a checkpoint every chunk: once warm, saves and restores leave next to
    nothing in Python's heap. orbax's I/O telemetry (TensorStore's metrics, whose returned dicts
    TensorStore 0.1.86 never frees) kept about 24 lists and dicts a save or restore; the
    checkpointer turns it off (stoixlite/tracking/orbax_calls.py). What stays: orbax's cache of
    32 paths (two a save: filled by the warm-up) and about one weak reference a save."""
    state = {"w": jnp.ones((3, 4)), "b": {"n": jnp.zeros(5, jnp.int32)}, "key": jax.random.key(1)}
    ckpt = Checkpointer(tmp_path / "ckpt", {"hash": "h"}, keep_last=2)
    for step in range(1, 18):  # warm-up: orbax's and TensorStore's first-use caches
        ckpt.save(step, state, {"chunk": step}, eval_return=0.1 * step)
    for _ in range(3):
        ckpt.restore(state)
    times = 10
    grown = _gc_objects_after(lambda i: ckpt.save(18 + i, state, {"chunk": 18 + i}), times)
    assert grown <= 2 * times, f"{grown} more objects after {times} saves"
    grown = _gc_objects_after(lambda i: ckpt.restore(state), times)
    assert grown <= 2 * times, f"{grown} more objects after {times} restores"
    ckpt.close()


def test_orbax_io_telemetry_is_off_only_within_the_checkpointers_calls():
    from orbax.checkpoint._src.serialization import tensorstore_utils

    from stoixlite.tracking.orbax_calls import quiet_orbax

    original = tensorstore_utils.get_tensorstore_raw_bytes
    with quiet_orbax():
        assert tensorstore_utils.get_tensorstore_raw_bytes() is None
    assert tensorstore_utils.get_tensorstore_raw_bytes is original
    assert isinstance(original(), int)


def _stored_arrays(step_dir) -> set[str]:
    """The names of the arrays orbax stored in a checkpoint's ``state`` item."""
    import json

    tree = json.loads((step_dir / "state" / "_METADATA").read_text())["tree_metadata"]
    return {entry["key_metadata"][0]["key"] for entry in tree.values()}


def test_small_whole_leaves_are_stored_as_one_array_and_restore_exactly(tmp_path, monkeypatch):
    """Every array of a save costs memory for good inside orbax and TensorStore
    (stoixlite/tracking/leaf_bundle.py): the small leaves go into one array of bytes, whatever
    their dtypes and shapes, and come back bit for bit; a large leaf stays its own array."""
    from stoixlite.tracking import leaf_bundle

    monkeypatch.setattr(leaf_bundle, "BUNDLE_LEAF_MAX_BYTES", 256)
    rng = np.random.default_rng(5)
    tree = {
        "f32": jnp.asarray(rng.normal(size=(3, 5)), jnp.float32),
        "bf16": jnp.asarray(rng.normal(size=(7,)), jnp.bfloat16),
        "i8": jnp.asarray(rng.integers(-100, 100, size=(2, 3, 2)), jnp.int8),
        "u8": jnp.asarray(rng.integers(0, 255, size=(4,)), jnp.uint8),
        "flags": jnp.asarray([True, False, True]),
        "scalar": jnp.float32(-2.5),
        "host": np.arange(3, dtype=np.int32),
        "typed": jax.random.key(11),
        "raw": jax.random.PRNGKey(12),
        "empty": jnp.zeros((0, 4)),
        "large": jnp.asarray(rng.normal(size=(100,)), jnp.float32),  # 400 bytes
    }
    with Checkpointer(tmp_path / "ckpt", {"hash": "h"}) as ckpt:
        ckpt.save(1, tree, {"chunk": 1})
        large = f"leaf_{sorted(tree).index('large'):05d}"  # a dict's leaves: by sorted key
        assert _stored_arrays(tmp_path / "ckpt" / "1") == {"bundle", large}
        restored, _, _ = ckpt.restore(jax.tree.map(jnp.zeros_like, tree))
    assert_trees_identical(restored, tree)


def test_checkpoints_written_before_bundling_restore_exactly(tmp_path, monkeypatch, exp_and_state):
    """A checkpoint of format 1 (every leaf its own array, as every earlier commit wrote)
    restores bit for bit, and the run's next save bundles."""
    from stoixlite.tracking import checkpointing

    cfg, exp, state = exp_and_state
    fingerprint = config_fingerprint(cfg.to_dict())
    with monkeypatch.context() as patch:
        patch.setattr(checkpointing, "bundle", lambda arrays, meta: (arrays, meta))
        patch.setattr(checkpointing, "FORMAT_VERSION", 1)
        with Checkpointer(tmp_path / "ckpt", fingerprint) as ckpt:
            ckpt.save(1, state, {"chunk": 1})
    assert "bundle" not in _stored_arrays(tmp_path / "ckpt" / "1")
    with Checkpointer(tmp_path / "ckpt", fingerprint) as ckpt:
        restored, host, step = ckpt.restore(exp.init_state(jax.random.PRNGKey(0), exp.hyper))
        assert (step, host) == (1, {"chunk": 1})
        assert_trees_identical(restored, state)
        ckpt.save(2, restored, {"chunk": 2})
        assert ckpt.read_host(2)["format_version"] == 2
    assert "bundle" in _stored_arrays(tmp_path / "ckpt" / "2")


def test_damaged_files_of_arrays_stored_on_their_own(tmp_path, monkeypatch, caplog):
    """The files orbax writes only for arrays stored on their own (sharded or large leaves):
    `_sharding`, which orbax does not read (the checkpoint stays whole), and the arrays'
    metadata, whose damage makes the checkpoint unreadable: one warning, the one before used.
    (tests/test_checkpoint_damage.py damages every other file, from the command line.)"""
    import logging
    import shutil

    from stoixlite.tracking import leaf_bundle

    monkeypatch.setattr(leaf_bundle, "BUNDLE_LEAF_MAX_BYTES", 256)
    tree = {"a": jnp.arange(6.0), "b": jnp.arange(3), "large": jnp.arange(200.0)}
    with Checkpointer(tmp_path / "ckpt", {"hash": "h"}) as ckpt:
        ckpt.save(1, tree, {"chunk": 1})
        ckpt.save(2, tree, {"chunk": 2})
    for name, whole in [("_sharding", True), ("array_metadatas/process_0", False)]:
        copy = tmp_path / name.replace("/", "_") / "ckpt"
        shutil.copytree(tmp_path / "ckpt", copy)
        damaged = copy / "2" / "state" / name
        damaged.write_bytes(b"\0" * damaged.stat().st_size)
        caplog.clear()
        with caplog.at_level(logging.WARNING), Checkpointer(copy, {"hash": "h"}) as ckpt:
            restored, _, step = ckpt.restore(jax.tree.map(jnp.zeros_like, tree))
        assert step == (2 if whole else 1), name
        assert_trees_identical(restored, tree)
        warnings = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
        assert len(warnings) == (0 if whole else 1), warnings


def _blocks_after(action, times: int) -> int:
    """How many more memory blocks Python's allocator holds after ``times`` calls of
    ``action`` (strings included, which the garbage collector does not track)."""
    import gc
    import sys

    gc.collect()
    before = sys.getallocatedblocks()
    for i in range(times):
        action(i)
    gc.collect()
    return sys.getallocatedblocks() - before


def test_saves_keep_no_memory_per_leaf(tmp_path):
    """A save of a state of many leaves keeps no memory per leaf. For every array orbax
    writes, TensorStore keeps the key and value strings of a spec's dict for good (about four
    blocks an array): 128 leaves kept about 550 blocks a save before the small leaves were
    bundled into one array, and about 45 after, whatever the number of leaves
    (stoixlite/tracking/leaf_bundle.py)."""
    leaves = 128
    state = {f"p{i:02d}": jnp.full((4, 3 + i % 5), float(i)) for i in range(leaves)}
    state["key"] = jax.random.key(2)
    ckpt = Checkpointer(tmp_path / "ckpt", {"hash": "h"}, keep_last=2)
    for step in range(1, 18):  # warm-up: orbax's and TensorStore's first-use caches
        ckpt.save(step, state, {"chunk": step}, eval_return=0.1 * step)
    times = 10
    grown = _blocks_after(lambda i: ckpt.save(18 + i, state, {"chunk": 18 + i}), times)
    assert grown <= times * leaves, f"{grown} more memory blocks after {times} saves"
    ckpt.close()
