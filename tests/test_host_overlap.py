"""Host envs with ``arch.host_overlap``: the first update of a pipeline is the update without
overlap, the next rollouts act with parameters one update stale (and their carries, log-probs
and values are those of the acting parameters), the records, checkpoints and resume, and
exceptions on either side (the actor thread's, the learner's)."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import host_env_fixtures  # noqa: F401  (registers Clock-v0 and Crash-v0)
import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("gymnasium")

from conftest import TINY, compose_config, run_cli, run_config, run_plan  # noqa: E402

from stoixlite.cli.resume import resume_config  # noqa: E402
from stoixlite.config.fingerprint import config_fingerprint  # noqa: E402
from stoixlite.config.parse import parse  # noqa: E402
from stoixlite.config.plan import plan_run  # noqa: E402
from stoixlite.run.build import build_run  # noqa: E402
from stoixlite.run.loop import train  # noqa: E402
from stoixlite.run.resume import checkpoint_tree  # noqa: E402
from stoixlite.run.signals import TrainingInterrupted  # noqa: E402
from stoixlite.tracking.checkpointing import Checkpointer, checkpoint_dir  # noqa: E402
from stoixlite.tracking.jsonl import read_jsonl  # noqa: E402
from stoixlite.tracking.state_arrays import pack_state  # noqa: E402

CLOCK = "env.name='gymnasium/host_env_fixtures:Clock-v0'"
# Clock-v0 (episodes of 3 steps: starts inside the rollout), 2 envs x 16 steps, BPTT chunks of 8.
BASE = TINY + [
    "env=gymnasium/CartPole-v1",
    "arch.num_envs=2",
    "system.bptt_length=8",
    "system.num_minibatches=1",
]
UNIT = BASE + [CLOCK]
# 3 chunks of 1 update (2 envs x 16 steps) each.
RUN = UNIT + ["arch.total_timesteps=96", "arch.num_evaluations=3", "logger.plot=false"]
VOLATILE = ("time/", "train/sps")
OVERLAP = "arch.host_overlap=true"


def actors_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stoixlite-actor" and t.is_alive()]


def stable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in records]


def recording(run) -> list:
    """Record the rollouts ``run``'s learner trains on (in order)."""
    seen, learn = [], run._learn_from

    def learn_from(state, data):
        seen.append(data)
        return learn(state, data)

    run._learn_from = learn_from
    return seen


def assert_same(a, b) -> None:
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_first_update_on_policy_then_rollouts_one_update_stale():
    """Update 1 with overlap is the update without it (rollout 1 acts with the initial
    parameters θ0); rollout 2 acts with θ0 again, not θ1: update 2 equals the update without
    overlap from θ1 on a rollout collected by hand with θ0 (same envs, same key). The stale
    rollout's log-probs, values and stored carries are θ0's own (replayed from its first carry)
    and not θ1's; the key chain is the one without overlap."""
    sync = build_run(run_plan(UNIT))
    overlap = build_run(run_plan(UNIT + [OVERLAP]))
    try:
        rollouts = recording(overlap)
        s0, _ = sync.init()
        o0, _ = overlap.init()
        theta0 = jax.tree.map(jnp.copy, s0.params)
        s1, s_metrics = sync.update(s0)
        o1, o_metrics = overlap.update(o0)
        assert_same(
            (o1.params, o1.opt_state, o1.key, o1.carry), (s1.params, s1.opt_state, s1.key, s1.carry)
        )
        assert_same(o_metrics, s_metrics)
        assert float(o_metrics["loss/first_ratio_max_dev"]) < 1e-5  # on-policy

        theta1 = jax.tree.map(jnp.copy, s1.params)
        by_hand, data = sync.collect(s1.replace(params=theta0))
        s2, s_metrics = sync._learn_from(by_hand.replace(params=s1.params), data)
        o2, o_metrics = overlap.update(o1)
        assert_same(
            (o2.params, o2.opt_state, o2.key, o2.carry), (s2.params, s2.opt_state, s2.key, s2.carry)
        )
        assert_same(o_metrics, s_metrics)
        assert float(o_metrics["loss/first_ratio_max_dev"]) > 1e-5  # θ1 replays θ0's actions

        stale = rollouts[1]
        traj = stale.traj
        assert np.asarray(traj.start)[1:].any()  # episodes restart inside the rollout
        start = jax.tree.map(lambda c: c[0], stale.chunk_carry)
        apply = overlap.network.apply
        carry8, (dist, value) = apply(theta0, start, traj.obs[:8], traj.start[:8])
        np.testing.assert_allclose(dist.log_prob(traj.action[:8]), traj.log_prob[:8], atol=1e-6)
        np.testing.assert_allclose(value, traj.value[:8], atol=1e-6)
        jax.tree.map(  # the carry the second BPTT chunk starts from: the actor's own
            lambda a, b: np.testing.assert_allclose(a, b[1], atol=1e-6), carry8, stale.chunk_carry
        )
        _, (dist1, _) = apply(theta1, start, traj.obs, traj.start)
        assert np.abs(np.asarray(dist1.log_prob(traj.action) - traj.log_prob)).max() > 1e-5
    finally:
        sync.close()
        overlap.close()
    assert not actors_alive()


@pytest.mark.slow(
    reason="a full async host run, stopped and resumed; the overlap's contract is tested by "
    "the other tests here"
)
def test_records_checkpoints_and_resume(tmp_path):
    """Training with overlap writes the records of a run without it, its first chunk (one
    update: the pipeline's first) and checkpoint equal to that run's. SIGTERM saves the chunk
    and ends the actor; the resumed run starts a new pipeline from the checkpoint: its first
    update equals a resume of the same checkpoint without overlap, bit for bit."""
    cfg = run_config(RUN + ["checkpoint.keep_last=3"])
    train(plan_run(cfg), tmp_path / "sync")
    overlap_cfg = run_config(RUN + ["checkpoint.keep_last=3", OVERLAP])

    def stop_after_first_chunk(chunk, record):
        if chunk == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    run_dir = tmp_path / "overlap"
    with pytest.raises(TrainingInterrupted):
        train(plan_run(overlap_cfg), run_dir, on_chunk_end=stop_after_first_chunk)
    assert not actors_alive()
    sync_records = read_jsonl(tmp_path / "sync" / "metrics.jsonl")
    assert stable(read_jsonl(run_dir / "metrics.jsonl")) == stable(sync_records[:1])

    template = build_run(plan_run(cfg))
    like = checkpoint_tree(*template.init())
    template.close()

    def saved(directory, step):
        with Checkpointer(checkpoint_dir(directory), config_fingerprint(cfg.to_dict())) as ckpt:
            tree, _, _ = ckpt.restore(like, step)
        return pack_state(tree)[0]

    first, ours = saved(tmp_path / "sync", 1), saved(run_dir, 1)
    assert first.keys() == ours.keys()
    for name in first:
        np.testing.assert_array_equal(ours[name], first[name], err_msg=name)

    without = tmp_path / "resumed_without_overlap"
    shutil.copytree(run_dir, without)
    train(plan_run(parse(resume_config(compose_config(RUN), run_dir, []))), run_dir, resume=True)
    off = resume_config(
        compose_config(RUN + ["arch.host_overlap=false"]), without, ["arch.host_overlap=false"]
    )
    train(plan_run(parse(off)), without, resume=True)
    assert not actors_alive()
    resumed, plain = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(without / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [32, 64, 96]
    assert resumed[0].keys() == sync_records[0].keys() and resumed[-1].keys() == plain[-1].keys()
    assert stable(resumed[:2]) == stable(plain[:2])  # the new pipeline's first update
    assert resumed[2]["loss/total"] != plain[2]["loss/total"]  # then one update stale


def test_an_actor_exception_is_one_line_and_keeps_the_saved_chunk(tmp_path, capsys, monkeypatch):
    """An env that raises in the actor thread (in the rollout collected beside the first
    chunk's last update): the first chunk is recorded and saved, and the next update raises the
    actor's error: one line, exit 1."""
    run_dir = tmp_path / "run"
    argv = [
        *BASE,
        "env.name='gymnasium/host_env_fixtures:Crash-v0'",
        "+env.kwargs.mode=raise",
        "+env.kwargs.after=20",  # each env's 20th step: in rollout 3 (steps 17-24)
        "system.rollout_length=8",
        "arch.total_timesteps=64",
        "arch.num_evaluations=2",
        OVERLAP,
        f"hydra.run.dir={run_dir}",
    ]
    code, _, err = run_cli(argv, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, err
    assert "Crash-v0" in lines[0] and "licence server" in lines[0]
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [32]
    assert (run_dir / "checkpoints").is_dir()
    assert not actors_alive()


def test_a_learner_exception_discards_the_rollout_in_flight():
    """The learner raises while the actor collects the next rollout (slow env steps): the
    exception comes through and the actor thread is stopped, not left running."""
    run = build_run(run_plan(UNIT + [OVERLAP]))
    try:
        state, _ = run.init()
        step = run.vector.step

        def slow_step(action):
            time.sleep(0.05)
            return step(action)

        run.vector.step = slow_step
        alive = []

        def failing(state, data):
            alive.append(len(actors_alive()))
            raise RuntimeError("the learner failed")

        run._learn_from = failing
        with pytest.raises(RuntimeError, match="the learner failed"):
            run.update(state)
        assert alive == [1] and not actors_alive()
    finally:
        run.close()


def test_host_overlap_is_refused_for_jax_envs():
    from stoixlite.config.strict import ConfigError

    with pytest.raises(ConfigError, match="arch.host_overlap=True is invalid: .* JAX env") as err:
        run_config(TINY + [OVERLAP])
    assert len(str(err.value).splitlines()) == 1
