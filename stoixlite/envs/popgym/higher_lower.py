"""HigherLower: guess whether the next card's rank is higher or lower than the current one
(``popgym.envs.higher_lower``).

Dynamics (identical to popgym 1.0.7): a deck of ``N = 52 * num_decks`` cards is shuffled and one
card is dealt at reset. Each step the next card is dealt and compared by rank (ace low, king
high) with the previous one:

* action 0 guesses "higher", action 1 guesses "lower";
* reward ``0`` if the ranks are equal (a push), ``+1/N`` if the guess is right, ``-1/N`` if wrong;
* terminated on step ``N-1`` (the deck held one card before this step's deal);
* observation: the rank of the newly dealt card.

Every episode lasts exactly ``N - 1`` steps; the return lies in ``[-(N-1)/N, (N-1)/N]``. Never
truncated. Counting the cards already seen improves on guessing from the current rank alone.

Encoding: observation = one-hot of the rank, float32 ``[13]`` (popgym: ``Discrete(13)``).
Action: ``Discrete(2)`` (0 = higher, 1 = lower).

Difficulties (popgym ``HigherLower{Easy,Medium,Hard}``): easy ``num_decks=1`` (51 steps), medium
``num_decks=2`` (103 steps), hard ``num_decks=3`` (155 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.cards import DECK_SIZE, NUM_RANKS, one_hot, rank_of, shuffled_deck
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

HIGHER, LOWER = 0, 1
DIFFICULTY_PARAMS = {
    "easy": {"num_decks": 1},
    "medium": {"num_decks": 2},
    "hard": {"num_decks": 3},
}


@struct.dataclass
class HigherLowerState:
    """deck: int32 ``[N]`` card ids in deal order; num_dealt: int32 scalar, cards dealt so far."""

    deck: jax.Array
    num_dealt: jax.Array


class HigherLower(Environment[HigherLowerState]):
    """JAX port of ``popgym.envs.higher_lower.HigherLower`` (see module docstring)."""

    def __init__(self, num_decks: int = 1):
        self.num_decks = num_decks
        self.num_cards = DECK_SIZE * num_decks
        self.reward_scale = 1.0 / self.num_cards
        self.max_episode_steps = self.num_cards - 1
        self.observation_space = Box(0.0, 1.0, (NUM_RANKS,), jnp.float32)
        self.action_space = Discrete(2)

    def _obs(self, card: jax.Array) -> jax.Array:
        return one_hot(rank_of(card), NUM_RANKS)

    def reset_from_deck(self, deck: jax.Array) -> tuple[HigherLowerState, TimeStep]:
        """Start an episode from a given deal order (int ``[N]``); deals the first card."""
        deck = jnp.asarray(deck, jnp.int32)
        state = HigherLowerState(deck=deck, num_dealt=jnp.asarray(1, jnp.int32))
        return state, restart(self._obs(deck[0]))

    def reset(self, key: jax.Array) -> tuple[HigherLowerState, TimeStep]:
        return self.reset_from_deck(shuffled_deck(key, self.num_cards))

    def step(self, state: HigherLowerState, action: jax.Array) -> tuple[HigherLowerState, TimeStep]:
        t = state.num_dealt
        current = rank_of(state.deck[t - 1])
        card = state.deck[jnp.minimum(t, self.num_cards - 1)]
        upcoming = rank_of(card)
        right = (upcoming > current) == (action == HIGHER)
        signed = jnp.where(right, self.reward_scale, -self.reward_scale)
        reward = jnp.where(upcoming == current, 0.0, signed)
        terminated = t == self.num_cards - 1
        state = state.replace(num_dealt=t + 1)
        return state, transition(self._obs(card), reward, terminated, False)


def encode_obs(popgym_obs) -> np.ndarray:
    """Encode a popgym HigherLower observation (an int rank) as the port's float32 one-hot."""
    out = np.zeros(NUM_RANKS, np.float32)
    out[int(popgym_obs)] = 1.0
    return out


@register_env("popgym/higher_lower")
def make_higher_lower(difficulty: str = "easy") -> HigherLower:
    """HigherLower at ``difficulty`` (easy | medium | hard)."""
    return HigherLower(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
