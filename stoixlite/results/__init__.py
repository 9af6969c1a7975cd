"""Results of finished runs: seed statistics, reading run directories, the random-policy
baseline and the published POPGym numbers (used by ``python -m stoixlite.aggregate`` and
``python -m stoixlite.table``)."""
