"""``python -m stoixlite.benchmark``: the benchmark tool (:mod:`stoixlite.benchmark.cli`)."""

import sys

from stoixlite.benchmark.cli import main

sys.exit(main())
