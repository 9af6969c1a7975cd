"""The learner state a run starts from has one buffer per leaf (the learn chunk donates it), and
``parts._unaliased`` copies exactly the leaves that share a buffer, leaving the others alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_plan

from stoixlite.run.build import build_run
from stoixlite.run.parts import _RUN_ONCE_COMPILER_OPTIONS, _unaliased


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


def test_runs_that_compile_the_same_share_the_initial_state_program():
    """The jobs of a seed sweep in one process (the cached run's copies) compile the initial
    state once: the seed is the program's input, so each run still starts from its own state,
    exactly the one a program compiled for it alone computes. Other hyperparameter values are
    constants of the program: they get a program of their own (the newest kept)."""
    small = ["network=gru", "env=popgym/repeat_first", "arch.num_envs=4", "arch.num_eval_envs=2"]
    small += ["system.rollout_length=8", "system.num_minibatches=2", "arch.total_timesteps=64"]
    small += ["arch.num_evaluations=1", "network.hidden_size=8", "network.embed_size=8"]
    first = build_run(run_plan([*small, "arch.seed=3"]))
    first_state, _ = first.init()
    program = first.compiled["init"][1]
    second = build_run(run_plan([*small, "arch.seed=4"]))
    second_state, _ = second.init()
    assert second.compiled is first.compiled and second.compiled["init"][1] is program
    alone = jax.jit(second.init_state).lower(second._keys()[1]).compile(_RUN_ONCE_COMPILER_OPTIONS)
    expected = alone(second._keys()[1])
    for x, y in zip(jax.tree.leaves(second_state), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    def flat(params):
        return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)])

    assert not np.array_equal(flat(first_state.params), flat(second_state.params))
    other_lr = build_run(run_plan([*small, "arch.seed=4", "system.lr=0.0123"]))
    other_state, _ = other_lr.init()
    assert other_lr.compiled["init"][1] is not program
    np.testing.assert_allclose(np.asarray(other_state.hyper.lr), 0.0123, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(second_state.hyper.lr), np.asarray(first.hyper.lr))
