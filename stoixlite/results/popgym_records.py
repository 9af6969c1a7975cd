"""The POPGym table's records: one small JSON file per trained cell, kept in the repository.

``results/popgym_table/<env>/<difficulty>/<model>[+<variant>].json`` holds everything the table
shows about a cell, so that ``python -m stoixlite.table report`` rebuilds the table's pages from
the records alone (run directories, checkpoints and the machines that trained them are not
needed):

* ``env``, ``difficulty``, ``model``, ``variant`` (``null`` for the shipped configs) and the
  ``overrides`` a variant ran with; ``status`` (``done``, ``interrupted``, ``failed``);
* ``command``: the runner command that trains this cell again; ``run_command``: the
  ``python -m stoixlite.rec_ppo`` command it issued (paths relative to the repository);
* ``budget`` (``arch.total_timesteps``), ``steps`` trained per seed, ``seeds``;
* ``attempts``: per training process its start (UTC), the commit, ``tree`` (``clean``, or
  ``changes <sha256 of git diff HEAD, 12 hex>`` when it ran from a tree with uncommitted
  changes), the machine, the programs trained side by side (``jobs``), exit code and wall
  seconds, and for a cell trained in one fused program with others (``python -m stoixlite.table
  train`` fuses cells that share a program) ``program``: that program's cells
  (``<env>/<difficulty>/<model>[+<variant>]``, itself included; absent for a cell alone);
* ``wall_s``: the run's own clock over all attempts (compile and evaluations included);
* ``per_seed``: ``seed``, ``steps``, ``mmer_paper`` (the paper's statistic: the mean return of
  the last 100 finished training episodes, read every 65,536 steps, maximised over training;
  :mod:`stoixlite.ppo.episode_window`), ``mmer_update`` (the mean return of the episodes
  finished in one update, maximised), ``final_eval`` and ``best_eval``, and ``curve``: per
  logged chunk ``step``, ``train_return`` (mean return of the chunk's episodes), ``last100``
  and ``eval_return``, thinned to at most :data:`CURVE_POINTS` points;
* ``config``: the run's resolved ``config.yaml``.

Numbers are rounded to 6 decimals (far below the seeds' spread) to keep the files small.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from stoixlite.metric_keys import LAST100_KEY
from stoixlite.results.runs import EVAL_KEY, RunReadError, curve, read_jsonl, run_config
from stoixlite.results.runs import seed_records as run_seed_records
from stoixlite.tracking.metrics import BEST_UPDATE_KEY, LAST100_READ_KEY

SCHEMA = 1
CURVE_POINTS = 300
RANDOM_FILE = "random.json"
STATUSES = ("done", "interrupted", "failed")


class RecordError(ValueError):
    """A record cannot be read or is not a POPGym table record (one line naming the file)."""


def record_name(model: str, variant: str | None) -> str:
    """``<model>`` or ``<model>+<variant>``: a cell's model column and file stem."""
    return f"{model}+{variant}" if variant else model


def record_path(root: Path, env: str, difficulty: str, model: str, variant: str | None) -> Path:
    """Where a cell's record lives below ``root``."""
    return root / env / difficulty / f"{record_name(model, variant)}.json"


def _round(value: Any) -> float | None:
    """A float rounded to 6 decimals; ``None`` for NaN/inf (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return round(value, 6) if math.isfinite(value) else None


def _floats(values: np.ndarray) -> list[float | None]:
    return [_round(v) for v in values]


def _max(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return _round(values.max()) if values.size else None


def _last(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return _round(values[-1]) if values.size else None


def thin(length: int, points: int = CURVE_POINTS) -> np.ndarray:
    """Indices of at most ``points`` of ``length`` entries, evenly spaced, first and last kept."""
    if length <= points:
        return np.arange(length)
    return np.unique(np.linspace(0, length - 1, points).round().astype(int))


def seed_entry(seed: int, records: list[dict]) -> dict:
    """The record of one seed from its metrics records (one per logged chunk)."""
    steps, evals = curve(records, EVAL_KEY)
    _, train = curve(records, "train/episode_return")
    _, last100 = curve(records, LAST100_KEY)
    _, best_update = curve(records, BEST_UPDATE_KEY)
    _, reads = curve(records, LAST100_READ_KEY)
    keep = thin(len(records))
    return {
        "seed": seed,
        "steps": int(steps[-1]) if steps.size else 0,
        "mmer_paper": _max(reads),
        "mmer_update": _max(best_update),
        "final_eval": _last(evals),
        "best_eval": _max(evals),
        "curve": {
            "step": [int(s) for s in steps[keep]],
            "train_return": _floats(train[keep]),
            "last100": _floats(last100[keep]),
            "eval_return": _floats(evals[keep]),
        },
    }


def record_from_run(run_dir: Path, cell: dict) -> dict:
    """A cell's record from its run directory and the runner's bookkeeping ``cell`` (keys
    ``env``, ``difficulty``, ``model``, ``variant``, ``overrides``, ``status``, ``command``,
    ``run_command``, ``seeds``, ``attempts``). Raises :class:`RunReadError` naming a file the
    run directory holds unreadably."""
    config = OmegaConf.to_container(run_config(run_dir), resolve=True)
    seeds = list(cell["seeds"])
    per_seed = [
        seed_entry(seeds[k] if k < len(seeds) else k, records)
        for k, records in enumerate(run_seed_records(run_dir))
    ]
    metrics = read_jsonl(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    wall = float(metrics[-1].get("time/elapsed_s") or math.nan) if metrics else math.nan
    return {
        "schema": SCHEMA,
        **{key: cell[key] for key in ("env", "difficulty", "model", "variant", "overrides")},
        "status": cell["status"],
        "command": cell["command"],
        "run_command": cell["run_command"],
        "budget": int(float(config["arch"]["total_timesteps"])),
        "steps": max((s["steps"] for s in per_seed), default=0),
        "seeds": seeds,
        "attempts": cell["attempts"],
        "wall_s": _round(wall),
        "per_seed": per_seed,
        "config": config,
    }


# What a cell's result depends on: these sections of its config, and these arch keys (seeds,
# stopping, logging and checkpointing do not change what a seed learns).
SETTINGS_SECTIONS = ("env", "network", "system")
SETTINGS_ARCH_KEYS = ("total_timesteps", "num_envs")


def record_settings(record: dict) -> Any:
    """The record's config as a :class:`~stoixlite.config.schema.RunConfig`; ``None`` when it
    is no longer a valid config (a key renamed or removed since)."""
    from stoixlite.config.parse import parse
    from stoixlite.config.strict import ConfigError

    try:
        return parse(OmegaConf.create(record["config"]))
    except (ConfigError, KeyError, TypeError, ValueError):
        return None


def _flat(values: Any, prefix: str) -> dict[str, Any]:
    """``{"network.memory.hidden_size": 8, ...}``: nested mappings as dotted keys."""
    if not isinstance(values, Mapping):
        return {prefix: values}
    flat: dict[str, Any] = {}
    for key, value in values.items():
        flat |= _flat(value, f"{prefix}.{key}")
    return flat


def _with_memory_defaults(section: dict) -> dict:
    """A ``network`` section with the memory model's defaults for the keys its config leaves out
    (a key added to a model later, whose default is what ran before, is not a change); other
    sections as they are."""
    if not isinstance(section.get("memory"), Mapping) or "name" not in section:
        return section
    from stoixlite.networks.memory import memory_defaults

    return section | {"memory": memory_defaults(section["name"]) | dict(section["memory"])}


def flat_settings(cfg: Any) -> dict[str, Any]:
    """What a result depends on of a :class:`~stoixlite.config.schema.RunConfig` as dotted keys
    (``system.lr``, ``network.memory.chrono_period``, ...): the :data:`SETTINGS_SECTIONS` (a
    memory model's key its config leaves out as the model's default) and
    :data:`SETTINGS_ARCH_KEYS`, in that order, each section's keys sorted."""
    from dataclasses import asdict

    flat: dict[str, Any] = {}
    for section in SETTINGS_SECTIONS:
        values = _flat(_with_memory_defaults(asdict(getattr(cfg, section))), section)
        flat |= dict(sorted(values.items()))
    return flat | {f"arch.{key}": getattr(cfg.arch, key) for key in SETTINGS_ARCH_KEYS}


def changed_settings(record: dict, cfg: Any) -> list[str]:
    """The keys (``system.lr``, ...) whose value in the record's config differs from ``cfg``
    (a :class:`~stoixlite.config.schema.RunConfig`, e.g. today's shipped config of the cell):
    :func:`flat_settings`. ``["config"]`` when the record's config is no longer a valid
    config."""
    old = record_settings(record)
    if old is None:
        return ["config"]
    before, now = flat_settings(old), flat_settings(cfg)
    changed = []
    for section in SETTINGS_SECTIONS:
        keys = sorted({key for key in (*before, *now) if key.startswith(f"{section}.")})
        changed += [key for key in keys if before.get(key) != now.get(key)]
    arch = [f"arch.{key}" for key in SETTINGS_ARCH_KEYS]
    return changed + [key for key in arch if before[key] != now[key]]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so that a reader (or a process killed at any moment,
    SIGKILL included) finds the old file or the new one, whole: the text goes to a temporary
    file in the same folder, is flushed to disk (``fsync``) and renamed over ``path``, and the
    folder's entry is flushed too. Parents are created; the temporary file is removed when the
    write fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's file is private; a record is not
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_record(path: Path, record: dict) -> None:
    """Write a record atomically (:func:`write_json_atomic`), parents created."""
    write_json_atomic(path, record)


def read_record(path: Path) -> dict:
    """One record; :class:`RecordError` naming the file when it is unreadable or malformed."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RecordError(f"{path} is not a readable record: {reason}") from None
    required = ("env", "difficulty", "model", "status", "per_seed", "attempts", "budget")
    missing = [key for key in required if not isinstance(record, dict) or key not in record]
    if missing:
        raise RecordError(f"{path} is not a POPGym table record: it lacks {', '.join(missing)}")
    if record["status"] not in STATUSES:
        raise RecordError(f"{path}: status {record['status']!r} is not one of {STATUSES}")
    return record


def read_records(root: Path) -> list[dict]:
    """Every record below ``root`` (``<env>/<difficulty>/<model>.json``), sorted by path."""
    return [read_record(path) for path in sorted(root.glob("*/*/*.json"))]


def read_randoms(root: Path) -> dict[str, float]:
    """``{"env/difficulty": mean return}`` of the random policy (``<root>/random.json``; empty
    when there is none). :class:`RecordError` naming the file when it is unreadable."""
    path = root / RANDOM_FILE
    if not path.exists():
        return {}
    try:
        cache = json.loads(path.read_text())
        return {str(k): float(v) for k, v in cache.items()}
    except (OSError, ValueError, AttributeError, TypeError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RecordError(f"{path} is not a readable random-policy file: {reason}") from None


def write_randoms(root: Path, randoms: dict[str, float]) -> str | None:
    """Write ``<root>/random.json``; ``None``, or one line saying why it could not be written."""
    path = root / RANDOM_FILE
    try:
        write_json_atomic(path, {k: _round(v) for k, v in randoms.items()})
    except OSError as err:
        return f"cannot write {path}: {err.strerror or err}"
    return None


__all__ = [
    "RecordError",
    "RunReadError",
    "read_randoms",
    "read_record",
    "read_records",
    "record_from_run",
    "record_name",
    "record_path",
    "write_randoms",
    "write_json_atomic",
    "write_record",
]
