"""Rollout/replay identity: the first PPO minibatch replays exactly the rollout's log-probs/values.

For every registered memory model, with whole sequences and with BPTT chunks, on an env whose
episodes end mid-rollout (MemoryChain: 6 steps) so resets happen inside training sequences. A
negative control shows the check can fail: replaying chunks from zeroed carries breaks it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import compose_config

from stoixlite.networks.memory import available_memories
from stoixlite.ppo.gae import gae_advantages
from stoixlite.ppo.learner import make_sequences
from stoixlite.ppo.loss import ppo_loss
from stoixlite.ppo.rollout import bootstrap_values, rollout
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


def replay_deviations(exp, key, bptts=(0, 4), zero_carries: bool = False):
    """Replay one rollout as training does, for each BPTT length, in one compiled call.

    The rollout starts mid-episode with a non-trivial carry (after a 5-step warm-up). Returns the
    loss metrics per BPTT length (max |ratio - 1|, max |value - rollout value|) and the trajectory.
    """

    def run(key):
        state = exp.init_state(key)
        state, _, _ = rollout(exp.network.apply, exp.env, state, 5)
        initial_carry = state.carry
        state, traj, carries_after = rollout(
            exp.network.apply, exp.env, state, exp.ppo.rollout_length
        )
        next_value = bootstrap_values(exp.network.apply, state.params, traj, carries_after)
        adv, target = gae_advantages(
            traj.reward, traj.discount, traj.last, traj.value, next_value, 0.99, 0.95
        )
        before = jax.tree.map(
            lambda c0, c: jnp.concatenate([c0[None], c[:-1]], 0), initial_carry, carries_after
        )
        if zero_carries:
            before = jax.tree.map(jnp.zeros_like, before)
        metrics = [
            ppo_loss(
                state.params,
                exp.network.apply,
                make_sequences(traj, adv, target, before, b),
                exp.ppo,
            )[1]
            for b in bptts
        ]
        return metrics, traj

    return jax.jit(run)(key)


@pytest.mark.parametrize("model", available_memories())
def test_first_minibatch_replays_rollout(model):
    exp = build_run(compose_config(OVERRIDES + [f"network.name={model}"]))
    all_metrics, traj = replay_deviations(exp, jax.random.PRNGKey(0))
    assert bool(np.asarray(traj.last).any()), "episodes must end mid-rollout"
    for bptt, metrics in zip((0, 4), all_metrics, strict=True):
        assert float(metrics["loss/ratio_max_dev"]) < 1e-5, (model, bptt)
        assert float(metrics["loss/value_max_dev"]) < 1e-5, (model, bptt)


def test_zeroed_chunk_carries_break_the_identity():
    exp = build_run(compose_config(OVERRIDES))
    (metrics,), _ = replay_deviations(exp, jax.random.PRNGKey(0), bptts=(4,), zero_carries=True)
    assert float(metrics["loss/value_max_dev"]) > 1e-4


def test_update_reports_identity_on_first_minibatch():
    """The full update (epochs x minibatches, BPTT chunks) logs ratio ~1 on its first minibatch."""
    exp = build_run(
        compose_config(
            OVERRIDES + ["system.bptt_length=8", "system.num_minibatches=3", "system.epochs=2"]
        )
    )
    state = exp.init_state(jax.random.PRNGKey(0))
    _, metrics = jax.jit(exp.update)(state)
    assert float(metrics["loss/first_ratio_max_dev"]) < 1e-5
    assert float(metrics["loss/first_value_max_dev"]) < 1e-5
    assert float(metrics["loss/ratio_max_dev"]) > 1e-6  # later minibatches do move the policy
