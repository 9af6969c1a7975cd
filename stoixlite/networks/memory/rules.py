"""The bounds of the memory models' shared keyword arguments, checked by name for every model.

A field named here (``hidden_size``, ``num_heads``, ``r_min``, ...) is checked beyond its type for
every memory model that has it; a model's own ``config_errors`` checks what is particular to it
(e.g. the bounds of ``memory_length``, ``conv_size`` and ``frames``) and runs once these pass.
The config parser (:mod:`stoixlite.config.checks`) asks this module.
"""

from __future__ import annotations

import math

from stoixlite.networks.memory.scan import STRATEGIES
from stoixlite.rules import POSITIVE, POSITIVE_INT, Rule, choice, number_in

FRACTION = Rule("must be a finite number in [0, 1)", lambda v: 0 <= v < 1)
CHRONO = Rule(
    "must be 0 (off) or a finite number > 1 (the longest initial retention, in steps)",
    lambda v: v == 0 or (math.isfinite(v) and v > 1),
)
# Memory keys checked beyond their type, by name, for every model that has them.
FIELD_RULES = {
    "hidden_size": POSITIVE_INT,
    "num_layers": POSITIVE_INT,
    "state_size": POSITIVE_INT,  # or null where the model allows it (lru, s5: hidden_size)
    "trace_size": POSITIVE_INT,
    "context_size": POSITIVE_INT,
    "unroll": POSITIVE_INT,
    "num_heads": POSITIVE_INT,
    "key_size": POSITIVE_INT,
    "chunk_size": POSITIVE_INT,
    "expand": POSITIVE_INT,
    "ff_size": POSITIVE_INT,
    "dt_rank": POSITIVE_INT,
    "eps": POSITIVE,
    "scan": choice(lambda: list(STRATEGIES)),
    "chrono_period": CHRONO,
    "min_period": POSITIVE,
    "max_period": POSITIVE,
    "dt_min": POSITIVE,
    "dt_max": POSITIVE,
    "r_min": FRACTION,
    "r_max": Rule("must be a finite number in (0, 1)", lambda v: 0 < v < 1),
    "max_phase": POSITIVE,
    "memory_size": POSITIVE_INT,
    "theta": POSITIVE,
    "max_len": POSITIVE_INT,
    "bias_max": number_in(0.0, math.inf),
    "recurrent_init_min": FRACTION,
    "memory_cells": POSITIVE_INT,
    "cell_size": POSITIVE_INT,
    "read_heads": POSITIVE_INT,
}
# Ranges given by two memory keys: the first must not exceed the second.
FIELD_RANGES = (("min_period", "max_period"), ("dt_min", "dt_max"), ("r_min", "r_max"))
