"""Weights & Biases logging (``logger=wandb``) that can never stop or slow training.

* Mode: ``auto`` (default) runs online when credentials exist (``WANDB_API_KEY`` or an entry for
  the W&B host in ``~/.netrc``) and offline otherwise; ``online``, ``offline`` and ``disabled``
  force a mode, and an explicit ``WANDB_MODE`` environment variable always wins. Offline runs
  keep their files under ``<dir>/wandb/offline-run-*`` for a later ``wandb sync``; an offline
  run says so in one warning line that gives the reason and the ``wandb sync`` command.
* Failures: if ``wandb.init`` fails online (no network, bad key, timeout after
  ``init_timeout`` s) the logger logs one error and retries offline; if that fails too it
  disables itself. An exception from any later call is logged once and W&B logging stops, while
  the local logs (console, JSON lines, plots, checkpoints) carry on. Logging itself is
  non-blocking: wandb hands records to its background service process.
* What is logged: the resolved config (``run.config``), every metric of every record with env
  steps as the x-axis (``env_step``, also used as the W&B step), and summary values.
* Grouping: the host gives every job of one Hydra sweep the same group (the sweep's name, unless
  ``logger.wandb.group`` is set); the run id is kept in ``<run dir>/wandb_run_id`` so a resumed
  run continues the same W&B run.
"""

from __future__ import annotations

import logging
import math
import netrc
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

# The W&B modes: "auto" resolves to online or offline (:func:`resolve_mode`).
MODES = ("auto", "online", "offline", "disabled")


@dataclass(frozen=True)
class WandbSettings:
    """What W&B logging needs to know (the host fills it from ``logger.wandb``); ``None`` fields
    take W&B's defaults."""

    project: str = "stoixlite"
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    name: str | None = None  # None: the run name
    mode: str = "auto"
    init_timeout: float = 15.0
    dir: str | None = None
    per_seed: bool = True  # also log each seed's metrics (seed_<k>/...)


STEP_METRIC = "env_step"
RUN_ID_FILE = "wandb_run_id"


def has_credentials() -> bool:
    """True if W&B can authenticate: ``WANDB_API_KEY`` or a ``~/.netrc`` entry for the host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    path = os.environ.get("NETRC", os.path.expanduser("~/.netrc"))
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_mode(mode: str = "auto") -> str:
    """The wandb mode to use: ``WANDB_MODE`` if set, else ``mode`` with ``auto`` resolved."""
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode:
        return "offline" if env_mode == "dryrun" else env_mode
    if mode not in MODES:
        raise ValueError(f"logger.wandb.mode={mode!r} is invalid: choose one of {list(MODES)}")
    if mode == "auto":
        return "online" if has_credentials() else "offline"
    return mode


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class WandbLogger:
    """One W&B run. All methods are safe to call after a failure (they then do nothing).

    ``config``: the resolved run config (plain dict). ``run_dir``: the Hydra run directory (the
    run id file lives there; W&B files go to ``dir`` or, by default, ``run_dir``).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        run_dir: str | Path,
        project: str = "stoixlite",
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        name: str | None = None,
        mode: str = "auto",
        init_timeout: float = 30.0,
        dir: str | Path | None = None,
        resume: bool = False,
    ):
        self.run_dir = Path(run_dir)
        self.run = None
        self._failed = False
        self.mode = resolve_mode(mode)
        requested = self.mode
        if self.mode == "disabled":
            return
        # Online without an API key cannot log in (and would not say why): offline at once.
        no_key = self.mode == "online" and not has_credentials()
        if no_key:
            self.mode = "offline"
        try:
            import wandb
        except ImportError as err:  # pragma: no cover - wandb is a dependency
            self._fail("import", err)
            return
        self._wandb = wandb
        id_file = self.run_dir / RUN_ID_FILE
        run_id = id_file.read_text().strip() if resume and id_file.exists() else None
        run_id = run_id or wandb.sdk.lib.runid.generate_id()
        wandb_dir = Path(dir) if dir else self.run_dir
        wandb_dir.mkdir(parents=True, exist_ok=True)
        kwargs = dict(
            project=project,
            entity=entity,
            group=group,
            tags=list(tags) or None,
            name=name,
            config=dict(config),
            dir=str(wandb_dir),
            resume="allow" if resume else None,
            reinit="finish_previous",
        )
        modes = [self.mode] + (["offline"] if self.mode == "online" else [])
        for attempt in modes:
            try:
                settings = wandb.Settings(init_timeout=init_timeout, console="off", silent=True)
                self.run = wandb.init(mode=attempt, id=run_id, settings=settings, **kwargs)
                self.mode = attempt
                break
            except Exception as err:  # noqa: BLE001 - any failure must not stop training
                self._fail(f"init ({attempt})", err, disable=False)
                # The failed attempt may still hold its run id: retry under a fresh one.
                run_id = wandb.sdk.lib.runid.generate_id()
        if self.run is None:
            self._failed = True
            return
        if self.mode == "offline":
            self._say_offline(requested, mode, no_key)
        try:
            self.run.define_metric(STEP_METRIC)
            self.run.define_metric("*", step_metric=STEP_METRIC)
            id_file.write_text(run_id + "\n")
        except Exception as err:  # noqa: BLE001
            self._fail("define_metric", err)

    @property
    def active(self) -> bool:
        return self.run is not None and not self._failed

    @property
    def run_path(self) -> Path | None:
        """The local W&B run directory (``.../wandb/<offline-|>run-<time>-<id>``)."""
        if self.run is None:
            return None
        return Path(self.run.dir).parent

    def _say_offline(self, requested: str, configured: str, no_key: bool = False) -> None:
        """One line: the run is logged offline, why, and the ``wandb sync`` command."""
        if no_key:
            asked = "WANDB_MODE=online" if os.environ.get("WANDB_MODE") else "mode online"
            why = (
                f"{asked} but no W&B API key (WANDB_API_KEY or ~/.netrc): run `wandb login` to "
                "log online, or use offline mode (WANDB_MODE=offline)"
            )
        elif requested == "online":
            why = "W&B unreachable"
        elif os.environ.get("WANDB_MODE") or configured == "offline":
            why = "offline mode requested"
        else:
            why = "no W&B credentials (WANDB_API_KEY or ~/.netrc)"
        log.warning(
            "W&B run logged offline (%s); upload it later with: wandb sync %s", why, self.run_path
        )

    def _fail(self, what: str, err: BaseException, disable: bool = True) -> None:
        if disable:
            if self._failed:
                return
            self._failed = True
            log.error(
                "W&B %s failed (%s: %s); W&B logging stops, local logs carry on",
                what,
                type(err).__name__,
                err,
            )
        else:
            log.error("W&B %s failed (%s: %s)", what, type(err).__name__, err)

    def log(self, record: Mapping[str, Any], step: int) -> None:
        """Log every numeric metric of ``record`` at env step ``step`` (non-finite -> null).

        ``record["step"]`` (if present) is dropped: the step is logged as ``env_step``.
        """
        if not self.active:
            return
        data = {
            k: _finite(v) for k, v in record.items() if isinstance(v, (int, float)) and k != "step"
        }
        data[STEP_METRIC] = int(step)
        try:
            self.run.log(data, step=int(step))
        except Exception as err:  # noqa: BLE001
            self._fail("log", err)

    def summary(self, values: Mapping[str, Any]) -> None:
        """Set run summary values (e.g. final and best eval return)."""
        if not self.active:
            return
        try:
            for key, value in values.items():
                self.run.summary[key] = _finite(value)
        except Exception as err:  # noqa: BLE001
            self._fail("summary", err)

    def finish(self, exit_code: int = 0) -> None:
        """Close the run (offline: flush files to disk). Never raises."""
        if self.run is None:
            return
        try:
            self.run.finish(exit_code=exit_code)
        except Exception as err:  # noqa: BLE001
            self._fail("finish", err)
        self.run = None


def from_config(
    section: WandbSettings,
    config: Mapping[str, Any],
    run_dir: str | Path,
    default_name: str | None = None,
    resume: bool = False,
) -> WandbLogger:
    """Build a :class:`WandbLogger` from its settings (``logger.wandb``)."""
    return WandbLogger(
        config=config,
        run_dir=run_dir,
        project=section.project,
        entity=section.entity,
        group=section.group,
        tags=section.tags,
        name=section.name or default_name,
        mode=section.mode,
        init_timeout=section.init_timeout,
        dir=section.dir,
        resume=resume,
    )
