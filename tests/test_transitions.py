"""Stateless networks train on shuffled single transitions; that equals the sequence path.

For a model without state the PPO loss over a set of (t, n) steps does not depend on how the
steps are grouped, so a minibatch of shuffled length-1 sequences gives the same loss and
gradients as the same steps cut into whole-rollout sequences. A recurrent model is the negative
control: its length-1 replay from stored carries differs from its sequence replay once the
parameters move. Also: the ``feedforward`` network is PureJaxRL ppo.py's network, and the 2-D
``Dense``/``matmul`` helpers equal the 3-D originals.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import compose_config, replay_inputs, run_plan

from stoixlite.config.parse import parse
from stoixlite.config.plan import plan_run
from stoixlite.networks.dense import Dense, matmul, outer_sum
from stoixlite.ppo.loss import ppo_loss
from stoixlite.ppo.sequences import make_sequences, sequence_length
from stoixlite.run.build import build_run


def _ppo(cfg):
    return plan_run(parse(cfg)).ppo


OVERRIDES = [
    "env=gymnax/MemoryChain-bsuite",
    "arch.num_envs=4",
    "arch.num_eval_envs=2",
    "arch.total_timesteps=128",
    "arch.num_evaluations=1",
    "system.rollout_length=16",
    "system.num_minibatches=2",
    "network.hidden_size=8",
    "network.embed_size=8",
    "network.head_size=8",
]
ENVS = (0, 2)  # the sequence minibatch: these envs' whole rollouts


def loss_and_grads(exp, shift: float):
    """Loss and gradients of one minibatch, grouped as sequences and as single transitions.

    The parameters are shifted by ``shift`` after the rollout (as after some minibatch steps), so
    a recurrent model's replay from stored carries no longer equals its sequence replay.
    """

    def run(key):
        state, traj, adv, target, before = replay_inputs(exp, key, warmup=3)
        t, n = traj.reward.shape
        sequences = make_sequences(traj, adv, target, before, 0)
        steps = make_sequences(traj, adv, target, before, 1)  # [1, T*N], index t * N + n
        envs = jnp.asarray(ENVS)
        seq_batch = sequences.replace(
            **{
                k: jnp.take(v, envs, axis=1)
                for k, v in vars(sequences).items()
                if k != "init_carry" and v is not None
            },
            init_carry=jax.tree.map(lambda c: c[0, envs], before),
        )
        # The same (t, n) steps as shuffled single transitions.
        index = (jnp.arange(t)[:, None] * n + envs[None, :]).reshape(-1)
        index = jax.random.permutation(jax.random.PRNGKey(7), index)
        step_batch = steps.replace(
            **{
                k: jnp.take(v, index, axis=1)
                for k, v in vars(steps).items()
                if k != "init_carry" and v is not None
            },
            init_carry=jax.tree.map(lambda c: jnp.take(c, index, axis=0), steps.init_carry),
        )
        params = jax.tree.map(lambda p: p + shift, state.params)
        grad = jax.grad(
            lambda p, b: ppo_loss(p, exp.network.apply, b, exp.ppo, state.hyper), has_aux=True
        )
        return grad(params, seq_batch), grad(params, step_batch), traj

    return jax.jit(run)(jax.random.PRNGKey(0))


def _max_rel_diff(a, b) -> float:
    diffs = jax.tree.map(
        lambda x, y: float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(y)) + 1e-12)), a, b
    )
    return max(jax.tree.leaves(diffs))


# mlp by default; feedforward under `pytest -m slow` (CI runs it: .ci/run-slow), 7 s of CPU: the
# minibatches are cut from the rollout the same way for either network (the feedforward network's
# update replays its rollout by default: test_transition_update_replays_rollout).
@pytest.mark.parametrize("network", [pytest.param("feedforward", marks=pytest.mark.slow), "mlp"])
def test_transition_minibatch_equals_sequence_minibatch(network):
    exp = build_run(run_plan(OVERRIDES + [f"network={network}"]))
    assert exp.ppo.transitions
    (g_seq, m_seq), (g_step, m_step), traj = loss_and_grads(exp, shift=0.05)
    assert bool(np.asarray(traj.last).any()), "episodes must end mid-rollout"
    # float32 means of the same 2,048 O(1) terms summed in another order ([T, B] against [T B])
    # differ by up to ~1e-6 absolute; the policy loss cancels to ~1e-4, so an absolute tolerance
    # is the meaningful one there. A wrong pairing of transitions moves the losses by > 1e-4 (the
    # stateful control below).
    for key in ("loss/total", "loss/policy", "loss/value", "loss/entropy"):
        np.testing.assert_allclose(float(m_step[key]), float(m_seq[key]), rtol=1e-5, atol=1e-6)
    assert _max_rel_diff(g_step, g_seq) < 1e-4


def test_recurrent_transitions_differ_from_sequences():
    """Negative control: for a GRU, length-1 replays from the stored carries are not the
    sequence loss once the parameters differ from the rollout's."""
    exp = build_run(run_plan(OVERRIDES + ["network=gru"]))
    assert not exp.ppo.transitions
    (_, m_seq), (_, m_step), _ = loss_and_grads(exp, shift=0.05)
    assert abs(float(m_step["loss/value"]) - float(m_seq["loss/value"])) > 1e-4


def test_stateless_networks_select_transitions():
    for network, expected in (("feedforward", True), ("mlp", True), ("gru", False)):
        cfg = _ppo(compose_config(OVERRIDES + [f"network={network}"]))
        assert cfg.transitions is expected, network
        assert sequence_length(cfg) == (1 if expected else 0)
    off = _ppo(
        compose_config(OVERRIDES + ["network=feedforward", "system.stateless_transitions=false"])
    )
    assert not off.transitions and sequence_length(off) == 0


# feedforward by default; mlp under `pytest -m slow` (4 s of CPU): its transition minibatches
# equal its sequence minibatches by default (test_transition_minibatch_equals_sequence_minibatch).
@pytest.mark.parametrize("network", ["feedforward", pytest.param("mlp", marks=pytest.mark.slow)])
def test_transition_update_replays_rollout(network):
    """The full update on shuffled transitions keeps the rollout/replay identity."""
    exp = build_run(run_plan(OVERRIDES + [f"network={network}", "system.epochs=2"]))
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)
    _, metrics = jax.jit(exp.update)(state)
    assert float(metrics["loss/first_ratio_max_dev"]) < 1e-5
    assert float(metrics["loss/first_value_max_dev"]) < 1e-5
    assert float(metrics["loss/ratio_max_dev"]) > 1e-6  # later minibatches do move the policy


def test_feedforward_is_purejaxrl_network():
    """``network=feedforward`` computes PureJaxRL ppo.py's network (as implemented in
    stoixlite/benchmark/peers/purejaxrl_ppo.py) with the same weights."""
    from stoixlite.benchmark.peers.purejaxrl_ppo import TwoTowers

    exp = build_run(run_plan(["network=feedforward", "env=gymnax/CartPole-v1"]))
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)  # one program, not op by op
    p = state.params["params"]
    assert set(p) == {"actor_mlp", "critic_mlp", "pi", "v"}  # no encoder, no memory parameters
    ref = TwoTowers(num_actions=2)
    ref_params = jax.jit(ref.init)(jax.random.PRNGKey(1), jnp.zeros(4))
    mapping = {
        "actor0": p["actor_mlp"]["Dense_0"],
        "actor1": p["actor_mlp"]["Dense_1"],
        "actor_out": p["pi"]["Dense_0"],
        "critic0": p["critic_mlp"]["Dense_0"],
        "critic1": p["critic_mlp"]["Dense_1"],
        "critic_out": p["v"],
    }
    assert jax.tree.map(jnp.shape, mapping) == jax.tree.map(jnp.shape, ref_params["params"])
    obs = jax.random.normal(jax.random.PRNGKey(2), (3, 5, 4))
    apply = jax.jit(exp.network.apply)
    _, (dist, value) = apply(state.params, state.carry, obs, jnp.zeros((3, 5), bool))
    ref_logits, ref_value = jax.jit(ref.apply)({"params": mapping}, obs)
    np.testing.assert_allclose(dist.logits, ref_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-6)


def test_dense_helpers_equal_the_3d_originals():
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 7))
    w = jax.random.normal(jax.random.PRNGKey(1), (7, 4))
    g = jax.random.normal(jax.random.PRNGKey(2), (5, 3, 4))
    np.testing.assert_allclose(matmul(x, w), jnp.einsum("tbf,fg->tbg", x, w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        outer_sum(x, g), jnp.einsum("tbf,tbg->fg", x, g), rtol=1e-5, atol=1e-5
    )
    params = nn.Dense(4).init(jax.random.PRNGKey(3), x)
    assert jax.tree.map(jnp.shape, Dense(4).init(jax.random.PRNGKey(3), x)) == jax.tree.map(
        jnp.shape, params
    )
    np.testing.assert_allclose(
        Dense(4).apply(params, x), nn.Dense(4).apply(params, x), rtol=1e-5, atol=1e-6
    )


def test_dense_gradients_equal_autodiff_of_the_plain_layer():
    """``Dense`` / ``matmul`` have a hand-written VJP (the weight gradient through
    ``outer_sum``): input, kernel and bias gradients equal autodiff of ``flax.linen.Dense``, and
    second-order gradients still work."""
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 7))
    w = jax.random.normal(jax.random.PRNGKey(1), (5, 3, 4))
    params = nn.Dense(4).init(jax.random.PRNGKey(3), x)

    def loss(module):
        return lambda p, x: jnp.sum(w * jnp.tanh(module.apply(p, x)))

    ours = jax.grad(loss(Dense(4)), argnums=(0, 1))(params, x)
    plain = jax.grad(loss(nn.Dense(4)), argnums=(0, 1))(params, x)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    kernel = params["params"]["kernel"]
    hess = jax.hessian(lambda k: jnp.sum(jnp.tanh(matmul(x, k))))(kernel)
    ref = jax.hessian(lambda k: jnp.sum(jnp.tanh(jnp.einsum("tbf,fg->tbg", x, k))))(kernel)
    np.testing.assert_allclose(hess, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU lowering property")
def test_dense_weight_gradient_contracts_the_left_operands_last_axis():
    """On the CPU the weight gradient's matmul has its left operand's contracted axis last, the
    form XLA:CPU hands to XNNPACK (``x^T g`` as JAX differentiates it contracts axis 0 and runs
    in the slower Eigen kernel; docs/benchmarks.md, "Weight gradients in XNNPACK")."""
    x = jnp.ones((512, 32))
    g = jnp.ones((512, 16))
    dw = jax.jit(lambda x, g: jax.vjp(lambda w: matmul(x, w), jnp.ones((32, 16)))[1](g)[0])
    hlo = dw.lower(x, g).compile().as_text()
    dots = [line for line in hlo.splitlines() if " dot(" in line and "f32[32,16]" in line]
    assert dots, hlo
    assert all("lhs_contracting_dims={1}" in line for line in dots), dots
    plain = jax.jit(lambda x, g: x.T @ g).lower(x, g).compile().as_text()
    assert any("lhs_contracting_dims={0}" in line for line in plain.splitlines() if " dot(" in line)
