"""Set observations: the CardTable env, the permutation-invariant set encoder, config checks.

* ``SetEncoder`` (DeepSets and attention pooling): the output does not change when the slots
  are permuted or when the features of invalid slots change; it does change with a valid item or
  an extra feature (sanity); an empty set gives finite outputs.
* ``sets/card_table``: table sizes, slot layout and rewards against a numpy re-derivation of the
  majority suit from the observations.
* ``network.encoder=set`` on an env without a set observation fails validation in one line; on
  CardTable a PPO update runs and replays the rollout exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY, compose_config, run_plan

from stoixlite.config.parse import parse
from stoixlite.config.strict import ConfigError
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST
from stoixlite.envs.wrappers import wrap_env
from stoixlite.networks.actor_critic import SetEncoder
from stoixlite.run.build import build_run

CAPACITY, WIDTH, EXTRA = 6, 3, 2


def _set_obs(key, batch=4):
    """Random set observations ``[batch, C * (W + 1) + EXTRA]``; slot 0 always valid."""
    k1, k2, k3 = jax.random.split(key, 3)
    items = jax.random.normal(k1, (batch, CAPACITY, WIDTH))
    valid = jax.random.bernoulli(k2, 0.5, (batch, CAPACITY)).at[:, 0].set(True)
    slots = jnp.concatenate([items, valid[..., None].astype(jnp.float32)], axis=-1)
    extra = jax.random.normal(k3, (batch, EXTRA))
    return slots, extra


def _flat(slots, extra):
    return jnp.concatenate([slots.reshape(slots.shape[0], -1), extra], axis=-1)


@pytest.mark.parametrize("pooling", ["deepsets", "attention"])
def test_set_encoder_is_permutation_invariant_and_ignores_masked_slots(pooling):
    enc = SetEncoder((CAPACITY, WIDTH), size=8, layers=2, pooling=pooling)
    slots, extra = _set_obs(jax.random.key(0))
    params = enc.init(jax.random.key(1), _flat(slots, extra))
    apply = jax.jit(enc.apply)
    y = apply(params, _flat(slots, extra))
    assert y.shape == (4, 8)

    perm = jax.random.permutation(jax.random.key(2), CAPACITY)
    np.testing.assert_allclose(apply(params, _flat(slots[:, perm], extra)), y, rtol=1e-5, atol=1e-6)

    invalid = slots[..., -1:] < 0.5
    garbage = jax.random.normal(jax.random.key(3), slots.shape) * 10
    noisy = jnp.where(invalid, garbage.at[..., -1].set(0.0), slots)
    assert not np.allclose(noisy, slots), "test sanity: some slots are invalid"
    np.testing.assert_allclose(apply(params, _flat(noisy, extra)), y, rtol=1e-5, atol=1e-6)

    changed = slots.at[:, 0, 0].add(1.0)  # slot 0 is valid
    assert not np.allclose(apply(params, _flat(changed, extra)), y)
    assert not np.allclose(apply(params, _flat(slots, extra + 1.0)), y)

    empty = slots.at[..., -1].set(0.0)
    assert np.all(np.isfinite(np.asarray(apply(params, _flat(empty, extra)))))


def _decode(obs, capacity):
    slots = np.asarray(obs).reshape(capacity, 6)
    valid = slots[:, -1] > 0.5
    return np.argmax(slots[valid, :4], axis=1), valid


def test_card_table_rewards_follow_the_previous_tables_majority():
    raw = make("sets/card_table", capacity=5, episode_length=6)
    assert raw.set_layout == (5, 5) and raw.observation_space.shape == (30,)
    env = wrap_env(raw, obs_augment=False)
    steps = 20
    actions = jax.random.randint(jax.random.key(0), (steps,), 0, 4)

    def body(carry, a):
        state, ts = carry
        state, nts = env.step(state, a)
        return (state, nts), (ts.observation, nts)

    state, ts0 = env.reset(jax.random.key(1))
    _, (shown, traj) = jax.jit(lambda: jax.lax.scan(body, (state, ts0), actions))()
    scale = 1.0 / 5
    t_in_episode, sizes = 0, set()
    for t in range(steps):
        suits, valid = _decode(shown[t], 5)
        sizes.add(int(valid.sum()))
        assert 1 <= valid.sum() <= 5
        majority = np.argmax(np.bincount(suits, minlength=4))  # ties: lowest suit
        if t_in_episode == 0:
            expected = 0.0
        else:
            expected = scale if int(actions[t]) == majority else -scale
        np.testing.assert_allclose(float(traj.reward[t]), expected, rtol=1e-6)
        t_in_episode += 1
        if int(traj.step_type[t]) == LAST:
            assert t_in_episode == 6 and float(traj.discount[t]) == 0.0
            t_in_episode = 0
    assert len(sizes) > 2, "table sizes vary"


def test_set_encoder_needs_a_set_env():
    with pytest.raises(ConfigError) as err:
        parse(compose_config(["network.encoder=set"]))  # popgym/repeat_previous
    message = str(err.value)
    assert "\n" not in message and message.startswith("network.encoder=")
    with pytest.raises(ConfigError, match="^network.set_pooling="):
        parse(compose_config(["network.set_pooling=max"]))
    parse(compose_config(["env=sets/card_table", "network.encoder=set"]))


def test_ppo_update_on_card_table_with_set_encoder():
    overrides = TINY + ["env=sets/card_table", "network.encoder=set"]
    exp = build_run(run_plan(overrides + ["network.set_pooling=attention"]))
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)
    _, metrics = jax.jit(exp.update)(state)
    assert float(metrics["loss/first_ratio_max_dev"]) < 1e-5
    assert np.isfinite(float(metrics["loss/total"]))
