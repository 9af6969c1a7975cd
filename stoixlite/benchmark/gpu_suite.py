"""``--suite gpu``: the GPU table of docs/benchmarks.md in one command.

CartPole-v1, 128-step rollouts, 4 epochs x 4 minibatches; ``feedforward`` (its config's widths)
against PureJaxRL's ``ppo.py`` set-up, and ``gru``, ``memoroid`` and ``mlp`` at width 128
against its ``ppo_rnn.py`` set-up, at 64, 1,024 and 4,096 envs; the four networks at a POPGym
table cell's shape (64 envs x 3 seeds, ``arch.num_seeds=3``, steps of all seeds counted); and
``arch.branching=skip`` beside the default (``auto``: ``mask`` on an accelerator) for
``feedforward`` and ``gru`` at 4,096 envs and the cell's shape. The PureJaxRL rows are
stoixlite's own implementations of its set-ups, or with ``--purejaxrl-dir DIR`` PureJaxRL's own
files (label ``(checkout)``). Rows run most important first (4,096 envs, the cell, the branching
rows, then 64 and 1,024 envs), each printed as it ends.

``--sizes small`` (the default on a CPU, ``--sizes auto``) runs one row of each kind at a CPU's
size (the six networks at 8 envs x 16 steps, gru at 4 envs x 3 seeds and with the other
``arch.branching``), all in one worker process, for a test of the suite; ``full`` the sizes
above (26 rows; well under 8 minutes on an H200).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from stoixlite.benchmark.rows import PUREJAXRL_PPO, PUREJAXRL_PPO_RNN, REFERENCE_ENV
from stoixlite.benchmark.table import commit
from stoixlite.config.plan import resolve_branching

SIZES = ("auto", "full", "small")
NETWORKS = ("feedforward", "gru", "memoroid", "mlp")
# The peers of each stoixlite network and the label of their row.
PEER = {"feedforward": PUREJAXRL_PPO, "gru": PUREJAXRL_PPO_RNN}
PEER_LABEL = {PUREJAXRL_PPO: "PureJaxRL `ppo.py`", PUREJAXRL_PPO_RNN: "PureJaxRL `ppo_rnn.py`"}
WIDTH = {"feedforward": None, "gru": 128, "memoroid": 128, "mlp": 128}  # None: config's own
SEEDS = 3  # a POPGym table cell trains 3 seeds in one program
BRANCHING_NETWORKS = ("feedforward", "gru")


def shapes(sizes: str) -> dict:
    """The suite's sizes: env counts (the first runs first), the cell's envs, the rollout length
    and the updates per timed call of each env count (about a second at the H200's speeds)."""
    if sizes == "full":
        return {"envs": (4096, 64, 1024), "cell": 64, "rollout": 128, "updates": {64: 16}}
    return {"envs": (8,), "cell": 4, "rollout": 16, "updates": {}}


def backend() -> str:
    """JAX's default backend, asked of a subprocess (this process never starts one: on a GPU it
    would hold the card's memory while the rows run)."""
    code = "import jax; print(jax.default_backend())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else "cpu"


def other_branching(platform: str) -> str:
    """The ``arch.branching`` that ``auto`` does not pick on ``platform``: the suite's
    comparison rows."""
    return "mask" if resolve_branching("auto", platform) == "skip" else "skip"


def suite_specs(sizes: str, purejaxrl_dir: str | None, repeats: int, platform: str) -> list[dict]:
    """The suite's rows (``sizes``: ``full`` or ``small``) in the order they run, on a
    ``platform`` backend (which ``arch.branching`` its comparison rows take)."""
    shape = shapes(sizes)
    compared = other_branching(platform)

    def row(network: str, num_envs: int, seeds: int = 1, branching: str | None = None) -> dict:
        overrides = [f"arch.num_seeds={seeds}"] if seeds > 1 else []
        if branching:
            overrides.append(f"arch.branching={branching}")
        spec = {
            "network": network,
            "env": REFERENCE_ENV,
            "num_envs": num_envs,
            "width": WIDTH.get(network),
            "rollout_length": shape["rollout"],
            "epochs": 4,
            "minibatches": 4,
            "updates": shape["updates"].get(num_envs, 4 if sizes == "full" else 2),
            "repeats": repeats,
            "overrides": overrides,
            "label": " ".join(overrides),
            "suite": {"envs": num_envs, "seeds": seeds, "branching": branching or "auto"},
        }
        if network in PEER_LABEL and purejaxrl_dir:
            spec.update(purejaxrl_dir=purejaxrl_dir, label="(checkout)")
        return spec

    against = (PEER["feedforward"], NETWORKS[0], PEER["gru"], *NETWORKS[1:])
    first, *others = shape["envs"]
    specs = [row(n, first) for n in against]
    if sizes == "small":  # one row of each other kind: seeds, and the other branching
        return [*specs, row("gru", shape["cell"], SEEDS), row("gru", first, branching=compared)]
    specs += [row(n, shape["cell"], SEEDS) for n in NETWORKS]
    specs += [row(n, first, branching=compared) for n in BRANCHING_NETWORKS]
    specs += [row(n, shape["cell"], SEEDS, branching=compared) for n in BRANCHING_NETWORKS]
    specs += [row(n, e) for e in others for n in against]
    return specs


def _column(spec: dict) -> str:
    suite = spec["suite"]
    head = f"{suite['envs']:,} x {spec['rollout_length']}"
    return head + (f" x {suite['seeds']} seeds" if suite["seeds"] > 1 else "")


def _name(row: dict) -> str:
    network = row["network"]
    if network in PEER_LABEL:
        return PEER_LABEL[network] + (" (checkout)" if row.get("purejaxrl_dir") else "") + " set-up"
    width = WIDTH[network]
    return f"`{network}`" + (f" (width {width})" if width else "")


def _sps(row: dict | None) -> float | None:
    if row is None or "error" in row or not row.get("sps_all"):
        return None
    return statistics.median(row["sps_all"])


def report(rows: list[dict], hardware: str, command: str) -> str:
    """The suite's tables in the format of docs/benchmarks.md: SPS per network and size with
    the ratios of the targets, and ``skip`` beside ``mask``; headed by the machine, commit, date
    and command."""
    main = [r for r in rows if r["suite"]["branching"] == "auto"]
    columns = list(dict.fromkeys(_column(r) for r in main))
    names = list(dict.fromkeys(_name(r) for r in main))
    cell = {(_name(r), _column(r)): r for r in main}

    def fmt(value: float | None, ratio: bool = False) -> str:
        if value is None:
            return "-"
        return f"{value:.2f}x" if ratio else f"{value:,.0f}"

    def ratio(top: str, bottom: str, column: str) -> float | None:
        a, b = _sps(cell.get((top, column))), _sps(cell.get((bottom, column)))
        return a / b if a and b else None

    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"Machine: {hardware}; commit {commit()}; {date}",
        f"Command: `{command}`. SPS (env steps/s of all seeds, compile excluded), median of the "
        "timed chunks; CartPole-v1, 4 epochs x 4 minibatches.",
        "",
        "| network | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name in names:
        values = [fmt(_sps(cell.get((name, c)))) for c in columns]
        lines.append(f"| {name} | " + " | ".join(values) + " |")
    by_network = {r["network"]: _name(r) for r in main}
    targets = [
        ("feedforward / `ppo.py`", "feedforward", PUREJAXRL_PPO),
        ("gru / `ppo_rnn.py`", "gru", PUREJAXRL_PPO_RNN),
        ("memoroid / gru", "memoroid", "gru"),
    ]
    for label, top, bottom in targets:
        if top in by_network and bottom in by_network:
            values = [fmt(ratio(by_network[top], by_network[bottom], c), True) for c in columns]
            lines.append(f"| {label} | " + " | ".join(values) + " |")
    compared = [r for r in rows if r["suite"]["branching"] != "auto"]
    if compared:
        lines += [
            "",
            "| run | `arch.branching=skip` | `arch.branching=mask` | mask / skip |",
            "|---|---:|---:|---:|",
        ]
        for row in compared:
            auto = cell.get((_name(row), _column(row)))
            by_mode = {row["suite"]["branching"]: _sps(row)}
            if auto is not None:
                by_mode[resolve_branching("auto", auto.get("backend", "cpu"))] = _sps(auto)
            skip, mask = by_mode.get("skip"), by_mode.get("mask")
            lines.append(
                f"| {_name(row)}, {_column(row)} | {fmt(skip)} | {fmt(mask)} | "
                f"{fmt(mask / skip if mask and skip else None, True)} |"
            )
    failed = [r for r in rows if "error" in r]
    lines += [f"\nfailed: {_name(r)}, {_column(r)}: {r['error']}" for r in failed]
    return "\n".join(lines)
