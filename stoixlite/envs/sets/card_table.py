"""CardTable: a variable-size set of cards on the table; name the majority suit of the last table.

Each step a new table is dealt: ``n`` cards (``n`` uniform in ``1..capacity``), each with a
uniformly random suit (4) and rank (13), placed in random slots of the fixed-capacity table (the
other slots are empty). The observation is the set of cards on the table (see
:mod:`stoixlite.envs.sets`): per slot ``[one_hot(suit) (4), rank / 12 (1)]`` and a validity flag,
``set_layout = (capacity, 5)``.

Action: ``Discrete(4)``, a suit. On steps ``t >= 1`` the reward is ``+1/(L-1)`` if the action is
the majority suit of the *previous* table (the suit with the most cards; ties go to the lowest
suit index) and ``-1/(L-1)`` otherwise; 0 on the first step. The episode terminates after
``L = episode_length`` steps, so returns lie in ``[-1, 1]`` (1: optimal). The task needs one step
of memory and a permutation-invariant reading of a set whose size varies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

NUM_SUITS, NUM_RANKS = 4, 13
ITEM_WIDTH = NUM_SUITS + 1  # one-hot suit, scaled rank


@struct.dataclass
class CardTableState:
    key: jax.Array
    t: jax.Array  # steps taken
    majority: jax.Array  # majority suit of the table currently shown


class CardTable(Environment):
    """See the module docstring. ``capacity``: table slots; ``episode_length``: steps."""

    def __init__(self, capacity: int = 8, episode_length: int = 32):
        if capacity < 1 or episode_length < 2:
            raise ValueError(
                f"need capacity >= 1 and episode_length >= 2, got {capacity}, {episode_length}"
            )
        self.capacity = capacity
        self.episode_length = episode_length
        self.set_layout = (capacity, ITEM_WIDTH)
        size = capacity * (ITEM_WIDTH + 1)
        self.observation_space = Box(low=0.0, high=1.0, shape=(size,))
        self.action_space = Discrete(NUM_SUITS)
        self.max_episode_steps = episode_length
        self.reward_scale = 1.0 / (episode_length - 1)

    def deal(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A new table: ``(observation [capacity * 6], majority suit)``."""
        k_n, k_suit, k_rank, k_slot = jax.random.split(key, 4)
        n = jax.random.randint(k_n, (), 1, self.capacity + 1)
        suits = jax.random.randint(k_suit, (self.capacity,), 0, NUM_SUITS)
        ranks = jax.random.randint(k_rank, (self.capacity,), 0, NUM_RANKS)
        # cards 0..n-1 are on the table, in random slots
        slot_of_card = jax.random.permutation(k_slot, self.capacity)
        valid = (
            jnp.zeros((self.capacity,), bool).at[slot_of_card].set(jnp.arange(self.capacity) < n)
        )
        counts = jnp.sum(jax.nn.one_hot(suits, NUM_SUITS) * valid[:, None], axis=0)
        items = jnp.concatenate(
            [
                jax.nn.one_hot(suits, NUM_SUITS),
                (ranks / (NUM_RANKS - 1.0))[:, None],
                jnp.ones((self.capacity, 1)),
            ],
            axis=1,
        )
        obs = jnp.where(valid[:, None], items, 0.0).reshape(-1).astype(jnp.float32)
        return obs, jnp.argmax(counts).astype(jnp.int32)

    def reset(self, key: jax.Array) -> tuple[CardTableState, TimeStep]:
        key, sub = jax.random.split(key)
        obs, majority = self.deal(sub)
        return CardTableState(key, jnp.int32(0), majority), restart(obs)

    def step(self, state: CardTableState, action: jax.Array) -> tuple[CardTableState, TimeStep]:
        t = state.t + 1
        correct = action == state.majority
        signed = jnp.where(correct, self.reward_scale, -self.reward_scale)
        reward = jnp.where(state.t >= 1, signed, 0.0)
        key, sub = jax.random.split(state.key)
        obs, majority = self.deal(sub)
        terminated = t >= self.episode_length
        return CardTableState(key, t, majority), transition(obs, reward, terminated, False)


@register_env("sets/card_table")
def make_card_table(capacity: int = 8, episode_length: int = 32) -> CardTable:
    """CardTable with ``capacity`` table slots and episodes of ``episode_length`` steps."""
    return CardTable(capacity=capacity, episode_length=episode_length)
