"""The learner state a run starts from has one buffer per leaf (the learn chunk donates it), and
``parts._unaliased`` copies exactly the leaves that share a buffer, leaving the others alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_plan

from stoixlite.run.build import build_run
from stoixlite.run.parts import _unaliased


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
