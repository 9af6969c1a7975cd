"""The POPGym table page's last section: how to train the table again, and what that costs on
a CPU and on a GPU, computed from the records' wall times
(:func:`~stoixlite.results.popgym_cells.machine_cost`)."""

from __future__ import annotations

from stoixlite.results.popgym_cells import Cells, machine_cost, table_cells


def machine_text(machine: str) -> str:
    """A record's machine as a sentence says it: ``"AMD EPYC, 2 cores"`` -> ``"2-core AMD
    EPYC"``; ``"<CPU>; GPU: NVIDIA H200 x 1"`` -> ``"NVIDIA H200 (host: <CPU>)"``."""
    cpu, _, gpu = machine.partition("; GPU: ")
    name, _, cores = cpu.rpartition(", ")
    if cores.endswith(" cores") and name:
        cpu = f"{cores.split()[0]}-core {name}"
    if not gpu:
        return cpu
    gpu = gpu.removesuffix(" x 1")
    return f"{gpu} (host: {cpu})"


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def cost_lines(cells: Cells) -> list[str]:
    """What training every cell of :func:`~stoixlite.results.popgym_cells.table_cells` costs
    on a CPU and on a GPU (:func:`~stoixlite.results.popgym_cells.machine_cost`): one line per
    kind of machine that a record ran on."""
    wanted = table_cells()
    lines = []
    for gpu in (False, True):
        cost = machine_cost(cells, wanted, gpu)
        if cost is None:
            continue
        if cost.jobs == [1]:
            at_once = "one cell at a time"
        else:
            at_once = (
                f"{cost.jobs[0]} to {cost.jobs[-1]} cells at once (each cell's wall time divided "
                "by the cells beside it)"
            )
        how = f"{cost.measured} cells' own times there"
        if cost.estimated:
            how += f", the other {cost.estimated} at their model's median seconds per step there"
        if cost.untimed:
            how += (
                f"; {_names(cost.untimed)}, never timed there, at the median of the "
                f"{cost.measured} timed cells"
            )
        if cost.missing:
            how += f"; {cost.missing} cells without a record not counted"
        kind = "a GPU" if gpu else "a CPU"
        machine = machine_text(cost.machine)
        lines.append(f"- On {kind}: about {cost.hours:.1f} h of one {machine}, {at_once}: {how}.")
    return lines


def rebuild_lines(cells: Cells) -> list[str]:
    """How to train the table again, what it costs (:func:`cost_lines`), and the records that
    ``train``'s defaults do not make."""
    wanted = table_cells()
    steps = sum(cells[(e, d)][m].budget for e, d, m in wanted if m in cells.get((e, d), {}))
    extra: dict[str, list[str]] = {}
    for (env, difficulty), models in cells.items():
        for model in sorted(models):
            if (env, difficulty, model) not in set(wanted) and "+" not in model:
                extra.setdefault(f"{env} {difficulty}", []).append(model)
    lines = [
        "`python -m stoixlite.table train --records DIR` trains every cell this page shows into",
        "the records folder DIR (a new folder: all of them): mlp, gru and memoroid on the 48 cells",
        "and, on the published cells, the ports of the paper's best models (`--networks mlp gru",
        f"memoroid paper_best`, the default: {len(wanted)} cells), seeds 10-12 in one program per",
        "cell, each cell's shipped config and whole budget. A cell with a finished record in DIR",
        "is skipped, an interrupted one resumed, one trained with other settings than its shipped",
        "config today trained afresh. Without `--records`, a checkout's `train` writes into",
        "`results/popgym_table/`, where the committed records are already finished.",
        "`python -m stoixlite.table report --records DIR` writes this page, the page of every",
        "model and the figure into `outputs/popgym_table_report/` (`--out` elsewhere;",
        "`--docs` rewrites a checkout's docs pages and README block, and says so).",
        "",
        f"What that costs, from the records' wall times ({steps / 1e6:.0f}M env steps per seed in",
        "all, compile and evaluations included):",
        "",
        *cost_lines(cells),
        "",
        "On one GPU, `python -m stoixlite.table train --records DIR --jobs 6 --time-limit 540`",
        "trains as many pending cells as fit in 9 minutes (published cells first), choosing them",
        "by the wall times recorded here scaled to the cells trained at once. Several `train`",
        "commands may share one `--out` on one machine (say one per terminal, each with its own",
        "`--envs`): a runner locks each cell while it trains it, and skips a cell another runner",
        "holds or finished since it started.",
        "",
        "Cells that share one compiled program train as one, each in its own run directory and",
        "with the record it would have alone (up to float rounding; `--no-fuse`: every cell in",
        "its own process): the variants of a cell given in one call, e.g. `--variant lr1 lr3 --",
        "system.lr=1e-3,3e-3` (one name per combination of the comma lists, in Hydra's order),",
        "which differ only in values the program takes as inputs (the `system` rates and",
        "coefficients; [experiments.md](experiments.md#sweeps-as-one-program)). A fused cell's",
        "attempt in its record names the cells of its program (`program`: a list of",
        "`<env>/<difficulty>/<model>+<variant>`, itself included); a cell alone has none. Cells",
        "of another env, difficulty, network or shape, and cells resumed from a checkpoint, train",
        "alone, with one line saying why.",
    ]
    if extra:
        shown = "; ".join(f"{cell}: {', '.join(models)}" for cell, models in sorted(extra.items()))
        count = sum(len(models) for models in extra.values())
        lines += [
            "",
            f"The records hold {count} more models than `train` trains by default ({shown}); "
            "their commands are on the page of every model.",
        ]
    return lines
