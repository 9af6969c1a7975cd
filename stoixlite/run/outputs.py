"""The settings the host hands to the output sinks (``tracking/``), taken from the run's plan.

The sinks know nothing of the run's config: :func:`recorder_settings` gives the
:class:`~stoixlite.tracking.recorder.Recorder` its own small settings (checkpoints, W&B, JSON
lines, progress bar, plot) and the checkpoint fingerprint
(:attr:`~stoixlite.config.plan.RunPlan.fingerprint`).
"""

from __future__ import annotations

import dataclasses

from stoixlite.config.plan import RunPlan
from stoixlite.tracking.checkpointing import CheckpointSettings
from stoixlite.tracking.recorder import RecorderSettings
from stoixlite.tracking.wandb_logger import WandbSettings


def recorder_settings(plan: RunPlan, sweep: str | None = None) -> RecorderSettings:
    """The :class:`RecorderSettings` of the run of ``plan`` (``sweep``: the W&B group when
    ``logger.wandb.group`` is null)."""
    cfg = plan.config
    wandb = cfg.logger.wandb
    if wandb is not None:
        wandb = dataclasses.replace(wandb, group=wandb.group or sweep)
    return RecorderSettings(
        name=plan.name,
        seeds=tuple(cfg.arch.seeds),
        num_chunks=plan.num_chunks,
        total_steps=plan.total_steps,
        progress=cfg.logger.progress,
        jsonl=cfg.logger.jsonl,
        plot=cfg.logger.plot,
        checkpoint=CheckpointSettings(**dataclasses.asdict(cfg.checkpoint)),
        fingerprint=plan.fingerprint,
        wandb=None if wandb is None else WandbSettings(**dataclasses.asdict(wandb)),
        config=plan.config_dict,
    )
