"""Rollout/replay identity: the first PPO minibatch replays exactly the rollout's log-probs/values.

For every registered memory model, with whole sequences, with BPTT chunks and with chunks after a
burn-in (``system.burn_in``), on an env whose episodes end mid-rollout (MemoryChain: 6 steps) so
resets happen inside training sequences; and with image observations through the cnn encoder
(``pixel/colour_cue``, the encoder convolving a minibatch's frames in slices). A negative control
shows the check can fail: replaying chunks from zeroed carries breaks it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import replay_inputs, run_plan

from stoixlite.networks.memory import available_memories
from stoixlite.ppo import types
from stoixlite.ppo.loss import ppo_loss
from stoixlite.ppo.sequences import make_sequences
from stoixlite.run.build import build_run

OVERRIDES = [
    "env=gymnax/MemoryChain-bsuite",
    "arch.num_envs=3",
    "arch.num_eval_envs=2",
    "arch.total_timesteps=96",
    "arch.num_evaluations=1",
    "system.rollout_length=16",
    "system.num_minibatches=1",
    "network.hidden_size=8",
    "network.embed_size=8",
    "network.head_size=8",
]


def replay_deviations(exp, key, cases=((0, 0), (4, 0)), zero_carries: bool = False):
    """Replay one rollout as training does, for each ``(bptt_length, burn_in)`` case, in one
    compiled call.

    The rollout starts mid-episode with a non-trivial carry (after a 5-step warm-up). Returns the
    loss metrics per case (max |ratio - 1|, max |value - rollout value|) and the trajectory.
    ``zero_carries`` zeroes the carries the chunks start from: all stored carries without a
    burn-in; with one, only the chunks' stored carries (``init_carry``), which the burn-in
    replaces for every chunk but the first. A case ``(bptt_length, burn_in, zero)`` sets it for
    that case alone (several controls in one compiled call).
    """

    def run(key):
        state, traj, adv, target, before = replay_inputs(exp, key, warmup=5)
        metrics = []
        for bptt, burn_in, *zero in cases:
            zero = zero[0] if zero else zero_carries
            stored = before
            if zero and not burn_in:
                stored = jax.tree.map(jnp.zeros_like, before)
            batch = make_sequences(traj, adv, target, stored, bptt, burn_in)
            if zero and burn_in:
                batch = batch.replace(init_carry=jax.tree.map(jnp.zeros_like, batch.init_carry))
            loss = ppo_loss(state.params, exp.network.apply, batch, exp.ppo, state.hyper)
            metrics.append(loss[1])
        return metrics, traj

    return jax.jit(run)(key)


# Whole rollouts, BPTT chunks of 4, and chunks of 4 after a 3-step burn-in (one compile).
CASES = ((0, 0), (4, 0), (4, 3))


# The default run replays a recurrent state (gru) and a memoroid's (memoroid). The other
# models, the windows of inputs (framestack) and attention caches (transformer) among them, run
# under `pytest -m slow` (each compiles its own learner: 4-13 s of CPU), and every model's replay
# runs in .ci/run's step of optimised programs (`-m ""`) after the default run; their carries'
# chunking, resets and batch independence, on which the replay rests, are checked for every
# model in the default run (tests/test_memory_properties.py, tests/test_memory_references.py).
DEFAULT_RUN_MODELS = ("gru", "memoroid")


def _models(names, default=DEFAULT_RUN_MODELS) -> list:
    return [n if n in default else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.parametrize("model", _models(available_memories()))
def test_first_minibatch_replays_rollout(model):
    """For every case, including burn-in, the trained steps replay the rollout exactly."""
    exp = build_run(run_plan(OVERRIDES + [f"network={model}"]))
    all_metrics, traj = replay_deviations(exp, jax.random.PRNGKey(0), CASES)
    assert bool(np.asarray(traj.last).any()), "episodes must end mid-rollout"
    for case, metrics in zip(CASES, all_metrics, strict=True):
        assert float(metrics["loss/ratio_max_dev"]) < 1e-5, (model, case)
        assert float(metrics["loss/value_max_dev"]) < 1e-5, (model, case)


# Image observations through the cnn encoder: uint8 frames [16, 16, 3] in the buffers, episodes
# of 6 steps (pixel/colour_cue, easy), so resets happen inside the sequences.
PIXEL_OVERRIDES = [
    *(o for o in OVERRIDES if not o.startswith("env=")),
    "env=pixel/colour_cue",
    "network.encoder=cnn",
    "network.cnn_channels=[4,8]",
    "network.cnn_slice_frames=10",  # 48 frames a minibatch: 4 slices of 10 and the 8 left
]


# gru by default; memoroid and framestack on pixels under `pytest -m slow` (the cnn encoder
# runs before the memory: the uint8 buffers and the encoder are the same for every model).
@pytest.mark.parametrize("model", _models(["gru", "memoroid", "framestack"], default=("gru",)))
def test_first_minibatch_replays_rollout_with_cnn_on_pixels(model):
    exp = build_run(run_plan(PIXEL_OVERRIDES + [f"network={model}"]))
    all_metrics, traj = replay_deviations(exp, jax.random.PRNGKey(0), CASES)
    assert traj.obs.dtype == jnp.uint8 and traj.obs.shape[2:] == (16, 16, 3)
    assert bool(np.asarray(traj.last).any()), "episodes must end mid-rollout"
    for case, metrics in zip(CASES, all_metrics, strict=True):
        assert float(metrics["loss/ratio_max_dev"]) < 1e-5, (model, case)
        assert float(metrics["loss/value_max_dev"]) < 1e-5, (model, case)


def test_zeroed_chunk_carries_break_the_identity_and_burn_in_replaces_them():
    """A negative control: zeroed stored carries break the identity without burn-in. With
    burn-in only chunk 0 uses its stored carry, so zeroing the others' changes nothing (the
    burn-in recomputes them). All three cases in one compiled call."""
    exp = build_run(run_plan(OVERRIDES))
    key = jax.random.PRNGKey(0)
    cases = ((4, 0, True), (4, 4, True), (4, 4, False))
    (plain, burned, ok), _ = replay_deviations(exp, key, cases)
    assert float(plain["loss/value_max_dev"]) > 1e-4
    assert float(burned["loss/value_max_dev"]) > 1e-4  # chunk 0 has no burn-in: still broken
    # Sequences 0..N-1 are chunk 0; drop them and the rest replay exactly from the burn-in.
    assert float(ok["loss/value_max_dev"]) < 1e-5


def test_update_reports_identity_on_first_minibatch():
    """The full update (epochs x minibatches, BPTT chunks) logs ratio ~1 on its first minibatch."""
    exp = build_run(
        run_plan(
            OVERRIDES + ["system.bptt_length=8", "system.num_minibatches=3", "system.epochs=2"]
        )
    )
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)
    _, metrics = jax.jit(exp.update)(state)
    assert float(metrics["loss/first_ratio_max_dev"]) < 1e-5
    assert float(metrics["loss/first_value_max_dev"]) < 1e-5
    assert float(metrics["loss/ratio_max_dev"]) > 1e-6  # later minibatches do move the policy


def test_burn_in_sequences_hold_the_preceding_steps():
    """Sequence k*N+n's burn-in steps are steps [kL-B, kL) of env n, from the carry before them."""
    t, n, length, burn = 12, 3, 4, 2
    obs = jnp.arange(t * n, dtype=jnp.float32).reshape(t, n, 1)
    traj = types.Transition(
        **{f: obs[..., 0] for f in ("start", "action", "log_prob", "value", "reward")},
        **{f: obs[..., 0] for f in ("discount", "last", "episode_return", "episode_length")},
        invalid_action=obs[..., 0],
        obs=obs,
        next_obs=obs,
    )
    carries = obs[..., 0] * 10.0  # carry before step t of env n: 10 * (t * n + n)
    batch = make_sequences(traj, obs[..., 0], obs[..., 0], carries, length, burn)
    for k in range(t // length):
        for e in range(n):
            s = k * n + e
            assert bool(batch.burn_valid[s]) == (k > 0)
            if k > 0:
                np.testing.assert_array_equal(
                    batch.burn_obs[:, s, 0], np.asarray(obs[k * length - burn : k * length, e, 0])
                )
                assert float(batch.burn_carry[s]) == float(carries[k * length - burn, e])
            assert float(batch.init_carry[s]) == float(carries[k * length, e])


def test_burn_in_zero_is_todays_update():
    """``system.burn_in=0`` builds the sequences (no burn-in fields) and update of before."""
    exp = build_run(run_plan(OVERRIDES + ["system.bptt_length=8"]))
    exp0 = build_run(run_plan(OVERRIDES + ["system.bptt_length=8", "system.burn_in=0"]))
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)
    a, ma = jax.jit(exp.update)(state)
    b, mb = jax.jit(exp0.update)(jax.jit(exp0.init_state)(jax.random.PRNGKey(0), exp0.hyper))
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


KEEPS = [
    (0, 3, 4, 8, 12),
    (0,),  # whole-rollout sequences: no buffer in the loop
    (3, 8),  # step 0 not kept
]


# The attention cache (transformer) under `pytest -m slow` (one 10 s compile): the default run
# keeps the same lists of steps with gru's carry; a window's carries are kept like any pytree.
@pytest.mark.parametrize(
    ("model", "keeps"),
    [("gru", KEEPS), pytest.param("transformer", KEEPS, marks=pytest.mark.slow)],
)
def test_rollout_keeping_equals_rollout(model, keeps):
    """``rollout_keeping`` (the rollout of ``system.rollout_carries=sequence_starts``) records the
    same trajectory as ``rollout``, keeps exactly the carries before the listed steps, and its
    next values equal the batched ``bootstrap_values`` at every step whose value GAE uses (all
    but the terminations, where it is multiplied by ``discount = 0``; episodes of 6 steps end
    inside the rollout; more in tests/test_next_values.py). Every list of kept steps of a model
    in one compiled call (the reference rollout is the same for all)."""
    from stoixlite.ppo.rollout import bootstrap_values, rollout, rollout_keeping

    exp = build_run(run_plan(OVERRIDES + [f"network={model}"]))

    @jax.jit
    def both(key):
        state = exp.init_state(key, exp.hyper)
        state, *_ = rollout(exp.network.apply, exp.env, state, 5)  # mid-episode carry
        length = exp.ppo.rollout_length
        s1, traj1, after, _ = rollout(
            exp.network.apply, exp.env, state, length, record_next_obs=True
        )
        boot1 = bootstrap_values(exp.network.apply, s1.params, traj1, after)
        before = jax.tree.map(
            lambda c0, c: jnp.concatenate([c0[None], c[:-1]], 0), state.carry, after
        )
        kept_runs = [
            rollout_keeping(exp.network.apply, exp.env, state, exp.ppo.rollout_length, keep)
            for keep in keeps
        ]
        return traj1, before, boot1, s1.carry, kept_runs

    traj1, before, boot1, c1, kept_runs = both(jax.random.PRNGKey(3))
    assert bool(np.asarray(traj1.last).any())
    traj1 = traj1.replace(next_obs=None)  # rollout_keeping records none
    used = ~np.asarray(traj1.last & (traj1.discount == 0))
    assert not used.all()
    for keep, (s2, traj2, kept, boot2) in zip(keeps, kept_runs, strict=True):
        for x, y in zip(jax.tree.leaves(traj1), jax.tree.leaves(traj2), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str(keep))
        for b, k in zip(jax.tree.leaves(before), jax.tree.leaves(kept), strict=True):
            np.testing.assert_array_equal(np.asarray(b)[list(keep)], np.asarray(k))
        for x, y in zip(jax.tree.leaves(c1), jax.tree.leaves(s2.carry), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        np.testing.assert_allclose(
            np.asarray(boot2)[used], np.asarray(boot1)[used], rtol=1e-5, atol=1e-6
        )


# Under `pytest -m slow` (CI runs it: .ci/run-slow): four learner compiles,
# about 15 s of CPU. The default run checks the parts this composes: `rollout_keeping` records
# the same trajectory, carries and next values as `rollout` (test_rollout_keeping_equals_rollout)
# and chunks after a burn-in replay the rollout (test_first_minibatch_replays_rollout).
@pytest.mark.parametrize("model", _models(["gru", "transformer"], default=()))
def test_update_is_the_same_with_either_rollout_carries(model):
    """One update with BPTT chunks and burn-in gives the same parameters and metrics whether the
    rollout stores every step's carry or only the sequence starts (up to float rounding of the
    bootstrap), and ``auto`` keeps only the starts for the attention cache, not for the GRU."""
    from stoixlite.ppo.sequences import keeps_sequence_starts

    extra = ["system.bptt_length=8", "system.burn_in=3", "system.epochs=2"]
    updates = {}
    for mode in ("every_step", "sequence_starts"):
        overrides = [f"network={model}", f"system.rollout_carries={mode}", *extra]
        exp = build_run(run_plan(OVERRIDES + overrides))
        state = jax.jit(exp.init_state)(jax.random.PRNGKey(1), exp.hyper)
        updates[mode] = jax.jit(exp.update)(state)
    carry = state.carry
    (a, ma), (b, mb) = updates["every_step"], updates["sequence_starts"]
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
    for key in ma:
        np.testing.assert_allclose(np.asarray(ma[key]), np.asarray(mb[key]), rtol=1e-4, atol=1e-5)
    assert keeps_sequence_starts("auto", carry) == (model == "transformer")
