"""RepeatFirst: output the suit of the first card dealt (``popgym.envs.repeat_first``).

Dynamics (identical to popgym 1.0.7): a deck of ``N = 52 * num_decks`` cards is shuffled and one
card is dealt at reset. Each step, with ``t`` cards dealt so far (``t >= 1``):

* reward: ``+1/(N-1)`` if the action equals the suit of the first card, ``-1/(N-1)`` otherwise
  (every step is rewarded, including the first);
* terminated: ``t == N - 1`` (one card left in the deck before this step's deal);
* then the next card is dealt and its suit observed.

Every episode lasts exactly ``N - 1`` steps and the return lies in ``[-1, 1]`` (1 for the optimal
policy). Never truncated. popgym's observation carries no "first card" flag: only the reset
observation shows the card to repeat (the ``obs_augment`` is-first flag tells the agent which).

Encoding: observation = one-hot of the dealt card's suit, float32 ``[4]`` (popgym:
``Discrete(4)``). Action: ``Discrete(4)``, a suit.

Difficulties (popgym ``RepeatFirst{Easy,Medium,Hard}``): easy ``num_decks=1`` (51 steps), medium
``num_decks=8`` (415 steps), hard ``num_decks=16`` (831 steps).
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
    "easy": {"num_decks": 1},
    "medium": {"num_decks": 8},
    "hard": {"num_decks": 16},
}
RepeatFirstState = DeckState


class RepeatFirst(DealtDeckEnv):
    """JAX port of ``popgym.envs.repeat_first.RepeatFirst`` (see module docstring)."""

    def __init__(self, num_decks: int = 1):
        super().__init__(num_decks, shown="suits")
        self.reward_scale = 1.0 / (self.num_cards - 1)
        self.action_space = Discrete(NUM_SUITS)

    def step(self, state: DeckState, action: jax.Array) -> tuple[DeckState, TimeStep]:
        reward = jnp.where(
            action == self.oracle_action(state), self.reward_scale, -self.reward_scale
        )
        state, card, terminated = self.deal(state)
        return state, transition(self._obs(card), reward, terminated, False)

    def oracle_action(self, state: DeckState) -> jax.Array:
        """The optimal action: the suit of the first card."""
        return suit_of(state.deck[0])


def encode_obs(popgym_obs) -> np.ndarray:
    """Encode a popgym RepeatFirst observation (an int suit) as the port's float32 one-hot."""
    return one_hot_np(popgym_obs, NUM_SUITS)


@register_env(
    "popgym/repeat_first",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("repeat_first", "RepeatFirst", encode_obs),
)
def make_repeat_first(difficulty: str = "easy") -> RepeatFirst:
    """RepeatFirst at ``difficulty`` (easy | medium | hard)."""
    return RepeatFirst(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
