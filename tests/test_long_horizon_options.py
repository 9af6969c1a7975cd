"""Long-horizon training options: chrono gate init and the POPGym protocol preset."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import compose_config

from stoixlite.config.parse import parse
from stoixlite.config.plan import plan_run
from stoixlite.networks.memory import build_memory
from stoixlite.networks.memory._common import gate_bias_init


def test_gate_bias_zero_period_is_zeros():
    bias = gate_bias_init(("reset", "keep", "new"), 0.0)(jax.random.PRNGKey(0), (12,))
    np.testing.assert_array_equal(np.asarray(bias), np.zeros(12))


@pytest.mark.parametrize("period", [8.0, 512.0])
def test_chrono_gate_bias(period):
    """Keep bias log(u), u in [1, T-1]; write bias -log(u); other gates zero."""
    h = 1000
    bias = np.asarray(
        gate_bias_init(("write", "keep", "cell", "out"), period)(jax.random.PRNGKey(1), (4 * h,))
    )
    write, keep, cell, out = np.split(bias, 4)
    assert keep.min() >= 0.0 and keep.max() <= np.log(period - 1) + 1e-6
    assert keep.mean() > 0.5 * np.log(period - 1)  # spread over the range, not collapsed
    np.testing.assert_allclose(write, -keep)
    np.testing.assert_array_equal(cell, 0.0)
    np.testing.assert_array_equal(out, 0.0)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_chrono_init_keeps_the_state(name):
    """At init with chrono_period, a zero input keeps > 90 % of the state per step (vs ~50 %)."""

    def kept(period: float) -> float:
        mem = build_memory(name, hidden_size=64, chrono_period=period, parent=None)
        carry = jax.tree.map(lambda c: c + 1.0, mem.initialize_carry(8))
        x, start = jnp.zeros((1, 8, 4)), jnp.zeros((1, 8), bool)
        params = mem.init(jax.random.PRNGKey(0), carry, (x, start))
        new, _ = mem.apply(params, carry, (x, start))
        state = new if name == "gru" else new[0]  # LSTM: the cell state c
        return float(jnp.mean(state))

    assert kept(512.0) > 0.9
    assert kept(0.0) < 0.7


def test_popgym_protocol_preset():
    cfg = compose_config(["+protocol=popgym", "network=gru", "env=popgym/repeat_first"])
    plan = plan_run(parse(cfg))
    ppo, hyper = plan.ppo, plan.hyper
    assert cfg.arch.total_timesteps == 15_000_000 and ppo.num_envs == 64
    assert ppo.rollout_length == 1024 and ppo.bptt_length == 0
    assert ppo.num_envs * ppo.rollout_length // ppo.num_minibatches == 8 * 1024
    assert cfg.network.hidden_size == 256 and cfg.network.embed_size == 128
    assert cfg.network.head_size == 128 and cfg.env.obs_augment is True
    assert cfg.env.obs_prev_action is True  # the paper feeds it to every task
    assert hyper.gamma == 0.99
    # RLlib's PPO defaults the paper ran with, over the env's own (repeat_first: lr 3e-3, 512)
    assert ppo.epochs == 30 and hyper.lr == 5e-5 and ppo.anneal_lr is False
    assert hyper.gae_lambda == 1.0 and hyper.clip_eps == 0.3 and hyper.ent_coef == 0.0
    assert hyper.vf_coef == 1.0 and hyper.value_clip_eps == 0.0
    assert ppo.normalize_advantages is False
