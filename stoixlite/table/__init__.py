"""The POPGym table runner, ``python -m stoixlite.table``: train the table's cells, keep their
records, and write the table's pages from the records.

    python -m stoixlite.table train --records DIR     # every cell without a finished record in DIR
    python -m stoixlite.table report --records DIR    # its pages, into --out
    python -m stoixlite.table report --docs           # a checkout's docs pages and README block

Modules: :mod:`~stoixlite.table.checkout` (the source checkout and its git state, the default
places), :mod:`~stoixlite.table.cells` (the cells asked for, their commands, whether each is
pending), :mod:`~stoixlite.table.estimates` (wall times from the records), :mod:`~stoixlite.table.
runner` (training the cells, side by side, locks, records), :mod:`~stoixlite.table.programs`
(which cells share one program), :mod:`~stoixlite.table.fused_cells` (the process that trains
them as one), :mod:`~stoixlite.table.report`
(the pages and the figure from the records), :mod:`~stoixlite.table.cli` (the command line).
"""
