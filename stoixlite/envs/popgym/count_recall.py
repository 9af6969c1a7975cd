"""CountRecall: say how often the queried category has been dealt so far
(``popgym.envs.count_recall``).

Dynamics (identical to popgym 1.0.7): two independently shuffled decks of ``N = 52 * num_decks``
cards, a *value* deck and a *query* deck. Cards are reduced to a category (colour, suit or rank,
``d = 2, 4, 13`` categories; each appears ``C = N / d`` times). At reset and at every step one card
of each deck is dealt and the observation is ``(value category, query category)``. At step ``s``
(1-based) the correct action is the number of value cards dealt so far (reset included, i.e.
before this step's deal) whose category equals the query shown in the previous observation:

* reward ``+1/(N-1)`` if the action equals that count, ``-1/(N-1)`` otherwise (every step);
* terminated when the value deck is empty after the deal (step ``N-1``).

Every episode lasts exactly ``N - 1`` steps; the return lies in ``[-1, 1]``. Never truncated.
popgym's ``error_clamp`` argument is unused by its reward and therefore absent here.

Encoding: popgym's observation ``MultiDiscrete([d, d])`` becomes float32 ``[2 d]``: one-hot of
the value category then one-hot of the query category. Action: ``Discrete(C + 1)``, a count in
``0..C`` (popgym: ``Discrete(max_card_count + 1)``).

Difficulties (popgym ``CountRecall{Easy,Medium,Hard}``): easy ``num_decks=1``, colours
(obs 4, 27 actions, 51 steps); medium ``num_decks=2``, suits (obs 8, 27 actions, 103 steps);
hard ``num_decks=4``, ranks (obs 26, 17 actions, 207 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.popgym import select_difficulty
from stoixlite.envs.popgym.cards import (
    DECK_SIZE,
    one_hot,
    one_hot_np,
    select_category,
    shuffled_deck,
)
from stoixlite.envs.popgym.reference import PopgymReference
from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

DIFFICULTY_PARAMS = {
    "easy": {"num_decks": 1, "deck_type": "colors"},
    "medium": {"num_decks": 2, "deck_type": "suits"},
    "hard": {"num_decks": 4, "deck_type": "ranks"},
}


@struct.dataclass
class CountRecallState:
    """Decks in deal order (int32 ``[N]`` each), ``counts`` of dealt value categories (int32
    ``[d]``) and ``num_dealt`` (int32 scalar, cards dealt from each deck so far)."""

    value_deck: jax.Array
    query_deck: jax.Array
    counts: jax.Array
    num_dealt: jax.Array


class CountRecall(Environment[CountRecallState]):
    """JAX port of ``popgym.envs.count_recall.CountRecall`` (see module docstring)."""

    def __init__(self, num_decks: int = 1, deck_type: str = "colors"):
        self.num_categories, self._category = select_category(deck_type)
        self.num_decks = num_decks
        self.deck_type = deck_type
        self.num_cards = DECK_SIZE * num_decks
        self.max_card_count = self.num_cards // self.num_categories
        self.reward_scale = 1.0 / (self.num_cards - 1)
        self.max_episode_steps = self.num_cards - 1
        self.observation_space = Box(0.0, 1.0, (2 * self.num_categories,), jnp.float32)
        self.action_space = Discrete(self.max_card_count + 1)

    def _obs(self, value: jax.Array, query: jax.Array) -> jax.Array:
        d = self.num_categories
        return jnp.concatenate([one_hot(value, d), one_hot(query, d)])

    def reset_from_decks(
        self, value_deck: jax.Array, query_deck: jax.Array
    ) -> tuple[CountRecallState, TimeStep]:
        """Start an episode from given deal orders (int ``[N]`` each); deals one card of each."""
        value_deck = jnp.asarray(value_deck, jnp.int32)
        query_deck = jnp.asarray(query_deck, jnp.int32)
        value = self._category(value_deck[0])
        counts = one_hot(value, self.num_categories).astype(jnp.int32)
        state = CountRecallState(value_deck, query_deck, counts, jnp.asarray(1, jnp.int32))
        return state, restart(self._obs(value, self._category(query_deck[0])))

    def reset(self, key: jax.Array) -> tuple[CountRecallState, TimeStep]:
        value_key, query_key = jax.random.split(key)
        return self.reset_from_decks(
            shuffled_deck(value_key, self.num_cards), shuffled_deck(query_key, self.num_cards)
        )

    def step(self, state: CountRecallState, action: jax.Array) -> tuple[CountRecallState, TimeStep]:
        t = state.num_dealt
        reward = jnp.where(
            action == self.oracle_action(state), self.reward_scale, -self.reward_scale
        )
        i = jnp.minimum(t, self.num_cards - 1)
        value = self._category(state.value_deck[i])
        query = self._category(state.query_deck[i])
        counts = state.counts + one_hot(value, self.num_categories).astype(jnp.int32)
        terminated = t + 1 == self.num_cards
        state = state.replace(counts=counts, num_dealt=t + 1)
        return state, transition(self._obs(value, query), reward, terminated, False)

    def oracle_action(self, state: CountRecallState) -> jax.Array:
        """The optimal action: the count of the currently queried category among dealt values."""
        return state.counts[self._category(state.query_deck[state.num_dealt - 1])]


def encode_obs(popgym_obs, num_categories: int) -> np.ndarray:
    """Encode a popgym CountRecall observation ``[value, query]`` as float32 ``[2 d]``."""
    value, query = np.asarray(popgym_obs).reshape(2)
    return np.concatenate([one_hot_np(value, num_categories), one_hot_np(query, num_categories)])


@register_env(
    "popgym/count_recall",
    difficulties=DIFFICULTY_PARAMS,
    reference=PopgymReference("count_recall", "CountRecall", encode_obs),
)
def make_count_recall(difficulty: str = "easy") -> CountRecall:
    """CountRecall at ``difficulty`` (easy | medium | hard)."""
    return CountRecall(**select_difficulty(difficulty, DIFFICULTY_PARAMS))
