"""``python -m stoixlite.table``: the POPGym table runner (:mod:`stoixlite.table.cli`)."""

import sys

from stoixlite.table.cli import main

if __name__ == "__main__":
    sys.exit(main())
