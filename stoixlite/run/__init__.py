"""The host side of a training run: the typed config, building a run, the host loop."""
