"""The POPGym paper's published results: MMER of its GRU and of its best model per cell.

Source: Morad, Kortvelesy, Bettini, Liwicki, Prorok, "POPGym: Benchmarking Partially Observable
Reinforcement Learning", ICLR 2023, appendix table of MMER (max mean episodic return, mean over 3
trials, 15M env steps, RLlib PPO), transcribed by hand from that table; the docs
(docs/popgym_table.md) say so next to every number. The paper calls ``position_only_cartpole``
"StatelessCartPole" and ``noisy_position_only_cartpole`` "NoisyStatelessCartPole". Envs without
a row here (battleship, concentration, minesweeper, the labyrinths, the pendulums,
velocity_only_cartpole) have no published number in that table.
"""

from __future__ import annotations

from dataclasses import dataclass

DIFFICULTIES = ("easy", "medium", "hard")

# The 16 POPGym envs, as ``configs/env/popgym/<name>.yaml`` names them.
ENVS = (
    "autoencode",
    "battleship",
    "concentration",
    "count_recall",
    "higher_lower",
    "labyrinth_escape",
    "labyrinth_explore",
    "minesweeper",
    "multiarmed_bandit",
    "noisy_position_only_cartpole",
    "noisy_position_only_pendulum",
    "position_only_cartpole",
    "position_only_pendulum",
    "repeat_first",
    "repeat_previous",
    "velocity_only_cartpole",
)


@dataclass(frozen=True)
class PaperCell:
    """The paper's MMER for one (env, difficulty): its GRU, and its best model (name, MMER)."""

    gru: float
    best: float
    best_model: str


def _row(*cells: tuple[float, float, str]) -> dict[str, PaperCell]:
    return {d: PaperCell(*c) for d, c in zip(DIFFICULTIES, cells, strict=True)}


# (GRU, best, best model) for easy, medium, hard; "GRU" as best model where the GRU was best,
# "all" where every model reached the maximum.
PAPER: dict[str, dict[str, PaperCell]] = {
    "autoencode": _row(
        (-0.283, -0.283, "GRU"), (-0.425, -0.420, "IndRNN"), (-0.456, -0.448, "IndRNN")
    ),
    "count_recall": _row(
        (0.177, 0.509, "LSTM"), (-0.528, -0.519, "PosMLP"), (-0.475, -0.470, "PosMLP/TCN")
    ),
    "higher_lower": _row((0.529, 0.529, "GRU"), (0.511, 0.513, "IndRNN"), (0.506, 0.509, "IndRNN")),
    "multiarmed_bandit": _row(
        (0.619, 0.631, "Elman"), (0.538, 0.598, "TCN"), (0.516, 0.574, "TCN")
    ),
    "noisy_position_only_cartpole": _row(
        (0.995, 0.995, "GRU"), (0.642, 0.659, "IndRNN"), (0.390, 0.404, "IndRNN")
    ),
    "repeat_first": _row((1.000, 1.000, "all"), (1.000, 1.000, "GRU"), (0.940, 0.969, "IndRNN")),
    "repeat_previous": _row((1.000, 1.000, "all"), (-0.315, 0.789, "LMU"), (-0.428, 0.191, "LMU")),
    "position_only_cartpole": _row(
        (1.000, 1.000, "all"), (1.000, 1.000, "all"), (1.000, 1.000, "all")
    ),
}

# stoixlite's port of each model the paper names as a cell's best (``configs/network/``).
PAPER_MODELS = {
    "GRU": "gru",
    "LSTM": "lstm",
    "Elman": "elman",
    "IndRNN": "indrnn",
    "LMU": "lmu",
    "TCN": "tcn",
    "PosMLP": "positional_mlp",
}


def paper_best_networks(env: str, difficulty: str) -> list[str]:
    """stoixlite's ports of the paper's best model(s) of a cell (``"PosMLP/TCN"``: both); none
    for an unpublished cell or one where every model tied ("all")."""
    cell = PAPER.get(env, {}).get(difficulty)
    if cell is None or cell.best_model == "all":
        return []
    return [PAPER_MODELS[name] for name in cell.best_model.split("/")]
