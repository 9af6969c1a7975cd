"""Moved: ``python -m stoixlite.benchmark host`` (this wrapper runs it; it goes in the next
release)."""

import sys

from stoixlite.benchmark.cli import main

if __name__ == "__main__":
    moved = "scripts/benchmark_host.py has moved: python -m stoixlite.benchmark host"
    print(moved, file=sys.stderr)
    sys.exit(main(["host", *sys.argv[1:]]))
