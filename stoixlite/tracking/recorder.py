"""Every output of a training run behind one small object the host loop calls once per chunk.

:class:`Recorder` writes ``metrics.jsonl`` (and ``metrics_per_seed.jsonl`` when several seeds
train together), logs to W&B, drives the progress bar, saves Orbax checkpoints (every
``CheckpointSettings.every`` chunks, after the last one and when a stop is requested) and, at the
end, the W&B summary and the learning-curve plot. It knows only its own
:class:`RecorderSettings`, which the host fills in from the run's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stoixlite.tracking.checkpointing import (
    Checkpointer,
    CheckpointSettings,
    checkpoint_dir,
)
from stoixlite.tracking.files import METRICS_FILE, PER_SEED_FILE
from stoixlite.tracking.jsonl import JsonlWriter, last_record, truncate_jsonl
from stoixlite.tracking.progress import TrainingProgress
from stoixlite.tracking.wandb_logger import WandbSettings


@dataclass(frozen=True)
class RecorderSettings:
    """What the outputs of one run need to know about it."""

    name: str  # shown by the progress bar, the plot and W&B
    seeds: tuple[int, ...]  # the seeds trained together (one record each in the per-seed file)
    num_chunks: int  # the last chunk is always checkpointed
    total_steps: int  # of the progress bar
    progress: bool = True
    jsonl: bool = True
    plot: bool = True
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)  # saved with each checkpoint
    wandb: WandbSettings | None = None  # None: no W&B
    config: Mapping[str, Any] = field(default_factory=dict)  # the run's config, shown by W&B


class Recorder:
    """The outputs of one run in ``run_dir`` (a context manager: files, checkpoints, W&B and the
    progress bar are closed on exit).

    ``resume``: the run continues from its latest checkpoint (:attr:`checkpointer` is then always
    open, even with checkpoints disabled). ``primary``: this process writes the metrics files,
    W&B, the plot and the progress bar (process 0 of a multi-process run); every process takes
    part in the checkpoints, which orbax writes collectively.
    """

    def __init__(
        self, settings: RecorderSettings, run_dir: Path, resume: bool, primary: bool = True
    ):
        self.settings, self.run_dir, self.resume, self.primary = settings, run_dir, resume, primary
        ck = settings.checkpoint
        self.checkpointer: Checkpointer | None = None
        if ck.enabled or resume:
            self.checkpointer = Checkpointer(
                checkpoint_dir(run_dir),
                dict(settings.fingerprint),
                ck.keep_last,
                ck.keep_best,
                set_aside=True,  # unreadable metadata moved aside, named by the restore
            )
        self.progress = TrainingProgress(
            settings.total_steps, settings.name, enabled=settings.progress and primary
        )
        self._writer: JsonlWriter | None = None
        self._seed_writer: JsonlWriter | None = None
        self._wandb: Any = None
        self.last: dict[str, float] = {}

    def start(self, logger_step: int, step: int) -> None:
        """Open the outputs; a resumed run first drops the records written after its checkpoint
        (``logger_step`` records were written up to it) and shows ``step`` steps as done."""
        settings, seeds = self.settings, len(self.settings.seeds)
        if not self.primary:
            self.progress.__enter__()
            return
        if self.resume:
            truncate_jsonl(self.run_dir / METRICS_FILE, logger_step)
            truncate_jsonl(self.run_dir / PER_SEED_FILE, logger_step * seeds)
        if settings.jsonl:
            self._writer = JsonlWriter(self.run_dir / METRICS_FILE)
            if seeds > 1:
                self._seed_writer = JsonlWriter(self.run_dir / PER_SEED_FILE)
        if settings.wandb is not None:
            from stoixlite.tracking.wandb_logger import from_config

            self._wandb = from_config(
                settings.wandb, settings.config, self.run_dir, settings.name, self.resume
            )
        self.progress.__enter__()
        self.progress.update(step, {})

    def rewind(self, logger_step: int) -> None:
        """A rollback (:mod:`stoixlite.run.divergence`): the run goes on from the state in which
        ``logger_step`` records were written; the metrics files are cut back to those records.
        Records already sent to W&B stay there (its steps only increase)."""
        self.last = {}
        seeds = len(self.settings.seeds)
        for attr, keep in (("_writer", logger_step), ("_seed_writer", logger_step * seeds)):
            writer = getattr(self, attr)
            if writer is not None:
                writer.close()
                truncate_jsonl(writer.path, keep)
                setattr(self, attr, JsonlWriter(writer.path))

    def log(self, record: dict[str, float], per_seed: list[dict[str, float]]) -> None:
        """One chunk's record (and per-seed records) to every enabled output."""
        self.last = record
        step = int(record["step"])
        if self._writer is not None:
            self._writer.log(record)
        if self._seed_writer is not None:
            for seed, seed_record in zip(self.settings.seeds, per_seed, strict=True):
                self._seed_writer.log({"step": step, "seed": seed, **seed_record})
        if self._wandb is not None:
            data = dict(record)
            if per_seed and self.settings.wandb is not None and self.settings.wandb.per_seed:
                for k, seed_record in enumerate(per_seed):
                    data.update({f"seed_{k}/{name}": v for name, v in seed_record.items()})
            self._wandb.log(data, step)
        self.progress.update(step, record)

    def checkpoint(self, chunk: int, tree: Any, host: Any, stopping: bool) -> None:
        """Save checkpoint ``chunk`` (chunks done) of ``tree`` with the host-loop state ``host``
        (a dataclass) when due: every ``checkpoint.every`` chunks, after the last, or when
        ``stopping``."""
        ck = self.settings.checkpoint
        last = chunk == self.settings.num_chunks
        due = ck.enabled and (chunk % ck.every == 0 or last)
        if self.checkpointer is not None and (due or stopping):
            eval_return = self.last.get("eval/episode_return")
            self.checkpointer.save(chunk, tree, asdict(host), eval_return=eval_return)

    def finish(self, ok: bool, best_eval_return: float | None) -> dict[str, float]:
        """Close every output (W&B gets the final summary when ``ok``), plot the learning curve
        and return the last record (of the metrics file when this process wrote none)."""
        self.progress.__exit__(None, None, None)
        for writer in (self._writer, self._seed_writer):
            if writer is not None:
                writer.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self._wandb is not None:
            if ok and self.last:
                self._wandb.summary(
                    {
                        "final/eval_return": self.last.get("eval/episode_return"),
                        "best/eval_return": best_eval_return,
                        "final/step": self.last.get("step"),
                    }
                )
            self._wandb.finish(0 if ok else 1)
        if not ok:
            return self.last
        record = self.last or last_record(self.run_dir / METRICS_FILE)
        if self._writer is not None and self.settings.plot:
            from stoixlite.tracking.plots import plot_learning_curve

            metrics = self.run_dir / METRICS_FILE
            plot_learning_curve(metrics, self.run_dir / "learning_curve.png", self.settings.name)
        return record
