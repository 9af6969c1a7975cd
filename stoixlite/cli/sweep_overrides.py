"""The runs of a sweep written as Hydra writes it on the command line (``key=a,b,c``).

:func:`sweep_combinations` expands overrides the way Hydra's basic sweeper expands a multirun's:
every comma list (a "discrete sweep") is one axis, the combinations are their product in the
order the overrides are given (the last one varies fastest), and each combination is a list of
plain ``key=value`` overrides (``range(...)`` and ``choice(...)`` list values too). Brackets,
quotes and ``${...}`` are Hydra's grammar's, so ``network.cnn_channels=[16,32]`` is one value.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException


def sweep_combinations(overrides: Sequence[str]) -> list[list[str]]:
    """Every combination of ``overrides`` (one for overrides without a comma list), as Hydra's
    basic sweeper makes a multirun's jobs (an override without a list as given, a listed value
    as Hydra writes it: ``1e-4`` is ``0.0001``). Raises ``ValueError`` (one line naming the
    override) for one that does not parse or sweeps an ``interval(...)`` (not a list of
    values)."""
    parser = OverridesParser.create()
    axes: list[list[str]] = []
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as err:
            reason = (str(err).strip().splitlines() or ["malformed"])[0]
            raise ValueError(f"{text}: {reason}") from None
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes.append([text])  # as given
        elif override.is_discrete_sweep():
            axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            raise ValueError(f"{text}: an interval is not a list of values (give them with commas)")
    return [list(combination) for combination in itertools.product(*axes)]
