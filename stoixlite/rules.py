"""Field rules: what one configuration value allows, as a check and in words.

Neutral (imports nothing of stoixlite): the config schema (:mod:`stoixlite.config.schema`) and the
owners of allowed values (e.g. the memory models' shared field bounds,
:mod:`stoixlite.networks.memory.rules`) declare their fields' rules with it; the strict parser
(:mod:`stoixlite.config.strict`) applies them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    """A field's constraint: ``ok(value)`` on the converted value, ``allowed`` says it in words
    (a callable for lists owned elsewhere, read only when an error is reported)."""

    allowed: str | Callable[[], str]
    ok: Callable[[Any], bool] = lambda value: True
    # words for one refused value, where what to say depends on it (e.g. which part is missing)
    refusal: Callable[[Any], str] | None = None

    def describe(self, value: Any = dataclasses.MISSING) -> str:
        if self.refusal is not None and value is not dataclasses.MISSING:
            return self.refusal(value)
        return self.allowed if isinstance(self.allowed, str) else self.allowed()


def rule(check: Rule, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field checked by ``check`` (with an optional default)."""
    return field(default=default, metadata={"rule": check})


def choice(options: Callable[[], Sequence[Any]]) -> Rule:
    """One of ``options()`` (asked of the owner of the list when checked)."""
    return Rule(lambda: f"choose one of {list(options())}", lambda value: value in options())


def number_in(low: float, high: float, low_open: bool = False) -> Rule:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``): NaN and +-inf are
    refused whatever the bounds."""
    bracket = "(" if low_open else "["
    return Rule(
        f"must be a finite number in {bracket}{float(low)}, {float(high)}]",
        lambda v: math.isfinite(v) and (v > low if low_open else v >= low) and v <= high,
    )


# Sizes, counts and seeds become int32 array dimensions, loop bounds or PRNG seeds: larger
# integers overflow there (or build absurd arrays) instead of failing here.
INT_LIMIT = 2**31 - 1
POSITIVE_INT = Rule(f"must be a positive integer <= {INT_LIMIT}", lambda v: 0 < v <= INT_LIMIT)
NON_NEGATIVE_INT = Rule(f"must be an integer in [0, {INT_LIMIT}]", lambda v: 0 <= v <= INT_LIMIT)
POSITIVE = number_in(0.0, math.inf, low_open=True)
POSITIVE_INTS = Rule(
    f"must be a non-empty list of positive integers <= {INT_LIMIT}",
    lambda v: len(v) > 0 and all(0 < x <= INT_LIMIT for x in v),
)
