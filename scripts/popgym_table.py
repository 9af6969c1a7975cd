"""Moved: the POPGym table runner is now `python -m stoixlite.table` (this wrapper runs it)."""
from stoixlite.table.cli import main; raise SystemExit(main())  # noqa: E702, I001
