"""The run's configuration: the schema, the strict parser that fills it once at the entry, and
the run plan derived from it."""
