"""The POPGym table's settings section: what each cell's shipped config set, quoted from the
records' configs (never retyped), one row per env and group of models that trained alike."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stoixlite.results.popgym_cells import Cells
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS
from stoixlite.results.popgym_records import flat_settings, record_settings

# The settings every row shows, with their column names.
SHOWN = (
    ("arch.total_timesteps", "budget"),
    ("system.lr", "lr"),
    ("system.gamma", "γ"),
    ("system.gae_lambda", "λ"),
    ("system.ent_coef", "entropy"),
    ("system.rollout_length", "rollout"),
)
NAMES = ("env.name", "env.difficulty", "network.name")  # a cell's names, not its settings


def _value(key: str, value: Any) -> str:
    if key == "arch.total_timesteps":
        return f"{value / 1e6:g}M"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def usual_values(flats: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, Any]:
    """The value each setting has in most records (a memory model's own key: the model's
    default, :func:`~stoixlite.networks.memory.memory_defaults`, looked up per row)."""
    counts: dict[str, Counter] = {}
    for flat in flats.values():
        for key, value in flat.items():
            counts.setdefault(key, Counter())[repr(value)] += 1
    usual = {}
    for key, count in counts.items():
        top = count.most_common(1)[0][0]
        usual[key] = next(f[key] for f in flats.values() if repr(f.get(key)) == top)
    return usual


def others(model: str, flat: dict[str, Any], usual: dict[str, Any]) -> str:
    """The settings of a record beyond :data:`SHOWN` that differ from the usual value (a memory
    model's key: from the model's default), as ``key value`` pairs."""
    from stoixlite.networks.memory import memory_defaults

    try:
        own = memory_defaults(model)
    except (KeyError, ValueError):
        own = {}
    shown = {key for key, _ in SHOWN} | set(NAMES)
    differ = []
    for key, value in flat.items():
        if key in shown:
            continue
        memory_key = key.removeprefix("network.memory.")
        base = own[memory_key] if key.startswith("network.memory.") and memory_key in own else None
        base = usual.get(key) if base is None else base
        if value != base:
            differ.append(f"`{key.split('.', 1)[1]}` {_value(key, value)}")
    return ", ".join(differ)


def settings_lines(cells: Cells) -> list[str]:
    """A table of the settings the records trained with (shipped configs only), per env: one
    row per group of models with the same settings, the difficulties named where a model has
    those settings on some only."""
    flats = {}
    for (env, difficulty), models in cells.items():
        for name, cell in models.items():
            cfg = None if cell.variant else record_settings(cell.record)
            if cfg is not None:
                flats[(env, difficulty, name)] = flat_settings(cfg)
    usual = usual_values(flats)
    lines = [
        "| env | models | " + " | ".join(label for _, label in SHOWN) + " | other settings |",
        "|---|---|" + "---:|" * len(SHOWN) + "---|",
    ]
    for env in ENVS:
        rows: dict[tuple[str, ...], dict[str, list[str]]] = {}
        for difficulty in DIFFICULTIES:
            for (e, d, model), flat in sorted(flats.items()):
                if (e, d) != (env, difficulty):
                    continue
                values = tuple(_value(key, flat[key]) for key, _ in SHOWN)
                row = (*values, others(model, flat, usual))
                rows.setdefault(row, {}).setdefault(model, []).append(difficulty)
        everywhere = {d for models in rows.values() for ds in models.values() for d in ds}
        for row, models in rows.items():
            named = [
                m if set(ds) == everywhere else f"{m} ({', '.join(ds)})" for m, ds in models.items()
            ]
            lines.append(f"| {env} | {', '.join(named)} | " + " | ".join(row) + " |")
    return lines
