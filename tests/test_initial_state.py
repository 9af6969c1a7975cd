"""The learner state a run starts from has one buffer per leaf (the learn chunk donates it),
``parts._unaliased`` copies exactly the leaves that share a buffer, leaving the others alone, and
the initial-state program is compiled once for the runs of one program, whatever their seeds,
``Hyper`` values and env params (its inputs), each run starting from its own state."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_plan

from stoixlite.run.build import build_group, build_run
from stoixlite.run.parts import _RUN_ONCE_COMPILER_OPTIONS, Run, _unaliased


def buffers(tree) -> list[tuple[int, ...]]:
    return [
        tuple(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)
        for x in jax.tree.leaves(tree)
    ]


def test_unaliased_copies_only_shared_buffers():
    a, b = jnp.arange(4.0), jnp.ones(3)
    tree = {"a": a, "again": a, "b": b, "c": (a, b)}
    out = _unaliased(tree)
    assert len(set(buffers(out))) == 5  # every leaf its own buffer
    assert out["a"] is a and out["b"] is b  # first uses kept as they are
    assert out["again"] is not a and out["c"][0] is not a and out["c"][1] is not b
    for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# The transformer with 2 seeds by default (the deepest carry: windows, masks, counters, per
# seed); the others under `pytest -m slow`: each compiles a learner of its own (40-90 s of CPU)
# for the same code path (build_run's init).
@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(["network=memoroid", "env=popgym/repeat_previous"], marks=pytest.mark.slow),
        pytest.param(["network=gru", "env=gymnax/Pendulum-v1"], marks=pytest.mark.slow),
        pytest.param(["network=mlp", "env=popgym/labyrinth_escape"], marks=pytest.mark.slow),
        pytest.param(
            ["network=transformer", "env=popgym/repeat_first", "arch.num_seeds=2"],
            marks=pytest.mark.slow,
        ),
        ["network=gru", "env=popgym/repeat_first", "arch.num_seeds=2"],
    ],
)
def test_initial_state_has_one_buffer_per_leaf_and_trains(overrides):
    small = ["arch.num_envs=4", "system.rollout_length=8", "system.num_minibatches=2"]
    small += ["arch.total_timesteps=64", "arch.num_evaluations=1", "network.hidden_size=16"]
    run = build_run(run_plan([*overrides, *small]))
    state, _ = run.init()
    ids = buffers(state)
    assert len(set(ids)) == len(ids)
    new_state, metrics = run.learn(state)  # donates the state
    assert np.isfinite(np.asarray(metrics["loss/total"])).all()


SMALL = ["network=gru", "arch.num_envs=4", "arch.num_eval_envs=2", "system.rollout_length=8"]
SMALL += ["system.num_minibatches=2", "arch.total_timesteps=64", "arch.num_evaluations=1"]
SMALL += ["network.hidden_size=8", "network.embed_size=8"]


def leaves_equal(got, want) -> None:
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got) == len(want)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture
def init_traces(monkeypatch) -> list[Run]:
    """The runs whose :meth:`Run.init_state` is traced from now on (once per compile of the
    initial-state program; ``reset_envs`` runs once per trace)."""
    traced: list[Run] = []
    reset_envs = Run.reset_envs

    def counted(self, key, env_params):
        traced.append(self)
        return reset_envs(self, key, env_params)

    monkeypatch.setattr(Run, "reset_envs", counted)
    return traced


def test_runs_that_compile_the_same_share_the_initial_state_program(init_traces):
    """The jobs of a multirun process with one compile key (the cached run's copies: a sweep
    over seeds, learning rates, entropy coefficients) trace and compile the initial state once:
    the seed and the ``Hyper`` values are the program's inputs, so each run still starts from
    its own state, exactly the one a program compiled for it alone computes, holding its own
    values in buffers of its own (the learn chunk donates the state, not the run's values)."""
    small = [*SMALL, "env=popgym/repeat_first"]
    first = build_run(run_plan([*small, "arch.seed=3"]))
    first_state, _ = first.init()
    program = first.compiled["init"]
    assert [id(run) for run in init_traces] == [id(first)]
    second = build_run(run_plan([*small, "arch.seed=4", "system.lr=0.0123", "system.ent_coef=0.2"]))
    second_state, _ = second.init()
    assert second.compiled is first.compiled and second.compiled["init"] is program
    assert [id(run) for run in init_traces] == [id(first)]  # no second trace
    keys, hyper = second._keys()[1], second.hyper
    alone = jax.jit(second.init_state).lower(keys, hyper).compile(_RUN_ONCE_COMPILER_OPTIONS)
    leaves_equal(second_state, alone(keys, hyper))
    np.testing.assert_allclose(np.asarray(second_state.hyper.lr), 0.0123, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(second_state.hyper.ent_coef), 0.2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(first_state.hyper.lr), np.asarray(first.hyper.lr))
    assert not set(buffers(second_state.hyper)) & set(buffers(second.hyper))

    def flat(params):
        return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)])

    assert not np.array_equal(flat(first_state.params), flat(second_state.params))


# GaussianBandit: arm 1 pays N(mu, .) with mu ~ N(mean_mu, sigma_p^2) drawn at each reset, so
# the reset computes with the env's traced params (EnvParams floats, not in the program key).
BANDIT = [*SMALL, "env=gymnax/GaussianBandit-misc", "arch.num_seeds=2"]
GROUPS = [
    [
        ["arch.seed=1", "+env.kwargs.mean_mu=-0.3", "+env.kwargs.sigma_p=0.7"],
        ["arch.seed=5", "system.lr=0.01", "+env.kwargs.mean_mu=0.4", "+env.kwargs.sigma_p=1.3"],
    ],
    [
        ["arch.seed=2", "system.ent_coef=0.2", "+env.kwargs.mean_mu=2.0"],
        ["arch.seed=2", "system.lr=0.002", "+env.kwargs.sigma_p=0.1"],
    ],
]


def test_groups_of_one_program_share_the_initial_state_program_with_their_own_values(
    init_traces,
):
    """Fused groups of one program key and size (members differing in seed, ``system.lr``,
    ``system.ent_coef`` and env params) compile the initial state once, and each member's lanes
    start exactly where its run alone starts: its own values in ``hyper``, its envs reset with
    its own env params (the bandits' means drawn from its ``mean_mu`` and ``sigma_p``)."""
    groups = [build_group([run_plan([*BANDIT, *m]) for m in members]) for members in GROUPS]
    states = [group.init()[0] for group in groups]
    assert groups[1].compiled is groups[0].compiled
    assert [id(run) for run in init_traces] == [id(groups[0])]  # one for both groups
    for group, state, members in zip(groups, states, GROUPS, strict=True):
        for part, overrides in zip(group.split_members(state), members, strict=True):
            alone = build_run(run_plan([*BANDIT, *overrides]))
            want, _ = alone.init()
            leaves_equal(part, want)
            mu = part.env_state.env_state.env_state.env_state.mu  # [S, N] arm 1's means
            means = alone.hyper.env["mean_mu"], alone.hyper.env["sigma_p"]
            assert abs(float(np.mean(mu)) - float(means[0])) < 4 * float(means[1]) / 8**0.5
    np.testing.assert_allclose(np.asarray(states[1].hyper.ent_coef), [0.2, 0.2, 0.01, 0.01])
    np.testing.assert_allclose(np.asarray(states[0].hyper.env["sigma_p"]), [0.7, 0.7, 1.3, 1.3])
