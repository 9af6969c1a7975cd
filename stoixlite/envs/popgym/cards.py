"""Shared helpers for the POPGym card games (``popgym.core.deck.Deck``).

A popgym deck of ``num_decks`` decks holds ``52 * num_decks`` cards with ids ``0..N-1``. Card ``i``
has suit ``i % 4`` (popgym's ``suits_idx``, suits ordered s, d, c, h), rank ``(i // 4) % 13``
(``ranks_idx``, a=0 .. k=12) and colour ``i % 2`` (``colors_idx``, b=0, r=1).

popgym shuffles the id array ``deck.idx`` and deals from its *end*: the first card dealt is
``idx[-1]``, the second ``idx[-2]`` and so on. The JAX ports store the deck in *deal order*
(``deal_order[j]`` is the j-th card dealt), i.e. ``deal_order = idx[::-1]``; a uniformly random
permutation is an equally valid shuffle in either order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

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
