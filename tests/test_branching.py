"""``arch.branching``: ``skip`` (data-dependent branches that skip rare work, the CPU's choice) and
``mask`` (masked computation, an accelerator's) collect the same trajectory and train alike.

Equality: for gru, ffm (a memoroid), mlp (stateless, shuffled transitions) and a transformer with
kept carries (with BPTT chunks and burn-in, which the masked rollout keeps through its segment
scans), on CartPole with a time limit of 5 steps in 16-step rollouts (several truncations per env:
the later ones are the in-loop bootstrap values), with auto-resets on most steps, actions of which
half are invalid (the gymnax-style worst-valid-action sweep), and image observations
(``pixel/colour_cue``, whose bootstrap the masked rollout evaluates in its loop), with 1 and 2
seeds. The trajectory, the env and learner states after it and the kept carries are equal bit for
bit (the same operations on the same inputs); the bootstrap values are the same network call on
other batch shapes and agree to float rounding (rtol 1e-5; observed: exact or a few ulp).

Structure (the reason ``mask`` exists): the learn chunk traced with ``arch.branching=mask``
(``jax.make_jaxpr``, no compile) holds no ``while`` or ``cond`` (``lax.switch`` is a ``cond``)
inside any ``scan`` (the loops over updates, rollout steps, epochs, minibatches and sequence
replay), for every registered memory model, vector and image observations, with and without kept
carries, 1 and 2 seeds; and the same check finds the branches of ``arch.branching=skip``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_config, run_plan

from stoixlite.benchmark.programs import branches_in_loops
from stoixlite.config.plan import plan_run, resolve_branching
from stoixlite.envs.registry import make
from stoixlite.envs.wrapper_base import Wrapper
from stoixlite.envs.wrappers import make_batched_env
from stoixlite.networks.memory import available_memories
from stoixlite.ppo.learner import make_update_phases
from stoixlite.run.build import build_run

SMALL = [
    "arch.num_envs=8",
    "arch.num_eval_envs=2",
    "arch.total_timesteps=384",
    "arch.num_evaluations=1",
    "system.rollout_length=16",
    "system.epochs=2",
    "system.num_minibatches=2",
    "network.hidden_size=16",
    "network.embed_size=16",
    "network.head_size=16",
]
CARTPOLE_5 = ["env=gymnax/CartPole-v1", "+env.kwargs.max_steps_in_episode=5"]
KEPT = ["system.rollout_carries=sequence_starts"]


class HalfInvalidActions(Wrapper):
    """Action 1 becomes ``n + 1`` (invalid) before the env sees it: about half the actions of a
    random policy are invalid, so batches mix valid and invalid actions."""

    def step(self, state, action):
        return self._env.step(state, jnp.where(action == 1, self.action_space.n + 1, action))


def build(overrides: list[str], branching: str, invalid: bool = False):
    """The run of ``overrides`` with ``arch.branching=branching`` and its update phases (the
    env's actions half invalid with ``invalid``)."""
    plan = run_plan([*SMALL, *overrides, f"arch.branching={branching}"])
    cfg, run = plan.config, build_run(plan)
    assert run.ppo.branching == branching
    if invalid:
        raw = HalfInvalidActions(make(cfg.env.name, **cfg.env.factory_kwargs))
        env = make_batched_env(
            raw, run.ppo.num_envs, obs_augment=cfg.env.obs_augment, branching=branching
        )
        run = dataclasses.replace(run, env=env)
    phases = make_update_phases(run.network.apply, run.env, run.ppo)
    return run, phases


def collect(overrides: list[str], branching: str, seeds: int, invalid: bool = False):
    """``(state before, state after, Collected)`` of one rollout of each of ``seeds`` seeds."""
    run, phases = build(overrides, branching, invalid)
    keys = jax.random.split(jax.random.PRNGKey(3), seeds)
    init = jax.vmap(run.init_state, in_axes=(0, None))
    state = jax.jit(init)(keys, run.hyper)
    after, data = jax.jit(jax.vmap(phases.collect))(state)
    return state, after, data


def assert_trees_equal(a, b, floats_rtol: float = 0.0):
    """Leaf by leaf equal; float leaves within ``floats_rtol`` (0: exactly)."""

    def check(x, y):
        if floats_rtol and jnp.issubdtype(x.dtype, jnp.floating):
            np.testing.assert_allclose(x, y, rtol=floats_rtol, atol=floats_rtol / 10)
        else:
            np.testing.assert_array_equal(x, y)

    jax.tree.map(check, a, b)


CASES = {
    "gru": ["network=gru", *CARTPOLE_5],
    "ffm": ["network=ffm", *CARTPOLE_5],
    "mlp": ["network=mlp", *CARTPOLE_5],
    "gru_chunks_burn_in": ["network=gru", *CARTPOLE_5, "system.bptt_length=8", "system.burn_in=4"],
    "gru_kept_burn_in": [
        "network=gru",
        *CARTPOLE_5,
        *KEPT,
        "system.bptt_length=8",
        "system.burn_in=3",
    ],
    "transformer_kept": ["network=transformer", *CARTPOLE_5, *KEPT],
    "transformer_kept_burn_in": [
        "network=transformer",
        *CARTPOLE_5,
        *KEPT,
        "system.bptt_length=8",
        "system.burn_in=3",
    ],
    "gru_pixels": ["network=gru", "env=pixel/colour_cue"],
    "gru_pixels_kept": ["network=gru", "env=pixel/colour_cue", *KEPT, "system.bptt_length=4"],
}
# The default run covers each path of the masked rollout once (10-20 s a case on 2 cores):
# the carry after every step with vector observations (bootstrap after the loop) and kept carries
# with burn-in (segment scans of two offsets, bootstrap in the loop, two seeds). Slow: frames
# (the bootstrap in the loop, as with kept carries) and the other models, which run the same
# rollout code.
COLLECT_DEFAULT = {("gru", 1), ("gru_kept_burn_in", 2)}


@pytest.mark.parametrize(
    ("case", "seeds"),
    [
        pytest.param(
            case, seeds, marks=() if (case, seeds) in COLLECT_DEFAULT else pytest.mark.slow
        )
        for case in CASES
        for seeds in (1, 2)
    ],
)
def test_skip_and_mask_collect_the_same_rollout(case, seeds):
    overrides = CASES[case]
    invalid = "colour_cue" not in " ".join(overrides)
    _, skip_after, skip = collect(overrides, "skip", seeds, invalid)
    _, mask_after, mask = collect(overrides, "mask", seeds, invalid)
    traj = skip.traj
    if invalid:
        assert 0.2 < float((traj.action == 1).mean()) < 0.8  # played as n + 1: invalid
        truncated = np.asarray(traj.last & (traj.discount != 0)).sum(axis=1)  # [S, N]
        assert truncated.max() >= 2  # later truncations: the loop's bootstrap values
    assert np.asarray(traj.last).any()
    # The worst-valid-action sweep steps the env inside a cond's branch (skip) or a select
    # (mask): XLA at the tests' optimisation level (conftest: JAX_DISABLE_MOST_OPTIMIZATIONS)
    # vectorises the physics differently, a last-bit difference of the states (equal at the
    # users' level); everything discrete (actions, step types) stays equal.
    rtol = 1e-5 if invalid else 0.0
    assert_trees_equal(skip.traj, mask.traj, rtol)
    assert_trees_equal(skip.chunk_carry, mask.chunk_carry, rtol)
    assert_trees_equal(skip.burn_carry, mask.burn_carry, rtol)
    assert_trees_equal(skip_after, mask_after, rtol)
    np.testing.assert_allclose(skip.next_value, mask.next_value, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Structure: no data-dependent branch inside the learn chunk's loops with arch.branching=mask
# --------------------------------------------------------------------------------------------

OBS = {
    "vector": ["env=gymnax/CartPole-v1", "+env.kwargs.max_steps_in_episode=5"],
    "pixel": ["env=pixel/colour_cue"],
}
CARRIES = {
    "every_step": ["system.rollout_carries=every_step"],
    # kept carries with BPTT chunks and burn-in: the masked rollout's segment scans
    "kept": [*KEPT, "system.bptt_length=8", "system.burn_in=4"],
}
# The default run traces these (model, observations, carries, seeds); the rest of the product
# is slow (each trace takes 1-3 s on 2 cores): the loops they differ in are the memory models'
# own, which the representatives below cover for each kind (RNN cell, memoroid, attention
# window, stateless).
STRUCTURE_DEFAULT = {
    ("gru", "vector", "every_step", 1),
    ("ffm", "vector", "kept", 2),
    ("transformer", "pixel", "kept", 1),
    ("mlp", "pixel", "every_step", 2),
    ("lstm", "pixel", "every_step", 1),
}


def learn_chunk_jaxpr(overrides: list[str]):
    """``jax.make_jaxpr`` of the run's compiled learn chunk (all seeds), traced, not compiled."""
    run = build_run(run_plan([*SMALL, *overrides]))
    return jax.make_jaxpr(run.learn)(jax.eval_shape(run.initial_states))


@pytest.mark.parametrize(
    ("model", "obs", "carries", "seeds"),
    [
        pytest.param(*case, marks=() if case in STRUCTURE_DEFAULT else pytest.mark.slow)
        for case in (
            (model, obs, carries, seeds)
            for model in available_memories()
            for obs in OBS
            for carries in CARRIES
            for seeds in (1, 2)
        )
    ],
)
def test_masked_learn_chunk_has_no_data_dependent_branch_in_a_loop(model, obs, carries, seeds):
    overrides = [f"network={model}", *OBS[obs], *CARRIES[carries], f"arch.num_seeds={seeds}"]
    jaxpr = learn_chunk_jaxpr([*overrides, "arch.branching=mask"])
    found = branches_in_loops(jaxpr)
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize(
    ("obs", "carries", "expected"),
    [
        # the truncation bootstrap (run_if), the auto-reset (switch); no invalid-action sweep:
        # the policy's categorical covers exactly the env's actions (test below)
        (
            "vector",
            "every_step",
            {("ppo/rollout.py", "while"), ("envs/wrappers.py", "cond")},
        ),
        # ... and the kept carries' buffer write
        (
            "pixel",
            "kept",
            {("ppo/rollout.py", "while"), ("ppo/rollout.py", "cond"), ("envs/wrappers.py", "cond")},
        ),
    ],
)
def test_the_structure_check_finds_the_branches_of_skip(obs, carries, expected):
    """Negative control: the same check on ``arch.branching=skip`` finds the per-step branches
    that ``mask`` removes."""
    overrides = ["network=gru", *OBS[obs], *CARRIES[carries], "arch.branching=skip"]
    found = branches_in_loops(learn_chunk_jaxpr(overrides))
    assert expected <= {(b.source.split(":")[0], b.primitive) for b in found}, found


def test_branching_auto_is_skip_on_cpus_and_mask_on_accelerators():
    assert resolve_branching("auto", "cpu") == "skip"
    assert resolve_branching("auto", "gpu") == "mask"
    assert resolve_branching("auto", "tpu") == "mask"
    assert resolve_branching("skip", "gpu") == "skip"
    assert resolve_branching("mask", "cpu") == "mask"
    cfg = run_config(SMALL)
    assert cfg.arch.branching == "auto"
    assert plan_run(cfg).ppo.branching == ("skip" if jax.default_backend() == "cpu" else "mask")
    for chosen in ("skip", "mask"):
        assert run_plan([*SMALL, f"arch.branching={chosen}"]).ppo.branching == chosen


# --------------------------------------------------------------------------------------------
# The policy's actions are valid by construction: no sweep over the candidate actions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("branching", ["skip", "mask"])
def test_policy_actions_step_the_env_once_not_once_per_candidate(branching, monkeypatch):
    """A categorical policy over exactly the env's ``Discrete`` actions never plays an invalid
    move, so a gymnax-style env steps each env once per rollout step: not once per candidate
    action (``mask``: every candidate stepped and one selected) nor behind a branch on the
    batch (``skip``: a ``cond`` per step). A wrapper that may change actions
    (:class:`HalfInvalidActions`) keeps the sweep: the negative control. Counted at run time: a
    host callback on each stepped observation runs once per element of its batch."""
    from stoixlite.envs.gymnax_style import GymnaxStyleEnv

    num_envs, num_actions, length = 8, 2, 16
    stepped: list[int] = []
    inner_step = GymnaxStyleEnv._step

    def counted(self, state, action):
        state, ts = inner_step(self, state, action)
        jax.debug.callback(lambda _: stepped.append(1), ts.observation)
        return state, ts

    monkeypatch.setattr(GymnaxStyleEnv, "_step", counted)

    def steps_and_conds(invalid: bool) -> tuple[int, list]:
        run, phases = build(["network=mlp", *CARTPOLE_5], branching, invalid)
        state = jax.jit(run.init_state)(jax.random.PRNGKey(0), run.hyper)
        stepped.clear()
        jax.block_until_ready(jax.jit(phases.collect)(state))
        jax.effects_barrier()
        jaxpr = jax.make_jaxpr(phases.collect)(state)
        conds = [b for b in branches_in_loops(jaxpr) if b.source.startswith("envs/actions.py")]
        return len(stepped), conds

    steps, conds = steps_and_conds(invalid=False)
    assert steps == length * num_envs
    assert not conds, conds
    steps, conds = steps_and_conds(invalid=True)
    if branching == "mask":
        assert steps == length * num_envs * num_actions
    else:
        assert conds, "the skip sweep's cond is gone with an action-changing wrapper"
        assert steps > length * num_envs  # the invalid steps ran the sweep
