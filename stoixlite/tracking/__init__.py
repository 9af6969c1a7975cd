"""What a run leaves behind: checkpoints, JSON-lines metrics, W&B, progress bar and plots, behind
the one :class:`~stoixlite.tracking.recorder.Recorder` the host loop calls per chunk."""
