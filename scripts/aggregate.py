"""Moved: ``python -m stoixlite.aggregate`` (this wrapper runs it; it goes in the next release)."""

import sys

from stoixlite.aggregate import main

if __name__ == "__main__":
    print("scripts/aggregate.py has moved: python -m stoixlite.aggregate", file=sys.stderr)
    sys.exit(main())
