"""The benchmark tool (``python -m stoixlite.benchmark``) and what it reads off programs."""
