"""Moved: ``python -m stoixlite.benchmark memory`` (this wrapper runs it; it goes in the next
release)."""

import sys

from stoixlite.benchmark.cli import main

if __name__ == "__main__":
    moved = "scripts/benchmark_memory.py has moved: python -m stoixlite.benchmark memory"
    print(moved, file=sys.stderr)
    sys.exit(main(["memory", *sys.argv[1:]]))
