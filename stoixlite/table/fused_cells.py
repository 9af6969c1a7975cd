"""Cells that share one program, trained as one: the process the table runner starts for them.

    python -m stoixlite.table.fused_cells --results FILE --cell DIR OVERRIDE ... --cell DIR ...

Each ``--cell`` names a cell's run directory and its ``python -m stoixlite.rec_ppo`` overrides
(:func:`stoixlite.table.cells.cell_overrides`); the cells' configs must make one program
(:func:`stoixlite.run.build.program_key`; the runner groups them so,
:mod:`stoixlite.table.programs`). They train as the members of one fused group
(:func:`stoixlite.run.fused.train_group`), each writing into its directory what
``python -m stoixlite.rec_ppo ... hydra.run.dir=DIR`` writes for a run alone (``config.yaml``,
metrics, checkpoints, curve; not Hydra's ``.hydra/`` files), up to float rounding. ``--results``
gets, per cell directory, the exit code the cell's own process would have ended with: 0 done, 130
stopped by a signal (its checkpoint saved: ``resume=`` continues it alone), 1 failed (its line on
stderr), written atomically once the group ends. The process exits with the worst of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stoixlite.run.signals import hold_ctrl_c

if __name__ == "__main__":  # before anything slow is imported: Ctrl-C is held from the start
    hold_ctrl_c()

DONE, FAILED, INTERRUPTED = 0, 1, 130


def parse_argv(argv: list[str]) -> tuple[Path, list[tuple[Path, list[str]]]]:
    """``(results file, [(cell directory, overrides), ...])`` of the command line; ``ValueError``
    (one line) for a malformed one."""
    if len(argv) < 2 or argv[0] != "--results":
        raise ValueError("usage: --results FILE --cell DIR OVERRIDE ... [--cell DIR ...]")
    results, cells = Path(argv[1]), []
    for arg in argv[2:]:
        if arg == "--cell":
            cells.append([])
        elif not cells:
            raise ValueError(f"{arg}: give --cell DIR before a cell's overrides")
        else:
            cells[-1].append(arg)
    if len(cells) < 2 or any(not cell for cell in cells):
        raise ValueError("give at least two cells, each --cell DIR [OVERRIDE ...]")
    return results, [(Path(cell[0]), cell[1:]) for cell in cells]


def main(argv: list[str] | None = None) -> int:
    """Train the cells of the command line as one program; returns the exit status."""
    from stoixlite.cli.args import checked_run_config
    from stoixlite.cli.process import setup_process
    from stoixlite.config.plan import plan_run
    from stoixlite.results.popgym_records import write_json_atomic
    from stoixlite.run.fused import Member, train_group
    from stoixlite.run.signals import TrainingInterrupted, ctrl_c_raises

    try:
        results, cells = parse_argv(sys.argv[1:] if argv is None else list(argv))
    except ValueError as err:
        print(f"stoixlite.table.fused_cells: {err}", file=sys.stderr)
        return 2
    setup_process()
    members = []
    for run_dir, overrides in cells:
        cfg, error = checked_run_config(overrides)
        if cfg is None:
            print(f"{run_dir}: {error}", file=sys.stderr)
            return 2
        members.append(Member(plan_run(cfg), run_dir.resolve()))
    codes: dict[str, int] = {}
    status = DONE
    try:
        with ctrl_c_raises():
            train_group(members)
    except (TrainingInterrupted, KeyboardInterrupt) as stop:
        print(str(stop) or "interrupted", file=sys.stderr)
        status = INTERRUPTED
    except Exception as err:  # the group's program or set-up: every cell still training
        lines = str(err).strip().splitlines()
        print(f"{type(err).__name__}: {lines[0] if lines else ''}", file=sys.stderr)
        status = FAILED
    for member in members:
        if member.error is not None:
            print(f"{member.run_dir}: {type(member.error).__name__}: {member.error}",
                  file=sys.stderr)  # fmt: skip
            code = FAILED
        else:
            code = DONE if member.final == member.final else status  # NaN: it did not finish
        codes[str(member.run_dir)] = code
    write_json_atomic(results, codes)
    return max(codes.values(), key=lambda code: (code == FAILED, code == INTERRUPTED))


if __name__ == "__main__":
    from stoixlite.run.signals import exit_now

    exit_now(main())  # no interpreter teardown: an interrupted compile's native state crashes it
