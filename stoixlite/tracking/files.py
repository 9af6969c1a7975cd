"""The names of what a run writes into its directory (imports nothing: read before JAX starts)."""

from __future__ import annotations

CONFIG_FILE = "config.yaml"  # the run's config, as the host saved it
METRICS_FILE = "metrics.jsonl"  # one record per chunk (the mean over seeds)
PER_SEED_FILE = "metrics_per_seed.jsonl"  # one record per chunk and seed (several seeds)
CHECKPOINT_DIRNAME = "checkpoints"
BROKEN_DIRNAME = "checkpoints.broken"  # next to CHECKPOINT_DIRNAME: unreadable checkpoints
# A directory holding any of these holds a run.
RUN_OUTPUTS = (CONFIG_FILE, METRICS_FILE, CHECKPOINT_DIRNAME)
