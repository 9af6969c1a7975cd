"""The names of the metrics the learner emits that the host reduces by name.

A leaf of the ground layer: the compiled core (:mod:`stoixlite.ppo.learner`) writes these keys
into an update's metrics, and the sinks (:mod:`stoixlite.tracking.metrics`) fold them into a
chunk's record; neither imports the other.
"""

from __future__ import annotations

# The window of the last 100 finished episodes (stoixlite.ppo.episode_window): its mean after each
# update, how many episodes it held (0 to 100) and whether the update ended a 65,536-step
# iteration (0/1). The last two are device-side helpers, folded into the chunk's
# ``train/episode_return_last100`` and ``train/episode_return_last100_best_read``
# (stoixlite.tracking.metrics).
LAST100_KEY = "train/episode_return_last100"
LAST100_COUNT_KEY = "train/episode_window_count"
LAST100_READS_KEY = "train/episode_window_reads"
# Prefix of the env-provided episode statistics (``extras["episode_metrics"]``; weighted by
# episodes like the return).
ENV_METRIC_PREFIX = "train/env/"
