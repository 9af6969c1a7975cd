"""Moved: ``python -m stoixlite.benchmark profile`` (this wrapper runs it; it goes in the next
release)."""

import sys

from stoixlite.benchmark.cli import main

if __name__ == "__main__":
    moved = "scripts/profile_update.py has moved: python -m stoixlite.benchmark profile"
    print(moved, file=sys.stderr)
    sys.exit(main(["profile", *sys.argv[1:]]))
