"""``--suite programs``: what one step of the update's loops holds, beside PureJaxRL's.

For ``feedforward`` and ``gru`` (width 128), each with ``arch.branching=skip`` and ``mask``, and
PureJaxRL's ``ppo.py`` and ``ppo_rnn.py`` set-ups (stoixlite's implementations, or their own
files with ``--purejaxrl-dir``), at 64 envs x 128 steps, 4 epochs x 4 minibatches on CartPole-v1:
the jaxpr equations of one rollout step and of one minibatch step
(:func:`~stoixlite.benchmark.programs.step_equations`: each loop body once, with every jaxpr
inside it) and the fusions of the compiled learn chunk
(:func:`~stoixlite.benchmark.programs.fusions`, the kernels of a GPU; this backend's), all in one
worker process. Equations count what is traced, before XLA removes dead code and fuses.
"""

from __future__ import annotations

from stoixlite.benchmark.programs import equations, fusions, step_equations
from stoixlite.benchmark.purejaxrl import reference_program
from stoixlite.benchmark.rows import (
    PUREJAXRL_PPO,
    PUREJAXRL_PPO_RNN,
    REFERENCE_ENV,
    build_stoixlite_run,
)

ROWS = (
    (PUREJAXRL_PPO, None),
    ("feedforward", "skip"),
    ("feedforward", "mask"),
    (PUREJAXRL_PPO_RNN, None),
    ("gru", "skip"),
    ("gru", "mask"),
)
NAMES = {PUREJAXRL_PPO: "PureJaxRL `ppo.py`", PUREJAXRL_PPO_RNN: "PureJaxRL `ppo_rnn.py`"}


def program_specs(purejaxrl_dir: str | None) -> list[dict]:
    """The suite's rows: 64 envs x 128 steps, 4 x 4, one update per program."""
    return [
        {
            "network": network,
            "env": REFERENCE_ENV,
            "num_envs": 64,
            "width": None if network == "feedforward" else 128,
            "rollout_length": 128,
            "epochs": 4,
            "minibatches": 4,
            "updates": 1,
            "repeats": 0,
            "overrides": [f"arch.branching={branching}"] if branching else [],
            "label": f"arch.branching={branching}" if branching else "",
            "measure": "programs",
            **({"purejaxrl_dir": purejaxrl_dir} if purejaxrl_dir and not branching else {}),
        }
        for network, branching in ROWS
    ]


def program_row(spec: dict) -> dict:
    """Worker: the equations per rollout and minibatch step, all equations, and the fusions of
    the compiled program of one row (traced and compiled, not run)."""
    import jax

    if spec["network"] in NAMES:
        fn, argument, _ = reference_program(spec)
        jitted = jax.jit(fn)
    else:
        run = build_stoixlite_run(spec)
        jitted, argument = run.learn, jax.eval_shape(run.initial_states)
    jaxpr = jax.make_jaxpr(jitted)(argument)
    steps = step_equations(jaxpr, spec["rollout_length"], spec["epochs"], spec["minibatches"])
    return {
        **{k: spec[k] for k in ("network", "label", "num_envs", "rollout_length")},
        "purejaxrl_dir": spec.get("purejaxrl_dir"),
        "rollout_equations": steps["rollout"],
        "minibatch_equations": steps["minibatch"],
        "equations": equations(jaxpr),
        "fusions": fusions(jitted.lower(argument).compile()),
        "backend": jax.default_backend(),
    }


def program_report(rows: list[dict], hardware: str, command: str, date: str, commit: str) -> str:
    """The suite's table in the format of docs/benchmarks.md."""
    lines = [
        f"Machine: {hardware}; commit {commit}; {date}",
        f"Command: `{command}`. CartPole-v1, 64 envs x 128 steps, 4 epochs x 4 minibatches.",
        "",
        "| program | equations per rollout step | per minibatch step | all equations "
        "| fusions of the compiled program |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['network']} | error: {row['error']} ||||")
            continue
        name = NAMES.get(row["network"], f"`{row['network']}`")
        name += (
            " (checkout)"
            if row.get("purejaxrl_dir")
            else (" set-up" if row["network"] in NAMES else "")
        )
        name += f", `{row['label']}`" if row["label"] else ""
        lines.append(
            f"| {name} | {row['rollout_equations']} | {row['minibatch_equations']} "
            f"| {row['equations']} | {row['fusions']} |"
        )
    return "\n".join(lines)
