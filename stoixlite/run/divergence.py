"""Divergence guards of the host loop: non-finite values and a collapsing policy.

After every learn chunk the host loop (:mod:`stoixlite.run.loop`) checks the chunk's metrics
(losses, returned stacked ``[..., U]`` per update) and a compiled all-finite flag of the
parameters (``Run.params_finite``, :func:`stoixlite.ppo.finite.all_finite` jitted in
:mod:`stoixlite.run.build`). On the first non-finite value the chunk is
discarded: nothing of it is logged or saved, so the last good checkpoint stays latest and best.
What happens next is ``arch.on_nonfinite``:

* ``stop`` (default): :class:`NonFiniteError`, one line naming the chunk, the update and the
  first non-finite metric; the process exits non-zero.
* ``rollback``: restore the newest checkpoint (or the initial state when none is saved yet),
  halve ``system.lr`` (:func:`halved_lr`) and go on, at most ``arch.max_rollbacks`` times; then
  stop as above.

:class:`CollapseWatch` warns once when the update's approximate KL or clip fraction stays far
above normal for several chunks in a row (a learning rate so large that the policy collapses).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from stoixlite.config.schema import RunConfig

log = logging.getLogger(__name__)

PARAMS_METRIC = "params"  # names non-finite parameters in messages

# A PPO update whose approximate KL or clip fraction exceeds these for COLLAPSE_CHUNKS chunks in
# a row is far from the usual regime (KL ~0.01-0.05, clip fraction ~0.1-0.3).
COLLAPSE_KL = 0.5
COLLAPSE_CLIP_FRACTION = 0.5
COLLAPSE_CHUNKS = 3


class NonFiniteError(RuntimeError):
    """A learn chunk produced a non-finite loss or parameter; the message is one line."""


def halved_lr(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``system.lr`` halved (a rollback after non-finite values)."""
    return dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, lr=cfg.system.lr / 2))


def first_nonfinite(metrics: dict[str, Any], params_finite: Any) -> tuple[str, int] | None:
    """``(metric, update)`` of the first non-finite value of a chunk, or ``None`` if all finite.

    ``metrics``: ``{name: [..., U]}`` per-update values (leading axes, e.g. seeds, are reduced);
    ``update`` is the 0-based update within the chunk, the first whose value is non-finite (the
    metrics' order breaks ties). Non-finite parameters with finite metrics give
    ``(PARAMS_METRIC, U - 1)``: they came from the chunk's last update.
    """
    first: tuple[str, int] | None = None
    num_updates = 1
    for name, value in metrics.items():
        value = np.asarray(value, np.float64)
        if value.ndim == 0:
            value = value[None]
        num_updates = value.shape[-1]
        bad = ~np.isfinite(value).reshape(-1, num_updates).all(axis=0)
        if bad.any():
            update = int(np.argmax(bad))
            if first is None or update < first[1]:
                first = (name, update)
    if first is None and not bool(np.asarray(params_finite)):
        first = (PARAMS_METRIC, num_updates - 1)
    return first


def nonfinite_message(
    chunk: int,
    metric: str,
    update: int,
    kept: int | None,
    run_dir: Any,
    rollbacks: tuple[int, int] | None = None,
) -> str:
    """One line: where the first non-finite value appeared, what was kept and what to try;
    ``rollbacks = (done, max_rollbacks)`` when ``arch.on_nonfinite=rollback`` is set (then the
    advice is about the exhausted rollbacks, not about setting it)."""
    what = "parameters" if metric == PARAMS_METRIC else metric
    kept_text = (
        f"checkpoint {kept} (the last good one) stays latest and best in {run_dir}/checkpoints"
        if kept is not None
        else "no checkpoint was saved"
    )
    advice = "lower system.lr or set arch.on_nonfinite=rollback"
    if rollbacks is not None:
        done, limit = rollbacks
        advice = (
            f"after {done} rollback(s) (arch.max_rollbacks={limit}); lower system.lr or check "
            "the network's settings"
        )
    return (
        f"non-finite {what} in chunk {chunk + 1} (update {update + 1} of the chunk); stopped "
        f"without logging or saving it: {kept_text}; {advice}"
    )


class CollapseWatch:
    """Warns once when ``loss/approx_kl`` or ``loss/clip_fraction`` (chunk means) stay above
    :data:`COLLAPSE_KL` / :data:`COLLAPSE_CLIP_FRACTION` for :data:`COLLAPSE_CHUNKS` chunks."""

    def __init__(self, lr: float):
        self.lr = lr
        self.streak = 0
        self.warned = False

    def observe(self, record: dict[str, float]) -> bool:
        """Feed one chunk's record; returns True when it logged the warning (at most once)."""
        kl = record.get("loss/approx_kl", 0.0)
        clip = record.get("loss/clip_fraction", 0.0)
        high = kl > COLLAPSE_KL or clip > COLLAPSE_CLIP_FRACTION
        self.streak = self.streak + 1 if high else 0
        if self.warned or self.streak < COLLAPSE_CHUNKS:
            return False
        self.warned = True
        log.warning(
            "the policy may be collapsing: approx KL %.3g and clip fraction %.3g per update for "
            "%d chunks in a row (normal: below %.2g and %.2g); system.lr=%g may be too large",
            kl,
            clip,
            self.streak,
            COLLAPSE_KL,
            COLLAPSE_CLIP_FRACTION,
            self.lr,
        )
        return True
