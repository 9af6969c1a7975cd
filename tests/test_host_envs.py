"""Host envs (``gymnasium/<id>``, ``popgym_ref/<name>``): the host path against the JAX path,
the rollout/replay identity, truncation bootstrap, and a failing env worker."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import host_env_fixtures  # noqa: F401  (registers Clock-v0 and Crash-v0)
import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("popgym")

from conftest import TINY, run_config, run_plan  # noqa: E402

from stoixlite.config.plan import plan_run  # noqa: E402
from stoixlite.envs.host.sources import HostEnvError, host_source  # noqa: E402
from stoixlite.envs.host.vector import HostVector  # noqa: E402
from stoixlite.envs.popgym.cards import deal_order_from_popgym  # noqa: E402
from stoixlite.envs.registry import make  # noqa: E402
from stoixlite.envs.types import FIRST, LAST, MID  # noqa: E402
from stoixlite.ppo.learner import make_learn_from, make_update_phases  # noqa: E402
from stoixlite.run.build import build_run  # noqa: E402

CLOCK = "env.name='gymnasium/host_env_fixtures:Clock-v0'"


def _close(run) -> None:
    run.close()


def test_repeat_previous_host_equals_jax_port():
    """popgym's RepeatPrevious on the host and the JAX port started from the same decks: the
    same observations, rewards and flags step for step (the same actions, drawn from the same
    parameters and keys), and the same first update."""
    common = TINY + ["arch.num_envs=2", "system.rollout_length=16", "system.num_minibatches=1"]
    host = build_run(run_plan(common + ["env=popgym_ref/repeat_previous"]))
    port = build_run(run_plan(common + ["env=popgym/repeat_previous"]))
    try:
        h_state, _ = host.init()
        j_state, _ = port.init()
        raw = make("popgym/repeat_previous", difficulty="easy")
        decks = [deal_order_from_popgym(env.unwrapped.deck) for env in host.vector.envs]
        starts = [raw.reset_from_deck(d) for d in decks]
        deck_state = jax.tree.map(lambda *x: jnp.stack(x), *[s for s, _ in starts])
        first_obs = np.stack([np.asarray(ts.observation) for _, ts in starts])
        np.testing.assert_array_equal(first_obs, np.asarray(h_state.timestep.observation)[:, :4])
        env_state = j_state.env_state
        inner = env_state.env_state.env_state.replace(env_state=deck_state)
        env_state = env_state.replace(env_state=env_state.env_state.replace(env_state=inner))
        ts = j_state.timestep
        ts = ts.replace(
            observation=h_state.timestep.observation,
            extras={**ts.extras, "next_obs": h_state.timestep.observation},
        )
        j_state = j_state.replace(env_state=env_state, timestep=ts)
        jax.tree.map(np.testing.assert_array_equal, h_state.params, j_state.params)

        phases = make_update_phases(port.network.apply, port.env, port.ppo)
        j_after, j_data = jax.jit(phases.collect)(j_state)
        h_after, h_data = host.collect(h_state)
        # the JAX rollout keeps no per-step next observation (only what its bootstrap needs):
        # the next values, which read them, are compared below
        assert j_data.traj.next_obs is None and h_data.traj.next_obs is not None
        for name in ("obs", "start", "action", "reward", "discount", "last"):
            np.testing.assert_array_equal(
                np.asarray(getattr(h_data.traj, name)), np.asarray(getattr(j_data.traj, name)), name
            )
        assert np.asarray(h_data.traj.reward).any()  # rewarded steps are compared too
        for name in ("log_prob", "value"):
            np.testing.assert_allclose(
                getattr(h_data.traj, name), getattr(j_data.traj, name), atol=1e-6
            )
        np.testing.assert_allclose(h_data.next_value, j_data.next_value, atol=1e-6)

        learn = jax.jit(make_learn_from(phases, port.ppo))
        j_new, j_metrics = learn(j_after, j_data)
        h_new, h_metrics = host._learn_from(h_after, h_data)
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), h_new.params, j_new.params
        )
        for name in ("loss/total", "loss/policy", "loss/value"):
            np.testing.assert_allclose(h_metrics[name], j_metrics[name], rtol=1e-5, atol=1e-6)
    finally:
        host.close()


def test_host_replay_identity_with_resets_chunks_and_burn_in():
    """The rollout/replay identity on the host path (ratio 1 on the first minibatch) with
    episodes ending inside the rollout, BPTT chunks and burn-in, on two consecutive updates."""
    cfg = run_config(
        TINY
        + [
            "env=gymnasium/CartPole-v1",
            "system.rollout_length=32",
            "system.bptt_length=8",
            "system.burn_in=4",
        ]
    )
    run = build_run(plan_run(cfg))
    try:
        state, _ = run.init()
        for _ in range(2):
            state, metrics = run.update(state)
            assert float(metrics["loss/first_ratio_max_dev"]) < 1e-5
            assert float(metrics["loss/first_value_max_dev"]) < 1e-5
        assert float(metrics["train/episodes"]) > 0
    finally:
        run.close()


def test_vector_truncation_keeps_true_final_observation():
    """TimeLimit truncation: LAST with discount 1, the next episode's first observation, and the
    true final one in ``next_obs``; a termination has discount 0."""
    source = host_source("gymnasium/host_env_fixtures:Clock-v0", None, {"end": 0})
    vector = HostVector(source, 2)
    first = vector.reset(seed=[5, 6])
    assert (first.step_type == FIRST).all()
    tags = first.observation[:, 1].copy()
    for t in (1, 2):
        ts = vector.step(np.zeros(2, np.int32))
        assert (ts.step_type == MID).all() and (ts.observation[:, 0] == t).all()
    ts = vector.step(np.zeros(2, np.int32))
    assert (ts.step_type == LAST).all() and (ts.discount == 1).all()
    assert ts.extras["truncated"].all()
    np.testing.assert_array_equal(ts.extras["next_obs"], np.stack([[3, 3], tags], 1))
    assert (ts.observation[:, 0] == 0).all()  # the next episode's first observation
    assert (ts.extras["episode_length"] == 3).all() and (ts.extras["episode_return"] == 6).all()
    vector.close()
    terminating = HostVector(
        host_source("gymnasium/host_env_fixtures:Clock-v0", None, {"end": 2}), 1
    )
    terminating.reset(seed=0)
    terminating.step(np.zeros(1, np.int32))
    ts = terminating.step(np.zeros(1, np.int32))
    assert ts.step_type[0] == LAST and ts.discount[0] == 0 and not ts.extras["truncated"][0]
    terminating.close()


def test_truncation_bootstraps_from_true_final_observation():
    """The host rollout's next value at a truncation is V(true final observation) from the carry
    after that step (replayed here step by step), not the next episode's first value."""
    cfg = run_config(TINY + [CLOCK, "arch.num_envs=2", "system.rollout_length=8"])
    run = build_run(plan_run(cfg))
    try:
        state, _ = run.init()
        carry0, params = state.carry, state.params
        _, data = run.collect(state)
        traj = data.traj
        apply = run.network.apply
        truncations = np.argwhere(np.asarray(traj.last) & (np.asarray(traj.discount) == 1))
        assert len(truncations) >= 2  # steps 2 and 5 of each env
        for t, n in truncations:
            carry = jax.tree.map(lambda c, n=n: c[n : n + 1], carry0)
            for s in range(t + 1):
                carry, _ = apply(
                    params, carry, traj.obs[s, n][None, None], traj.start[s, n][None, None]
                )
            _, (_, value) = apply(
                params, carry, traj.next_obs[t, n][None, None], jnp.zeros((1, 1), bool)
            )
            np.testing.assert_allclose(data.next_value[t, n], value[0, 0], atol=1e-5)
            assert abs(float(data.next_value[t, n]) - float(traj.value[t + 1, n])) > 1e-6
    finally:
        run.close()


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_failed_async_worker_is_one_line(mode):
    """A worker whose env raises, or whose process dies: one line naming the env."""
    source = host_source("gymnasium/host_env_fixtures:Crash-v0", None, {"after": 2, "mode": mode})
    vector = HostVector(source, 2, asynchronous=True)
    vector.reset(seed=0)
    vector.step(np.zeros(2, np.int32))
    with pytest.raises(HostEnvError) as err:
        vector.step(np.zeros(2, np.int32))
    assert "\n" not in str(err.value) and "Crash-v0" in str(err.value)


def test_failed_async_start_is_one_line_and_frees_its_semaphores(monkeypatch):
    """Workers that die while an asynchronous vector starts (a scheduler's SIGTERM reaches the
    whole process group): one line, and the semaphores of the vector's shared buffers and error
    queue are freed at once, while the error is still held (a run that stops on it exits without
    interpreter teardown, and Python's resource tracker would report them leaked)."""
    from multiprocessing import resource_tracker

    made, live = [], set()
    register, unregister = resource_tracker.register, resource_tracker.unregister

    def tracked_register(name: str, rtype: str) -> None:
        made.append(name)
        live.add(name)
        register(name, rtype)

    def tracked_unregister(name: str, rtype: str) -> None:
        live.discard(name)
        unregister(name, rtype)

    monkeypatch.setattr(resource_tracker, "register", tracked_register)
    monkeypatch.setattr(resource_tracker, "unregister", tracked_unregister)
    label = "gymnasium/host_env_fixtures:DieOnStart-v0"
    source = host_source(label, None, {"parent": os.getpid()})
    with pytest.raises(HostEnvError) as err:
        HostVector(source, 2, asynchronous=True)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{label}: the env vector did not start: ")
    assert made and not live


def _crashing_async_run(*overrides: str):
    """An asynchronous run of two ``Crash-v0`` workers that fail at their 20th step (in the
    second of two 32-step chunks), with ``overrides``."""
    return run_config(
        TINY
        + [
            "env.name='gymnasium/host_env_fixtures:Crash-v0'",
            "+env.kwargs.after=20",
            "env.vector=async",
            "arch.num_envs=2",
            "system.rollout_length=8",
            "arch.total_timesteps=64",
            "arch.num_evaluations=2",
            "arch.target_return=null",
            *overrides,
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exit"])
def test_failed_worker_is_one_line_and_keeps_the_saved_chunk(tmp_path, mode):
    """An env worker that raises, or whose process dies, in the second chunk of an asynchronous
    run: one line naming the env, and the first chunk's record and checkpoint are kept."""
    from stoixlite.run.loop import train
    from stoixlite.tracking.files import METRICS_FILE

    cfg = _crashing_async_run(f"+env.kwargs.mode={mode}")
    with pytest.raises(HostEnvError) as err:
        train(plan_run(cfg), tmp_path / "run")
    message = str(err.value)
    assert "\n" not in message and "Crash-v0" in message
    records = [
        json.loads(line) for line in (tmp_path / "run" / METRICS_FILE).read_text().splitlines()
    ]
    assert [r["step"] for r in records] == [32]
    assert (tmp_path / "run" / "checkpoints").is_dir()


@pytest.mark.slow  # the default run covers a host run's Ctrl-C (test_ctrl_c_anytime)
def test_a_stop_signal_that_also_ended_the_workers_is_a_stop(tmp_path):
    """SIGTERM to a whole process group (a scheduler, ``kill -- -PGID``) reaches the workers of an
    asynchronous run too: the chunk in progress cannot finish, and the run ends as the stop it
    is (exit 128 + 15, one line with the ``resume=`` command of the newest checkpoint), not as
    a failed env."""
    from stoixlite.run.loop import train
    from stoixlite.run.signals import TrainingInterrupted

    cfg = _crashing_async_run("+env.kwargs.mode=exit", f"+env.kwargs.sigterm={os.getpid()}")
    claim = Path(tempfile.gettempdir()) / f"crash-sigterm-{os.getpid()}"  # one signal only
    claim.unlink(missing_ok=True)
    try:
        with pytest.raises(TrainingInterrupted) as stop:
            train(plan_run(cfg), tmp_path / "run")
    finally:
        claim.unlink(missing_ok=True)
    message = str(stop.value)
    assert stop.value.code == 128 + 15 and "\n" not in message
    assert message.startswith("stopped by SIGTERM; the chunk in progress was lost (")
    assert "Crash-v0: a worker process died" in message
    assert message.endswith(
        f"resume from checkpoint 1 with `python -m stoixlite.rec_ppo resume={tmp_path / 'run'}`"
    )
    assert (tmp_path / "run" / "checkpoints" / "1").is_dir()


def test_bad_host_env_configs_are_one_line():
    from stoixlite.config.strict import ConfigError

    cases = {
        "env.name='gymnasium/NoSuchEnv-v9'": "not a registered Gymnasium id",
        "env.name=popgym_ref/no_such_game": "choose popgym_ref/",
        "arch.num_seeds=2": "host envs train one seed per run",
    }
    for override, expected in cases.items():
        with pytest.raises(ConfigError, match=expected) as err:
            run_config(TINY + ["env=gymnasium/CartPole-v1", override])
        assert len(str(err.value).splitlines()) == 1
    with pytest.raises(ConfigError, match="sync only"):
        run_config(
            TINY
            + ["env=gymnasium/CartPole-v1", "env.name=popgym/repeat_previous", "env.vector=async"]
        )


def test_unsupported_spaces_are_refused():
    import gymnasium as gym

    from stoixlite.envs.host.spaces import UnsupportedSpace, action_spec, observation_spec

    with pytest.raises(UnsupportedSpace, match="action space"):
        action_spec(gym.spaces.MultiDiscrete([2, 3]))
    with pytest.raises(UnsupportedSpace, match="observation space"):
        observation_spec(gym.spaces.Text(5))
    flat = observation_spec(
        gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(0, 1, (2,))})
    )
    assert flat.shape == (5,)


def test_missing_gymnasium_is_one_line_with_the_install_hint(monkeypatch):
    from stoixlite.config.strict import ConfigError

    monkeypatch.setitem(__import__("sys").modules, "gymnasium", None)
    with pytest.raises(ConfigError, match=r"pip install 'stoixlite\[host\]'") as err:
        run_config(TINY + ["env=gymnasium/CartPole-v1"])
    assert len(str(err.value).splitlines()) == 1


def test_host_checkpoint_restores_learner_and_keys_exactly(tmp_path):
    """A host run's checkpoint gives back the learner state and the host key bit for bit (the
    envs are not saved: a resumed run resets them, docs/envs.md)."""
    from stoixlite.run.loop import end_chunk, learn_chunk, open_training
    from stoixlite.run.resume import restore

    cfg = run_config(TINY + [CLOCK, "arch.num_envs=2", "system.rollout_length=8"])
    t = open_training(plan_run(cfg), tmp_path / "run", resume=False, sweep=None)
    try:
        t.learn = t.run.compile_programs(t.state, t.key)
        from stoixlite.run.divergence import CollapseWatch

        t.collapse = CollapseWatch(cfg.system.lr, 2)
        t.recorder.start(0, 0)
        record = learn_chunk(t, 0.0)
        end_chunk(t, record, 0.0, None)
        t.recorder.finish(True, t.host.best_eval_return)
        state, key, host, _ = restore(t.run, t.recorder.checkpointer)
        jax.tree.map(
            np.testing.assert_array_equal,
            (state.params, state.opt_state),
            (t.state.params, t.state.opt_state),
        )
        for name in ("carry", "key", "update_step", "episodes"):
            jax.tree.map(
                np.testing.assert_array_equal, getattr(state, name), getattr(t.state, name)
            )
        np.testing.assert_array_equal(key, t.key)
        assert host.chunk == 1
    finally:
        t.run.close()
