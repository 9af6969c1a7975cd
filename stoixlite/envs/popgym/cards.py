"""Shared helpers for the POPGym card games (``popgym.core.deck.Deck``).

A popgym deck of ``num_decks`` decks holds ``52 * num_decks`` cards with ids ``0..N-1``. Card ``i``
has suit ``i % 4`` (popgym's ``suits_idx``, suits ordered s, d, c, h), rank ``(i // 4) % 13``
(``ranks_idx``, a=0 .. k=12) and colour ``i % 2`` (``colors_idx``, b=0, r=1).

popgym shuffles the id array ``deck.idx`` and deals from its *end*: the first card dealt is
``idx[-1]``, the second ``idx[-2]`` and so on. The JAX ports store the deck in *deal order*
(``deal_order[j]`` is the j-th card dealt), i.e. ``deal_order = idx[::-1]``; a uniformly random
permutation is an equally valid shuffle in either order.

:class:`DealtDeckEnv` is the common skeleton of the games that deal one shuffled deck, one card at
reset and one per step, showing a category of the dealt card (HigherLower, RepeatFirst,
RepeatPrevious).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.types import Box, Environment, TimeStep, restart

DECK_SIZE = 52
NUM_SUITS = 4
NUM_RANKS = 13
NUM_COLORS = 2


def suit_of(card: jax.Array) -> jax.Array:
    """popgym ``suits_idx`` of card ids (any shape): 0..3."""
    return card % NUM_SUITS


def rank_of(card: jax.Array) -> jax.Array:
    """popgym ``ranks_idx`` of card ids (any shape): 0..12 (ace low)."""
    return (card // NUM_SUITS) % NUM_RANKS


def color_of(card: jax.Array) -> jax.Array:
    """popgym ``colors_idx`` of card ids (any shape): 0..1."""
    return card % NUM_COLORS


def shuffled_deck(key: jax.Array, num_cards: int) -> jax.Array:
    """A uniformly random deal order of ``num_cards`` card ids, int32 ``[num_cards]``."""
    return jax.random.permutation(key, num_cards).astype(jnp.int32)


def deal_order_from_popgym(deck) -> np.ndarray:
    """Deal order (int32 ``[N]``) of a freshly reset ``popgym.core.deck.Deck``: ``idx[::-1]``."""
    return np.ascontiguousarray(np.asarray(deck.idx)[::-1]).astype(np.int32)


def one_hot(x: jax.Array, n: int) -> jax.Array:
    """float32 one-hot of integer ``x`` (any shape) over ``n`` classes, shape ``x.shape + (n,)``."""
    return jax.nn.one_hot(x, n, dtype=jnp.float32)


def one_hot_np(index, n: int) -> np.ndarray:
    """numpy float32 one-hot ``[n]`` of an integer (a popgym ``Discrete(n)`` observation)."""
    out = np.zeros(n, np.float32)
    out[int(index)] = 1.0
    return out


# Card categories: deck_type name -> (number of categories, card id -> category).
CATEGORIES: dict[str, tuple[int, Callable[[jax.Array], jax.Array]]] = {
    "colors": (NUM_COLORS, color_of),
    "suits": (NUM_SUITS, suit_of),
    "ranks": (NUM_RANKS, rank_of),
}


def select_category(
    deck_type: str, allowed: Sequence[str] = tuple(CATEGORIES)
) -> tuple[int, Callable[[jax.Array], jax.Array]]:
    """``(num_categories, card -> category)`` of ``deck_type``; ``ValueError`` unless allowed."""
    if deck_type not in allowed:
        raise ValueError(f"unknown deck_type {deck_type!r}; allowed values: {list(allowed)}")
    return CATEGORIES[deck_type]


@struct.dataclass
class DeckState:
    """deck: int32 ``[N]`` card ids in deal order; num_dealt: int32 scalar, cards dealt so far."""

    deck: jax.Array
    num_dealt: jax.Array


class DealtDeckEnv(Environment[DeckState]):
    """A shuffled deck of ``N = 52 * num_decks`` cards, one dealt at reset and one per step.

    The observation is the one-hot ``[d]`` of the dealt card's ``shown`` category (a
    :data:`CATEGORIES` key). Every episode lasts ``N - 1`` steps: :meth:`deal` terminates the step
    on which the deck held one card. Subclasses set ``action_space`` and implement ``step``.
    """

    def __init__(self, num_decks: int, shown: str):
        self.num_decks = num_decks
        self.num_cards = DECK_SIZE * num_decks
        self.max_episode_steps = self.num_cards - 1
        self.num_shown, self._shown = CATEGORIES[shown]
        self.observation_space = Box(0.0, 1.0, (self.num_shown,), jnp.float32)

    def _obs(self, card: jax.Array) -> jax.Array:
        return one_hot(self._shown(card), self.num_shown)

    def reset_from_deck(self, deck: jax.Array) -> tuple[DeckState, TimeStep]:
        """Start an episode from a given deal order (int ``[N]``); deals the first card."""
        deck = jnp.asarray(deck, jnp.int32)
        state = DeckState(deck=deck, num_dealt=jnp.asarray(1, jnp.int32))
        return state, restart(self._obs(deck[0]))

    def reset(self, key: jax.Array) -> tuple[DeckState, TimeStep]:
        return self.reset_from_deck(shuffled_deck(key, self.num_cards))

    def deal(self, state: DeckState) -> tuple[DeckState, jax.Array, jax.Array]:
        """Deal the next card: ``(state, card, terminated)``, terminated on step ``N - 1``."""
        t = state.num_dealt
        card = state.deck[jnp.minimum(t, self.num_cards - 1)]
        return state.replace(num_dealt=t + 1), card, t == self.num_cards - 1
