"""Divergence guards of the host loop: non-finite values and a collapsing policy.

After every learn chunk the host loop (:mod:`stoixlite.run.loop`) checks the chunk's metrics
(losses, returned stacked ``[..., U]`` per update) and a compiled all-finite flag of the
parameters (``Run.params_finite``, :func:`stoixlite.ppo.finite.all_finite` jitted in
:mod:`stoixlite.run.parts`). On the first non-finite value the chunk is
discarded: nothing of it is logged or saved, so the last good checkpoint stays latest and best.
What happens next is ``arch.on_nonfinite``:

* ``stop`` (default): :class:`NonFiniteError`, one line naming the chunk, the update and the
  first non-finite metric; the process exits non-zero.
* ``rollback``: restore the newest checkpoint (or the initial state when none is saved yet),
  halve ``system.lr`` (:meth:`~stoixlite.config.plan.RunPlan.with_lr`) and go on, at most
  ``arch.max_rollbacks`` times; then stop as above.

:class:`CollapseWatch` warns once when the update's approximate KL or clip fraction stays far
above normal for several chunks in a row or spikes in one, or when a discrete policy's entropy
vanishes while the eval return stays at its start level (a policy that collapsed).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

PARAMS_METRIC = "params"  # names non-finite parameters in messages

# A PPO update whose approximate KL or clip fraction exceeds these for COLLAPSE_CHUNKS chunks in
# a row is far from the usual regime (KL ~0.01-0.05, clip fraction ~0.1-0.3).
COLLAPSE_KL = 0.5
COLLAPSE_CLIP_FRACTION = 0.5
COLLAPSE_CHUNKS = 3
# One chunk whose mean approximate KL exceeds this is a spike: the policy jumped far at once.
KL_SPIKE = 5.0
# A discrete policy whose entropy is below this fraction of the uniform policy's (log n) while
# the eval return stays at its first chunk's level has collapsed onto a few actions.
COLLAPSE_ENTROPY_FRACTION = 0.02


class NonFiniteError(RuntimeError):
    """A learn chunk produced a non-finite loss or parameter; the message is one line."""


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
    """Warns once (one line, the run goes on) when the policy collapses, judged on the host from
    each chunk's record (chunk means; nothing is added to the compiled program):

    * ``loss/approx_kl`` or ``loss/clip_fraction`` stay above :data:`COLLAPSE_KL` /
      :data:`COLLAPSE_CLIP_FRACTION` for :data:`COLLAPSE_CHUNKS` chunks, or the KL of one chunk
      spikes above :data:`KL_SPIKE`;
    * with ``num_actions`` (a discrete policy), ``loss/entropy`` falls below
      :data:`COLLAPSE_ENTROPY_FRACTION` of ``log(num_actions)`` while ``eval/episode_return``
      has not risen above its first chunk's level (a collapse onto a few actions, not a policy
      that learned to be sure).
    """

    def __init__(self, lr: float, num_actions: int | None = None):
        self.lr = lr
        self.streak = 0
        self.warned = False
        self.max_entropy = float(np.log(num_actions)) if num_actions and num_actions > 1 else None
        self.start_return: float | None = None
        self.chunks = 0

    def observe(self, record: dict[str, float]) -> bool:
        """Feed one chunk's record; returns True when it logged the warning (at most once)."""
        self.chunks += 1
        kl = record.get("loss/approx_kl", 0.0)
        clip = record.get("loss/clip_fraction", 0.0)
        high = kl > COLLAPSE_KL or clip > COLLAPSE_CLIP_FRACTION
        self.streak = self.streak + 1 if high else 0
        ret = record.get("eval/episode_return")
        if self.start_return is None and ret is not None and np.isfinite(ret):
            self.start_return = float(ret)
        if self.warned:
            return False
        if kl > KL_SPIKE:
            self.warned = True
            log.warning(
                "the policy may be collapsing: approx KL %.3g per update in chunk %d (normal: "
                "below %.2g); system.lr=%g may be too large (or system.vf_coef, "
                "system.normalize_advantages=false)",
                kl,
                self.chunks,
                COLLAPSE_KL,
                self.lr,
            )
            return True
        if self._entropy_collapsed(record.get("loss/entropy"), ret):
            self.warned = True
            log.warning(
                "the policy has collapsed: entropy %.3g after chunk %d (uniform: %.3g) while the "
                "eval return stays at its start level %.4g; system.lr=%g may be too large (or "
                "system.vf_coef, system.normalize_advantages=false, system.ent_coef too small)",
                record["loss/entropy"],
                self.chunks,
                self.max_entropy,
                self.start_return,
                self.lr,
            )
            return True
        if self.streak < COLLAPSE_CHUNKS:
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

    def _entropy_collapsed(self, entropy: float | None, ret: float | None) -> bool:
        """Near-zero entropy of a discrete policy with the eval return at its start level (from
        the second chunk on: the first one sets the level)."""
        if self.max_entropy is None or entropy is None or self.start_return is None:
            return False
        if self.chunks < 2 or ret is None or not np.isfinite(ret):
            return False
        level = self.start_return + 0.05 * max(abs(self.start_return), 1.0)
        return entropy < COLLAPSE_ENTROPY_FRACTION * self.max_entropy and ret <= level
