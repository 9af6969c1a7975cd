"""Recurrent (GRU) PPO on gymnax with PureJaxRL ``ppo_rnn.py``'s recipe: a benchmark reference.

stoixlite's own implementation of the recurrent PPO set-up of PureJaxRL's ``ppo_rnn.py`` (Lu et
al., 2022, https://github.com/luchris429/purejaxrl), so that the benchmark tool (``python -m
stoixlite.benchmark``) can time it beside stoixlite's recurrent networks on one machine; it
contains no PureJaxRL code (``--purejaxrl-dir DIR`` times the original). It runs the PPO loop,
the loss, the optimiser and the hyper-parameters of ``purejaxrl_ppo.py`` beside it with this
policy:

* **network** (:class:`GRUActorCritic`): a 128-unit ReLU embedding (orthogonal sqrt(2)
  kernel), a flax ``GRUCell`` of 128 units scanned over time whose state is set to zeros
  before a step flagged as a reset, then an actor (128 ReLU, orthogonal gain 2 -> logits, gain
  0.01) and a critic (128 ReLU, gain 2 -> value, gain 1); zero biases. The state starts at
  zeros;
* **rollout**: one step at a time, the state reset where the observation starts an episode;
* **minibatches**: the environments, shuffled and split into ``minibatches`` groups; each
  group's whole ``rollout_length``-step sequences are replayed from the state the rollout
  started with, reset at the same steps as in the rollout.

Usage::

    python -m stoixlite.benchmark.peers.purejaxrl_ppo_rnn    # 4 envs, 5e5 steps: SPS, return
    python -m stoixlite.benchmark.peers.purejaxrl_ppo_rnn --num-envs 64
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.initializers import orthogonal

from stoixlite.benchmark.peers.purejaxrl_ppo import Policy, Settings, build, final_return, main

WIDTH = 128

__all__ = [
    "WIDTH",
    "GRUActorCritic",
    "Settings",
    "build",
    "final_return",
    "gru_policy",
    "zero_state",
]


def zero_state(num_envs: int) -> jax.Array:
    return jnp.zeros((num_envs, WIDTH))


class ResettingGRU(nn.Module):
    """One step, ``(state [N, H], (x [N, H], reset [N])) -> (state, out)``; zeros where reset."""

    @nn.compact
    def __call__(self, state: jax.Array, inputs: tuple[jax.Array, jax.Array]):
        x, reset = inputs
        state = jnp.where(reset[:, None], jnp.zeros_like(state), state)
        return nn.GRUCell(features=WIDTH, name="cell")(state, x)


class GRUActorCritic(nn.Module):
    """``(state [N, 128], obs [T, N, F], resets [T, N]) -> (state, logits [T, N, A], value
    [T, N])``."""

    num_actions: int

    @nn.compact
    def __call__(self, state: jax.Array, obs: jax.Array, resets: jax.Array):
        x = nn.relu(nn.Dense(WIDTH, kernel_init=orthogonal(math.sqrt(2)), name="embed")(obs))
        over_time = nn.scan(
            ResettingGRU,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=0,
            out_axes=0,
        )
        state, x = over_time(name="gru")(state, (x, resets))

        def head(out: int, gain: float, name: str) -> jax.Array:
            h = nn.relu(nn.Dense(WIDTH, kernel_init=orthogonal(2.0), name=f"{name}_hidden")(x))
            return nn.Dense(out, kernel_init=orthogonal(gain), name=f"{name}_out")(h)

        return state, head(self.num_actions, 0.01, "actor"), head(1, 1.0, "critic")[..., 0]


def gru_policy(num_actions: int) -> Policy:
    net = GRUActorCritic(num_actions)

    def init(key, obs_dim, num_envs):
        state = zero_state(num_envs)
        params = net.init(
            key, state, jnp.zeros((1, num_envs, obs_dim)), jnp.zeros((1, num_envs), bool)
        )
        return params, state

    def act(params, state, obs, first):
        state, logits, value = net.apply(params, state, obs[None], first[None])
        return state, logits[0], value[0]

    def evaluate(params, state, obs, flags):
        _, logits, value = net.apply(params, state, obs, flags)
        return logits, value

    return Policy(init, act, evaluate, sequences=True)


if __name__ == "__main__":
    main(__doc__.splitlines()[0], "ppo_rnn", gru_policy)
