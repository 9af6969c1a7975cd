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

from stoixlite.envs.actions import is_valid_action
from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.cards import NUM_RANKS, DealtDeckEnv, DeckState, one_hot_np, rank_of
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Discrete, TimeStep, transition

HIGHER, LOWER = 0, 1
DIFFICULTY_PARAMS = {
    "easy": {"num_decks": 1},
    "medium": {"num_decks": 2},
    "hard": {"num_decks": 3},
}
HigherLowerState = DeckState


class HigherLower(DealtDeckEnv):
    """JAX port of ``popgym.envs.higher_lower.HigherLower`` (see module docstring)."""

    def __init__(self, num_decks: int = 1):
        super().__init__(num_decks, shown="ranks")
        self.reward_scale = 1.0 / self.num_cards
        self.action_space = Discrete(2)

    def step(self, state: DeckState, action: jax.Array) -> tuple[DeckState, TimeStep]:
        current = rank_of(state.deck[state.num_dealt - 1])
        state, card, terminated = self.deal(state)
        upcoming = rank_of(card)
        valid = is_valid_action(self.action_space, action)  # an invalid guess is always wrong
        right = ((upcoming > current) == (action == HIGHER)) & valid
        signed = jnp.where(right, self.reward_scale, -self.reward_scale)
        reward = jnp.where(upcoming == current, 0.0, signed)
        return state, transition(self._obs(card), reward, terminated, False)


def encode_obs(popgym_obs) -> np.ndarray:
    """Encode a popgym HigherLower observation (an int rank) as the port's float32 one-hot."""
    return one_hot_np(popgym_obs, NUM_RANKS)


@register_env(
    "popgym/higher_lower",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("higher_lower", "HigherLower", encode_obs),
)
def make_higher_lower(difficulty: str = "easy") -> HigherLower:
    """HigherLower at ``difficulty`` (easy | medium | hard)."""
    return HigherLower(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
