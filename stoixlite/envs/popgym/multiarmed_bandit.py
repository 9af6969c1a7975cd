"""MultiarmedBandit: episodic Bernoulli bandits (``popgym.envs.multiarmed_bandit``).

Dynamics (identical to popgym 1.0.7): at reset each of ``n`` arms gets a payout probability
``p_i ~ U[0, 1)`` (float32). Each step the chosen arm pays out when ``u < p[action]`` with a fresh
``u ~ U[0, 1)``:

* observation: 1 on a payout, 0 otherwise (0 after reset);
* reward: ``+1/L`` on a payout, ``-1/L`` otherwise, so the return lies in ``[-1, 1]``;
* never terminated; truncated after ``L`` steps (time limit, discount 1).

The observation does not say which arm was pulled: the previous action must be part of the
agent's input (popgym's ``obs_requires_prev_action``), hence ``obs_augment: true`` in the config.

Encoding: observation = one-hot of the payout bit, float32 ``[2]`` (popgym: ``Discrete(2)``).
Action: ``Discrete(n)`` (popgym: ``Discrete(n)``).

Randomness: ``u`` is drawn from the key in the state; the pure transition given ``u`` is
:meth:`MultiarmedBandit.step_with_uniform`, which the tests feed with the reference's own draws
(popgym draws float64 ``u``; the tests pass ``u`` rounded *down* to float32, which makes
``u < p`` decide exactly as in float64 because ``p`` is a float32).

Difficulties (popgym ``MultiarmedBandit{Easy,Medium,Hard}``): ``(n, L)`` = (10, 200), (20, 400),
(30, 600).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.envs.actions import is_valid_action
from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

DIFFICULTY_PARAMS = {
    "easy": {"num_bandits": 10, "episode_length": 200},
    "medium": {"num_bandits": 20, "episode_length": 400},
    "hard": {"num_bandits": 30, "episode_length": 600},
}


@struct.dataclass
class BanditState:
    """probs: float32 ``[n]`` payout probabilities; num_steps: int32; key: PRNG key."""

    probs: jax.Array
    num_steps: jax.Array
    key: jax.Array


class MultiarmedBandit(Environment[BanditState]):
    """JAX port of ``popgym.envs.multiarmed_bandit.MultiarmedBandit`` (see module docstring)."""

    def __init__(self, num_bandits: int = 10, episode_length: int = 200):
        self.num_bandits = int(num_bandits)
        self.max_episode_length = int(episode_length)
        self.max_episode_steps = self.max_episode_length
        self.reward_scale = 1.0 / self.max_episode_length
        self.observation_space = Box(0.0, 1.0, (2,), jnp.float32)
        self.action_space = Discrete(self.num_bandits)

    def reset_from_probs(
        self, probs: jax.Array, key: jax.Array | None = None
    ) -> tuple[BanditState, TimeStep]:
        """Start an episode with the given payout probabilities (float32 ``[n]``)."""
        key = jax.random.PRNGKey(0) if key is None else key
        state = BanditState(
            probs=jnp.asarray(probs, jnp.float32), num_steps=jnp.asarray(0, jnp.int32), key=key
        )
        return state, restart(jax.nn.one_hot(0, 2, dtype=jnp.float32))

    def reset(self, key: jax.Array) -> tuple[BanditState, TimeStep]:
        key, sub = jax.random.split(key)
        return self.reset_from_probs(jax.random.uniform(sub, (self.num_bandits,)), key)

    def step_with_uniform(
        self, state: BanditState, action: jax.Array, u: jax.Array
    ) -> tuple[BanditState, TimeStep]:
        """The transition given the payout draw ``u`` (float32 scalar in ``[0, 1)``)."""
        valid = is_valid_action(self.action_space, action)  # an invalid arm never pays out
        arm = jnp.where(valid, action, 0)
        payout = valid & (jnp.asarray(u, jnp.float32) < state.probs[arm])
        reward = jnp.where(payout, self.reward_scale, -self.reward_scale)
        truncated = state.num_steps >= self.max_episode_length - 1
        state = state.replace(num_steps=state.num_steps + 1)
        obs = jax.nn.one_hot(payout.astype(jnp.int32), 2, dtype=jnp.float32)
        return state, transition(obs, reward, False, truncated)

    def step(self, state: BanditState, action: jax.Array) -> tuple[BanditState, TimeStep]:
        key, sub = jax.random.split(state.key)
        return self.step_with_uniform(state.replace(key=key), action, jax.random.uniform(sub))

    def oracle_action(self, state: BanditState) -> jax.Array:
        """The arm with the highest payout probability (maximises the expected return)."""
        return jnp.argmax(state.probs).astype(jnp.int32)


@register_env(
    "popgym/multiarmed_bandit",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("multiarmed_bandit", "MultiarmedBandit"),
)
def make_multiarmed_bandit(difficulty: str = "easy") -> MultiarmedBandit:
    """MultiarmedBandit at ``difficulty`` (easy | medium | hard)."""
    return MultiarmedBandit(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
