"""Moved: ``python -m stoixlite.benchmark`` (this wrapper runs it; it goes in the next release)."""

import sys

from stoixlite.benchmark.cli import main

if __name__ == "__main__":
    print("scripts/benchmark.py has moved: python -m stoixlite.benchmark", file=sys.stderr)
    sys.exit(main())
