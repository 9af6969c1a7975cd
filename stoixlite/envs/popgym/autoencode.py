"""Autoencode: watch a sequence of cards, then recite their suits in reverse order
(``popgym.envs.autoencode``).

Dynamics (identical to popgym 1.0.7), with ``N = 52 * num_decks`` cards and ``s`` the 1-based
index of the current step:

* reset: shuffle, deal the first card; observation ``(mode=WATCH, suit of card 0)``;
* watch steps ``s = 1 .. N-1``: deal card ``s`` (0-based deal index), reward 0 whatever the
  action; the observation shows its suit with mode WATCH, except on step ``N-1`` (the deck is now
  empty) where the mode flag already reads PLAY while the last card's suit is still shown;
* play steps ``s = N .. 2N-1``: the correct action is the suit of card ``2N-1-s`` (the cards in
  reverse deal order: last dealt first); reward ``+1/N`` if right, ``-1/N`` if wrong; the
  observation is ``(mode=PLAY, suit 0)`` (popgym shows the suit of card id 0, i.e. suit index 0,
  not a blank); terminated on step ``2N-1`` when the first card has been recited.

Every episode lasts exactly ``2N - 1`` steps, N of them rewarded; the return lies in ``[-1, 1]``.
Never truncated.

Encoding: popgym's observation ``Tuple(Discrete(2) mode, Discrete(4) suit)`` (mode PLAY=0,
WATCH=1) becomes float32 ``[6]``: one-hot mode (2) then one-hot suit (4). Action: ``Discrete(4)``.

Difficulties (popgym ``Autoencode{Easy,Medium,Hard}``): easy ``num_decks=1`` (103 steps), medium
``num_decks=2`` (207 steps), hard ``num_decks=3`` (311 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.cards import (
    DECK_SIZE,
    NUM_SUITS,
    one_hot,
    one_hot_np,
    shuffled_deck,
    suit_of,
)
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

PLAY, WATCH = 0, 1
DIFFICULTY_PARAMS = {
    "easy": {"num_decks": 1},
    "medium": {"num_decks": 2},
    "hard": {"num_decks": 3},
}


@struct.dataclass
class AutoencodeState:
    """deck: int32 ``[N]`` card ids in deal order; t: int32 scalar, steps taken since reset."""

    deck: jax.Array
    t: jax.Array


class Autoencode(Environment[AutoencodeState]):
    """JAX port of ``popgym.envs.autoencode.Autoencode`` (see module docstring)."""

    def __init__(self, num_decks: int = 1):
        self.num_decks = num_decks
        self.num_cards = DECK_SIZE * num_decks
        self.reward_scale = 1.0 / self.num_cards
        self.max_episode_steps = 2 * self.num_cards - 1
        self.observation_space = Box(0.0, 1.0, (2 + NUM_SUITS,), jnp.float32)
        self.action_space = Discrete(NUM_SUITS)

    @staticmethod
    def _obs(mode: jax.Array, suit: jax.Array) -> jax.Array:
        return jnp.concatenate([one_hot(mode, 2), one_hot(suit, NUM_SUITS)])

    def reset_from_deck(self, deck: jax.Array) -> tuple[AutoencodeState, TimeStep]:
        """Start an episode from a given deal order (int ``[N]``); deals the first card."""
        deck = jnp.asarray(deck, jnp.int32)
        state = AutoencodeState(deck=deck, t=jnp.asarray(0, jnp.int32))
        return state, restart(self._obs(jnp.asarray(WATCH), suit_of(deck[0])))

    def reset(self, key: jax.Array) -> tuple[AutoencodeState, TimeStep]:
        return self.reset_from_deck(shuffled_deck(key, self.num_cards))

    def step(self, state: AutoencodeState, action: jax.Array) -> tuple[AutoencodeState, TimeStep]:
        n = self.num_cards
        s = state.t + 1
        watching = s <= n - 1
        dealt = state.deck[jnp.clip(s, 0, n - 1)]
        watch_obs = self._obs(jnp.where(s < n - 1, WATCH, PLAY), suit_of(dealt))
        play_obs = self._obs(jnp.asarray(PLAY), jnp.asarray(0))
        signed = jnp.where(
            action == self.oracle_action(state), self.reward_scale, -self.reward_scale
        )
        reward = jnp.where(watching, 0.0, signed)
        terminated = s == 2 * n - 1
        obs = jnp.where(watching, watch_obs, play_obs)
        return state.replace(t=s), transition(obs, reward, terminated, False)

    def oracle_action(self, state: AutoencodeState) -> jax.Array:
        """The optimal action: during play, the suit of the card to recite (0 while watching)."""
        s = state.t + 1
        target = suit_of(state.deck[jnp.clip(2 * self.num_cards - 1 - s, 0, self.num_cards - 1)])
        return jnp.where(s >= self.num_cards, target, 0)


def encode_obs(popgym_obs) -> np.ndarray:
    """Encode a popgym Autoencode observation ``(mode, suit)`` as the port's float32 ``[6]``."""
    mode, suit = popgym_obs
    return np.concatenate([one_hot_np(mode, 2), one_hot_np(suit, NUM_SUITS)])


@register_env(
    "popgym/autoencode",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("autoencode", "Autoencode", encode_obs),
)
def make_autoencode(difficulty: str = "easy") -> Autoencode:
    """Autoencode at ``difficulty`` (easy | medium | hard)."""
    return Autoencode(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
