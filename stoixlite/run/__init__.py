"""The host side of a training run: building a run, the host loop, resume, devices and signals."""
