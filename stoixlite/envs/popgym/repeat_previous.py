"""RepeatPrevious: output the suit of the card dealt k steps ago (``popgym.envs.repeat_previous``).

Dynamics (identical to popgym 1.0.7): a deck of ``N = 52 * num_decks`` cards is shuffled and one
card is dealt at reset. Each step, with ``t`` cards dealt so far (``t >= 1``):

* reward: ``0`` if ``t < k``; otherwise ``+1/(N-k)`` if the action equals the suit of the card dealt
  at position ``t-k`` (0-based; for ``k = 1`` that is the card currently observed) and
  ``-1/(N-k)`` if not;
* terminated: ``t == N - 1`` (one card left in the deck before this step's deal);
* then the next card is dealt and its suit observed.

Hence every episode lasts exactly ``N - 1`` steps, ``N - k`` of them rewarded, and the return lies
in ``[-1, 1]`` (1 for the optimal policy). Never truncated.

Encoding: observation = one-hot of the dealt card's suit, float32 ``[4]`` (popgym:
``Discrete(4)``). Action: ``Discrete(4)``, a suit (popgym: ``Discrete(4)``).

Difficulties (popgym ``RepeatPrevious{Easy,Medium,Hard}``): easy ``num_decks=1, k=4`` (51 steps),
medium ``num_decks=2, k=32`` (103 steps), hard ``num_decks=3, k=64`` (155 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.cards import NUM_SUITS, DealtDeckEnv, DeckState, one_hot_np, suit_of
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Discrete, TimeStep, transition

DIFFICULTY_PARAMS = {
    "easy": {"num_decks": 1, "k": 4},
    "medium": {"num_decks": 2, "k": 32},
    "hard": {"num_decks": 3, "k": 64},
}
RepeatPreviousState = DeckState


class RepeatPrevious(DealtDeckEnv):
    """JAX port of ``popgym.envs.repeat_previous.RepeatPrevious`` (see module docstring)."""

    def __init__(self, num_decks: int = 1, k: int = 4):
        super().__init__(num_decks, shown="suits")
        self.k = k
        if not 0 < k < self.num_cards:
            raise ValueError(f"k must be in [1, {self.num_cards - 1}], got {k}")
        self.reward_scale = 1.0 / (self.num_cards - k)
        self.action_space = Discrete(NUM_SUITS)

    def step(self, state: DeckState, action: jax.Array) -> tuple[DeckState, TimeStep]:
        t = state.num_dealt
        target = suit_of(state.deck[jnp.maximum(t - self.k, 0)])
        signed = jnp.where(action == target, self.reward_scale, -self.reward_scale)
        reward = jnp.where(t >= self.k, signed, 0.0)
        state, card, terminated = self.deal(state)
        return state, transition(self._obs(card), reward, terminated, False)

    def oracle_action(self, state: DeckState) -> jax.Array:
        """The optimal action in ``state`` (suit of the card dealt k steps ago; 0 before that)."""
        t = state.num_dealt
        return jnp.where(t >= self.k, suit_of(state.deck[jnp.maximum(t - self.k, 0)]), 0)


def encode_obs(popgym_obs) -> np.ndarray:
    """Encode a popgym RepeatPrevious observation (an int suit) as the port's float32 one-hot."""
    return one_hot_np(popgym_obs, NUM_SUITS)


@register_env(
    "popgym/repeat_previous",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("repeat_previous", "RepeatPrevious", encode_obs),
)
def make_repeat_previous(difficulty: str = "easy") -> RepeatPrevious:
    """RepeatPrevious at ``difficulty`` (easy | medium | hard)."""
    return RepeatPrevious(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
