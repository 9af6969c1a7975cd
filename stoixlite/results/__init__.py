"""Results of finished runs: seed statistics, reading run directories, the random-policy
baseline and the published POPGym numbers (used by ``scripts/aggregate.py`` and
``python -m stoixlite.table``)."""
