"""Moved: ``python -m stoixlite.benchmark envs`` (this wrapper runs it; it goes in the next
release)."""

import sys

from stoixlite.benchmark.cli import main

if __name__ == "__main__":
    moved = "scripts/benchmark_envs.py has moved: python -m stoixlite.benchmark envs"
    print(moved, file=sys.stderr)
    sys.exit(main(["envs", *sys.argv[1:]]))
