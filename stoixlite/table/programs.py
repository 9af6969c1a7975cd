"""Which pending cells train as one program (``train`` fuses them unless ``--no-fuse``).

Cells share a program when their configs make the same compiled programs
(:func:`stoixlite.run.build.program_key`: the same env, difficulty, network and shapes; they
differ only in values the program takes as inputs, such as ``system.lr``, ``ent_coef`` or
``gamma``: the variants of one cell given in one call, ``--variant A B -- system.lr=1e-3,3e-3``).
Such a group trains as one fused program (:mod:`stoixlite.table.fused_cells`, its own process),
split into programs that fit in the devices' memory as the ``fused`` launcher splits a sweep
(:func:`stoixlite.run.fused.fitting_size`). A cell trains alone, in its own ``python -m
stoixlite.rec_ppo`` process, when no other pending cell shares its program, or when it resumes
from its checkpoint (``resume=`` continues one run); one line says why.
"""

from __future__ import annotations

from argparse import Namespace

from stoixlite.cli.args import checked_run_config
from stoixlite.table.cells import Cell, cell_overrides, has_checkpoint


def _key(args: Namespace, cell: Cell, configs: dict) -> tuple[str | None, str | None]:
    """``(program key, None)`` of the cell (:func:`~stoixlite.run.build.program_key`; its plan
    kept on the cell), or ``(None, why it trains alone)`` when its config or env is refused
    (the cell then fails alone, with its own process's line, as it would unfused)."""
    from stoixlite.config.plan import plan_run
    from stoixlite.run.build import program_key
    from stoixlite.run.parts import make_raw_env

    view = cell.view(args)
    cfg = configs.get((cell.env, cell.difficulty, cell.path.name))
    if cfg is None:
        cfg, error = checked_run_config(cell_overrides(view, cell.env, cell.difficulty,
                                                       cell.network))  # fmt: skip
        if cfg is None:
            return None, f"its config is invalid ({error})"
    try:
        cell.plan = plan_run(cfg)
        return program_key(cell.plan, make_raw_env(cfg)), None
    except Exception as err:  # the env's factory refused its arguments, ...: fails alone
        return None, f"its run cannot be planned ({type(err).__name__}: {err})"


def names(cells: list[Cell]) -> str:
    """``[1,2] repeat_previous easy gru+a, gru+b``: the cells' numbers and names."""
    ks = ",".join(str(cell.k) for cell in cells)
    return f"[{ks}] {cells[0].env} {cells[0].difficulty} " + ", ".join(c.path.name for c in cells)


def program_units(args: Namespace, cells: list[Cell], configs: dict) -> list[list[Cell]]:
    """``cells`` (pending, in their order) as the programs that train them: groups of cells of
    one program key (in the memory split's parts) and cells alone, in the order of their first
    cells; prints one line per group and per cell alone (one line in all when no two cells
    have the same env, difficulty and network, so none can share; none with one variant, whose
    cells all differ so)."""
    from stoixlite.run.fused import fitting_size

    buckets: dict[tuple, list[Cell]] = {}
    for cell in cells:
        buckets.setdefault((cell.env, cell.difficulty, cell.network), []).append(cell)
    if all(len(bucket) == 1 for bucket in buckets.values()):
        if len(getattr(args, "variants", None) or []) > 1:  # one variant: nothing could share
            print("each cell trains alone: no two pending cells have the same env, difficulty "
                  "and network, so no two share a program", flush=True)  # fmt: skip
        return [[cell] for cell in cells]
    units: list[list[Cell]] = []
    for bucket in buckets.values():
        groups: dict[str, list[Cell]] = {}
        for cell in bucket:
            if has_checkpoint(cell.path) and not cell.fresh:
                print(f"[{cell.k}] {cell.name}: trains alone: it resumes from its checkpoint "
                      "(resume= continues one run)", flush=True)  # fmt: skip
                units.append([cell])
                continue
            key, why = _key(args, cell, configs)
            if key is None:
                print(f"[{cell.k}] {cell.name}: trains alone: {why}", flush=True)
                units.append([cell])
            else:
                groups.setdefault(key, []).append(cell)
        for group in groups.values():
            if len(group) == 1:
                print(f"[{group[0].k}] {group[0].name}: trains alone: no other pending cell "
                      "shares its program (its settings change the compiled program)",
                      flush=True)  # fmt: skip
                units.append(group)
                continue
            size, why = fitting_size([cell.plan for cell in group])
            parts = [group[i : i + size] for i in range(0, len(group), size)]
            if len(parts) > 1:
                print(f"{names(group)}: split into {len(parts)} programs of at most {size} "
                      f"cells: {why}", flush=True)  # fmt: skip
            for part in parts:
                if len(part) > 1:
                    print(f"{names(part)}: train as one program", flush=True)
                else:
                    print(f"[{part[0].k}] {part[0].name}: trains alone (the memory split)",
                          flush=True)  # fmt: skip
            units.extend(parts)
    return sorted(units, key=lambda unit: unit[0].k)
