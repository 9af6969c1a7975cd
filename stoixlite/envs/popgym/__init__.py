"""JAX ports of POPGym environments, one module per environment.

Each module defines an :class:`~stoixlite.envs.types.Environment` subclass that reproduces the
corresponding ``popgym`` environment step for step (observations, rewards, termination and
episode length), and registers a factory ``popgym/<module_name>`` taking
``difficulty: str = "easy"`` (``easy`` | ``medium`` | ``hard``, popgym's ``*Easy``, ``*Medium``
and ``*Hard`` classes). Observations are float32 vectors: popgym's ``Discrete(n)`` observations
are one-hot encoded, ``MultiDiscrete`` ones are concatenated one-hots and ``Tuple`` ones are
concatenations of their encoded parts. See ``docs/envs.md`` for the table of environments.

The equivalence with ``popgym`` is proven by ``tests/test_popgym_<env>.py`` through the replay
harness ``tests/popgym_harness.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DIFFICULTIES = ("easy", "medium", "hard")


def select_difficulty(difficulty: str, table: Mapping[str, Any]) -> Any:
    """Return ``table[difficulty]``; raise ``ValueError`` naming the allowed values otherwise."""
    if difficulty not in table:
        allowed = ", ".join(sorted(table, key=_rank))
        raise ValueError(f"unknown difficulty {difficulty!r}; allowed values: {allowed}")
    return table[difficulty]


def _rank(name: str) -> int:
    return DIFFICULTIES.index(name) if name in DIFFICULTIES else len(DIFFICULTIES)
