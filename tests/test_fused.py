"""Sweeps as one program: member k of a fused group (:mod:`stoixlite.run.fused`) writes the
records and checkpoint of the run of its config alone (up to float rounding), on a group whose
members differ in seed, learning rate and an env parameter (gymnax CartPole's gravity, a traced
``EnvParams`` float); a member that diverges stops or rolls back alone, one that reaches its
``arch.target_return`` stops alone; the next chunk computes while the members' outputs are
written, and a stop signal then still saves it; and the ``fused`` Hydra launcher trains a
sweep so: one program per group, a line for a sweep split into programs and for a job that cannot
be fused, every job a run directory that evaluates on its own, a failing job's exit status.

Every run shares one tiny CartPole config, so this module compiles one group program and one
single-run program (and the launcher sweep's second network).
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY, run_cli, run_config

from stoixlite.benchmark.fused import main as benchmark_fused
from stoixlite.config.plan import plan_run
from stoixlite.run import build
from stoixlite.run import fused as fused_module
from stoixlite.run.fused import Member, train_group
from stoixlite.run.loop import train
from stoixlite.run.member_parts import MemberParts, members_axis, over_members, part_sizes
from stoixlite.run.parts import Run, make_raw_env
from stoixlite.run.resume import checkpoint_tree
from stoixlite.run.signals import TrainingInterrupted
from stoixlite.tracking.checkpointing import Checkpointer, checkpoint_dir
from stoixlite.tracking.jsonl import read_jsonl
from stoixlite.tracking.state_arrays import pack_state

# 3 chunks of 1 update (4 envs x 16 steps) each.
BASE = [
    *TINY,
    "env=gymnax/CartPole-v1",
    "arch.total_timesteps=192",
    "arch.num_evaluations=3",
    "logger.plot=false",
]
# Members: another seed, another learning rate, another gravity (an env param traced per member).
MEMBERS = [
    ["arch.seed=0", "system.lr=0.00025"],
    ["arch.seed=1", "system.lr=0.003"],
    ["arch.seed=0", "system.lr=0.00025", "+env.kwargs.gravity=15.0"],
]
VOLATILE = ("time/", "train/sps")


def stable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in records]


def planned(overrides: list[str]):
    return plan_run(run_config(BASE + overrides))


def final_arrays(plan, run_dir: Path) -> dict[str, np.ndarray]:
    state, key = build.build_run(plan).init()
    with Checkpointer(checkpoint_dir(run_dir), plan.fingerprint) as ckpt:
        tree, _, step = ckpt.restore(checkpoint_tree(state, key))
    assert step == plan.config.arch.num_evaluations
    return pack_state(tree)[0]


def assert_close_records(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for a, b in zip(stable(got), stable(want), strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if value is None:
                assert b[key] is None, key
            else:
                np.testing.assert_allclose(value, b[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """The group trained fused, and each member's config trained alone."""
    root = tmp_path_factory.mktemp("fused")
    plans = [planned(overrides) for overrides in MEMBERS]
    members = [Member(plan, root / f"member{k}") for k, plan in enumerate(plans)]
    train_group(members)
    alone = [train(plan, root / f"alone{k}") for k, plan in enumerate(plans)]
    return plans, members, alone, root


def test_members_share_one_program_and_differ_in_their_inputs(fused):
    plans, *_ = fused
    envs = [make_raw_env(plan.config) for plan in plans]
    assert len({build.program_key(p, e) for p, e in zip(plans, envs, strict=True)}) == 1
    assert len({plan.compile_key for plan in plans}) == 2  # the gravity is in env.kwargs
    group = build.build_group(plans)
    assert group.num_lanes == 3
    hyper = group.lane_hyper()
    np.testing.assert_allclose(hyper.lr, [0.00025, 0.003, 0.00025])
    np.testing.assert_allclose(hyper.env["gravity"], [9.8, 9.8, 15.0])


def test_members_mapped_equal_members_batched():
    """``over_members`` (a group's members one after another: the CPU's members axis) computes
    what ``vmap`` over the lanes computes, lane ``m * S + s`` being seed ``s`` of member ``m``,
    for every argument and output leaf; a CPU with one device maps, anything else batches."""

    def one(state, scale):
        return {"x": state["x"] * scale + jnp.sum(state["y"])}, jnp.mean(state["x"])

    for members, seeds in ((3, 1), (2, 3)):
        lanes = members * seeds
        state = {
            "x": jnp.arange(lanes * 4, dtype=jnp.float32).reshape(lanes, 4),
            "y": jnp.linspace(0.0, 1.0, lanes * 2).reshape(lanes, 2),
        }
        scale = jnp.arange(1, lanes + 1, dtype=jnp.float32)
        mapped = jax.jit(over_members(one, members, seeds))(state, scale)
        batched = jax.vmap(one)(state, scale)
        jax.tree.map(np.testing.assert_array_equal, mapped, batched)
    assert members_axis("cpu", None) == "parts"
    assert members_axis("cpu", object()) == members_axis("gpu", None) == "vmap"


@pytest.mark.parametrize(
    ("members", "seeds", "cores", "sizes"),
    [(5, 1, 2, (3, 2)), (2, 3, 2, (1, 1)), (3, 2, 1, (3,)), (4, 1, 16, (1, 1, 1, 1))],
)
def test_member_parts_equal_members_batched(members, seeds, cores, sizes):
    """:class:`MemberParts` (parts of consecutive members at the same time, one thread each: the
    CPU's members axis) computes what ``vmap`` over the lanes computes, in lane order, called
    directly and compiled ahead of time, with the first argument donated part by part (the
    caller's arrays are left whole)."""

    def one(state, scale):
        out = {"x": state["x"] * scale + jnp.sum(state["y"]), "y": state["y"] * 2.0}
        return out, jnp.mean(state["x"]) + scale

    assert part_sizes(members, cores) == sizes
    lanes = members * seeds
    state = {
        "x": jnp.arange(lanes * 4, dtype=jnp.float32).reshape(lanes, 4),
        "y": jnp.linspace(0.0, 1.0, lanes * 2).reshape(lanes, 2),
    }
    scale = jnp.arange(1, lanes + 1, dtype=jnp.float32)
    batched = jax.vmap(one)(state, scale)
    parts = MemberParts(one, sizes, seeds, donate=True)
    for program in (parts, parts.lower(state, scale).compile()):
        jax.tree.map(np.testing.assert_array_equal, program(state, scale), batched)
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(state))
    with pytest.raises(ValueError, match="members must be at least 1"):
        part_sizes(0, 2)


def test_member_k_equals_its_run_alone(fused):
    """Records (every metric but times) and final checkpoints equal the runs alone; the members
    really differ (another seed, lr or gravity gives other records)."""
    plans, members, alone, root = fused
    for k, (plan, member) in enumerate(zip(plans, members, strict=True)):
        assert member.error is None
        np.testing.assert_allclose(member.final, alone[k], rtol=1e-5, atol=1e-6)
        got = read_jsonl(member.run_dir / "metrics.jsonl")
        assert_close_records(got, read_jsonl(root / f"alone{k}" / "metrics.jsonl"))
        mine, theirs = final_arrays(plan, member.run_dir), final_arrays(plan, root / f"alone{k}")
        for name, value in theirs.items():
            np.testing.assert_allclose(mine[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
        assert (member.run_dir / "config.yaml").read_text() == plan.saved_config
    losses = [read_jsonl(m.run_dir / "metrics.jsonl")[-1]["loss/total"] for m in members]
    assert len(set(losses)) == 3


def test_a_member_resumes_and_evaluates_alone(fused, tmp_path, capsys):
    """A member's directory is a run's: the evaluator loads its checkpoint, and a resume of its
    finished run has nothing to train."""
    from stoixlite.evaluate import main

    plans, members, _, _ = fused
    assert main([str(members[2].run_dir), "--episodes", "2"]) == 0
    assert "| 0 |" in capsys.readouterr().out
    assert train(plans[2], members[2].run_dir, resume=True) == pytest.approx(members[2].final)


def poison_lane(monkeypatch, lane: int, at_chunk: int) -> None:
    """The group's learn program returns NaN parameters in ``lane`` at chunk ``at_chunk``
    (counted from 0, every time that chunk is trained: a rollback's retry trains it clean)."""
    compile_programs = Run.compile_programs
    calls = {"n": 0}

    def patched(self, state, key, also=()):
        learn = compile_programs(self, state, key, also)

        def poisoned(state):
            state, metrics = learn(state)
            calls["n"] += 1
            if calls["n"] - 1 == at_chunk:
                params = jax.tree.map(lambda x: x.at[lane].set(jnp.nan), state.params)
                state = state.replace(params=params)
            return state, metrics

        return poisoned

    monkeypatch.setattr(Run, "compile_programs", patched)


@pytest.mark.parametrize("policy", ["stop", "rollback"])
def test_a_diverging_member_stops_or_rolls_back_alone(fused, tmp_path, monkeypatch, policy):
    _, _, _, root = fused
    plans = [planned(o + [f"arch.on_nonfinite={policy}"]) for o in MEMBERS]
    members = [Member(plan, tmp_path / f"m{k}") for k, plan in enumerate(plans)]
    poison_lane(monkeypatch, lane=1, at_chunk=1)
    train_group(members)
    for k in (0, 2):  # the others keep the records of their runs alone
        assert members[k].error is None
        got = read_jsonl(members[k].run_dir / "metrics.jsonl")
        assert_close_records(got, read_jsonl(root / f"alone{k}" / "metrics.jsonl"))
    records = read_jsonl(members[1].run_dir / "metrics.jsonl")
    if policy == "stop":
        assert "non-finite parameters in chunk 2" in str(members[1].error)
        assert math.isnan(members[1].final) and len(records) == 1
    else:  # back to checkpoint 1 with lr halved, then chunks 2 and 3 again
        assert members[1].error is None and len(records) == 3
        assert [r["step"] for r in records] == [64, 128, 192]
        assert "lr: 0.0015" in (members[1].run_dir / "config.yaml").read_text()
        first = read_jsonl(root / "alone1" / "metrics.jsonl")[:1]
        assert_close_records(records[:1], first)


def test_a_member_at_its_target_return_stops_alone(fused, tmp_path):
    plans, _, _, root = fused
    overrides = [list(o) for o in MEMBERS]
    overrides[0].append("arch.target_return=-1000")
    members = [Member(planned(o), tmp_path / f"m{k}") for k, o in enumerate(overrides)]
    train_group(members)
    records = read_jsonl(members[0].run_dir / "metrics.jsonl")
    assert len(records) == 1 and members[0].error is None
    with Checkpointer(checkpoint_dir(members[0].run_dir), plans[0].fingerprint) as ckpt:
        assert ckpt.all_steps() == [1]
    got = read_jsonl(members[1].run_dir / "metrics.jsonl")
    assert_close_records(got, read_jsonl(root / "alone1" / "metrics.jsonl"))


def count_chunk_starts(monkeypatch) -> dict[str, int]:
    """The number of learn chunks the group has started (``"n"``), counted where the loop starts
    them (a chunk then computes in another thread)."""
    begin = fused_module._Started.begin.__func__
    calls = {"n": 0}

    def counted(cls, pool, learn, state):
        calls["n"] += 1
        return begin(cls, pool, learn, state)

    monkeypatch.setattr(fused_module._Started, "begin", classmethod(counted))
    return calls


@pytest.mark.parametrize("target", [None, -1000.0])
def test_the_next_chunk_computes_while_the_members_are_saved(tmp_path, monkeypatch, target):
    """After a chunk's records, the next chunk starts before the members' records are handed on
    and their checkpoints saved, unless no member trains another chunk (its last chunk, or every
    member at its ``arch.target_return``): no chunk is computed that no member uses."""
    calls = count_chunk_starts(monkeypatch)
    extra = [] if target is None else [f"arch.target_return={target}"]
    members = [Member(planned(o + extra), tmp_path / f"m{k}") for k, o in enumerate(MEMBERS)]
    seen: list[tuple[int, int, int]] = []
    train_group(members, lambda index, chunk, _: seen.append((index, chunk, calls["n"])))
    if target is None:  # chunks 0, 1 start the next one; the last one does not
        assert seen == [(k, c, min(c + 2, 3)) for c in range(3) for k in range(3)]
    else:  # every member stops at its target after chunk 0
        assert seen == [(k, 0, 1) for k in range(3)]
    assert calls["n"] == seen[-1][2]
    assert all(m.error is None and math.isfinite(m.final) for m in members)


def test_a_stop_signal_while_the_next_chunk_computes(fused, tmp_path):
    """SIGTERM arrives while chunk 1 computes beside chunk 0's saves: chunk 1 is finished, logged
    and saved by every member, the group stops, and each member resumed alone ends with the
    records of its run that never stopped."""
    plans, _, _, root = fused
    members = [Member(plan, tmp_path / f"m{k}") for k, plan in enumerate(plans)]

    def stop_at_chunk_0(index: int, chunk: int, _: dict) -> None:
        if index == 0 and chunk == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted) as stop:
        train_group(members, stop_at_chunk_0)
    assert stop.value.signum == signal.SIGTERM and stop.value.chunk == 2
    for k, (plan, member) in enumerate(zip(plans, members, strict=True)):
        assert len(read_jsonl(member.run_dir / "metrics.jsonl")) == 2
        with Checkpointer(checkpoint_dir(member.run_dir), plan.fingerprint) as ckpt:
            assert ckpt.latest_step() == 2
        train(plan, member.run_dir, resume=True)
        got = read_jsonl(member.run_dir / "metrics.jsonl")
        assert_close_records(got, read_jsonl(root / f"alone{k}" / "metrics.jsonl"))


def test_a_group_of_other_programs_is_refused():
    with pytest.raises(ValueError, match="one program"):
        build.build_group([planned([]), planned(["network=lstm"])])


def test_a_group_that_does_not_fit_is_split(monkeypatch, capsys):
    """The launcher splits a group whose memory estimate exceeds the devices' memory into
    programs that fit, with one line."""
    from omegaconf import OmegaConf

    from stoixlite.cli.fused_launcher import FusedLauncher, Job
    from stoixlite.run import footprint

    plans = [planned([f"arch.seed={k}"]) for k in range(5)]
    need = footprint.estimate(build.build_group(plans)).total
    monkeypatch.setattr(footprint, "device_memory", lambda devices: (need * 2 // 5, "the test"))
    jobs = [
        Job(k, [], OmegaConf.create(), Path("."), None, plan, "key") for k, plan in enumerate(plans)
    ]
    parts = FusedLauncher()._fitting(jobs)
    assert [[job.index for job in part] for part in parts] == [[0, 1], [2, 3], [4]]
    err = capsys.readouterr().err
    assert "jobs 0,1,2,3,4 split into 3 programs of at most 2 jobs: they need at least" in err
    assert FusedLauncher(max_members=2)._fitting(jobs[:2]) == [jobs[:2]]  # they fit
    assert FusedLauncher(max_members=1)._fitting(jobs[:2]) == [jobs[:1], jobs[1:2]]
    assert "split into 2 programs of at most 1 jobs: hydra.launcher.max_members=1" in (
        capsys.readouterr().err
    )


def sweep(tmp_path: Path, *args: str) -> list[str]:
    argv = ["-m", "hydra/launcher=fused", f"hydra.sweep.dir={tmp_path}"]
    return [*argv, *(a for a in BASE if a != "logger.plot=false"), "logger.plot=false", *args]


def test_launcher_trains_each_program_and_names_the_split(fused, tmp_path, capsys, monkeypatch):
    """``network=gru,lstm`` x three values: two programs of three jobs, one line each; every job
    a run directory (its resolved config, metrics, checkpoints, ``.hydra/``) with the records
    of its run alone."""
    _, _, _, root = fused
    lrs = "system.lr=0.00025,0.003,0.001"
    code, out, err = run_cli(sweep(tmp_path, "network=gru,lstm", lrs), capsys, monkeypatch)
    assert code == 0, err
    assert "the sweep needs 2 programs (they differ in network.name" in err
    assert "jobs 0,1,2 train as one program" in err and "jobs 3,4,5 train" in err
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(jobs) == 6
    for job in jobs:
        assert (job / ".hydra" / "overrides.yaml").exists()
        assert len(read_jsonl(job / "metrics.jsonl")) == 3
        assert (job / "checkpoints" / "3").is_dir()
    assert "lr: 0.003" in (jobs[1] / "config.yaml").read_text()
    assert "name: lstm" in (jobs[4] / "config.yaml").read_text()
    want = read_jsonl(root / "alone0" / "metrics.jsonl")  # seed 0, lr 0.00025, gravity 9.8
    assert_close_records(read_jsonl(jobs[0] / "metrics.jsonl"), want)


def test_launcher_runs_a_job_that_cannot_fuse_alone(tmp_path, capsys, monkeypatch):
    """A value that is not a number: that job runs alone, fails with its one line in
    ``error.txt``, the others train, and the sweep ends with the failed-jobs summary (exit 1)."""
    lrs = "system.lr=0.00025,abc,0.003,0.001"
    code, out, err = run_cli(sweep(tmp_path, lrs), capsys, monkeypatch)
    assert code == 1
    assert "fused launcher: job 1 runs alone: its config is invalid (system.lr=" in err
    assert "jobs 0,2,3 train as one program" in err
    assert "multirun: 1 of 4 jobs failed" in err
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert (jobs[1] / "error.txt").exists() and not (jobs[0] / "error.txt").exists()
    assert len(read_jsonl(jobs[2] / "metrics.jsonl")) == 3


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--members", "1"], ["--members 1 is invalid: at least 2"]),
        (["--rounds", "0"], ["--rounds 0 is invalid"]),
        (["system.lr=abc"], ["system.lr"]),
    ],
)
def test_benchmark_refuses_bad_input_in_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as stop:
        benchmark_fused(argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert all(word in err for word in words), err
