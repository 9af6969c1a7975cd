"""``python -m stoixlite.benchmark``: the benchmark tool (:mod:`stoixlite.benchmark.cli`)."""

import sys

from stoixlite.benchmark.cli import main

if __name__ == "__main__":
    sys.exit(main())
