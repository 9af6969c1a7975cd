"""Concentration: flip face-down cards two at a time and find matching pairs
(``popgym.envs.concentration``).

Dynamics (identical to popgym 1.0.7): ``N = 52 * num_decks`` cards lie face down in a shuffled
row; cards match when their category (colour, ``d = 2``, or rank, ``d = 13``) is equal. Each
action flips the card at one position. With ``L = ceil(2N - N / (2N - 1))`` (the expected length
of a perfect-memory game):

* the observation shows, for every position, the category of the card if it is face up (matched)
  or flipped in the current pair, else the face-down marker ``d``; it is taken right after the
  flip, so a failed pair is visible for one step before it is turned face down again;
* flipping a card that is already face up ends the pair: reward ``-k/L`` with ``k`` the number of
  cards of the current pair flipped so far (1 or 2), and both go face down;
* otherwise the second flip of a pair scores ``+1/(N/2)`` if the two cards match and are at
  different positions (they stay face up), and ``-2/L`` if not (flipping the same position twice
  is a failure); the first flip of a pair scores 0;
* terminated when every card is face up (only on a successful pair);
* truncated on step ``L``. On a step that both completes the game and reaches ``L``, popgym sets
  both flags; here terminated wins (discount 0).

The return lies in ``[-1, 1]`` (1 for perfect play, which finishes in N steps). popgym declares
``obs_requires_prev_action``: the previous-action wrapper (``obs_augment``) is needed to know which
position was flipped.

Encoding: popgym's observation ``MultiDiscrete([d + 1] * N)`` becomes float32 ``[N * (d + 1)]``,
the per-position one-hots concatenated in position order. Action: ``Discrete(N)``, a position.

Difficulties (popgym ``Concentration{Easy,Medium,Hard}``): easy ``num_decks=1``, colours
(obs 156, 52 actions, L = 104); medium ``num_decks=2``, colours (obs 312, 104 actions, L = 208);
hard ``num_decks=1``, ranks (obs 728, 52 actions, L = 104).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.actions import is_valid_action
from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.cards import DECK_SIZE, one_hot, select_category, shuffled_deck
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

DECK_TYPES = ("colors", "ranks")
DIFFICULTY_PARAMS = {
    "easy": {"num_decks": 1, "deck_type": "colors"},
    "medium": {"num_decks": 2, "deck_type": "colors"},
    "hard": {"num_decks": 1, "deck_type": "ranks"},
}


@struct.dataclass
class ConcentrationState:
    """``cards``: int32 ``[N]`` card id at each position; ``face_up``: bool ``[N]`` matched cards;
    ``pending``: int32 position flipped first in the current pair, -1 if none; ``t``: int32 steps
    taken since reset."""

    cards: jax.Array
    face_up: jax.Array
    pending: jax.Array
    t: jax.Array


class Concentration(Environment[ConcentrationState]):
    """JAX port of ``popgym.envs.concentration.Concentration`` (see module docstring)."""

    def __init__(self, num_decks: int = 1, deck_type: str = "ranks"):
        self.num_categories, self._category = select_category(deck_type, DECK_TYPES)
        self.num_decks = num_decks
        self.deck_type = deck_type
        n = self.num_cards = DECK_SIZE * num_decks
        self.facedown = self.num_categories  # the face-down marker value
        self.episode_length = math.ceil(2 * n - (n / (2 * n - 1)))
        self.success_reward = 1.0 / (n // 2)
        self.failure_reward = -1.0 / self.episode_length
        self.max_episode_steps = self.episode_length
        self.observation_space = Box(0.0, 1.0, (n * (self.num_categories + 1),), jnp.float32)
        self.action_space = Discrete(n)

    def _obs(self, cards: jax.Array, visible: jax.Array) -> jax.Array:
        values = jnp.where(visible, self._category(cards), self.facedown)
        return one_hot(values, self.num_categories + 1).reshape(-1)

    def reset_from_cards(self, cards: jax.Array) -> tuple[ConcentrationState, TimeStep]:
        """Start an episode with card ids ``cards`` (int ``[N]``) at positions ``0..N-1``."""
        cards = jnp.asarray(cards, jnp.int32)
        face_up = jnp.zeros(self.num_cards, jnp.bool_)
        state = ConcentrationState(
            cards, face_up, jnp.asarray(-1, jnp.int32), jnp.asarray(0, jnp.int32)
        )
        return state, restart(self._obs(cards, face_up))

    def reset(self, key: jax.Array) -> tuple[ConcentrationState, TimeStep]:
        return self.reset_from_cards(shuffled_deck(key, self.num_cards))

    def step(
        self, state: ConcentrationState, action: jax.Array
    ) -> tuple[ConcentrationState, TimeStep]:
        # An invalid action flips nothing and keeps the pair open; it pays what flipping a
        # face-up card does (-1/L, or -2/L with a card pending): no more than any valid flip.
        valid = is_valid_action(self.action_space, action)
        flip = jnp.where(valid, action, 0)
        positions = jnp.arange(self.num_cards)
        has_pending = state.pending >= 0
        pending = jnp.maximum(state.pending, 0)
        flipped = (valid & (positions == flip)) | (has_pending & (positions == pending))
        obs = self._obs(state.cards, state.face_up | flipped)

        already_up = state.face_up[flip] | (has_pending & state.face_up[pending])
        categories = self._category(state.cards)
        match = (categories[pending] == categories[flip]) & (pending != flip)
        success = valid & ~already_up & has_pending & match
        pair_reward = jnp.where(success, self.success_reward, 2 * self.failure_reward)
        reward = jnp.where(
            already_up | ~valid,
            self.failure_reward * (1 + has_pending),
            jnp.where(has_pending, pair_reward, 0.0),
        )
        face_up = state.face_up | (success & flipped)
        terminated = success & jnp.all(face_up)
        truncated = state.t >= self.episode_length - 1
        new_pending = jnp.where(already_up | has_pending, -1, flip)
        new_pending = jnp.where(valid, new_pending, state.pending).astype(jnp.int32)
        state = state.replace(face_up=face_up, pending=new_pending, t=state.t + 1)
        return state, transition(obs, reward, terminated, truncated)


def encode_obs(popgym_obs, num_categories: int) -> np.ndarray:
    """Encode a popgym Concentration observation (int ``[N]``, ``d`` = face down) as float32
    ``[N * (d + 1)]``."""
    values = np.asarray(popgym_obs).reshape(-1)
    return np.eye(num_categories + 1, dtype=np.float32)[values].reshape(-1)


@register_env(
    "popgym/concentration",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("concentration", "Concentration", encode_obs),
)
def make_concentration(difficulty: str = "easy") -> Concentration:
    """Concentration at ``difficulty`` (easy | medium | hard)."""
    return Concentration(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
