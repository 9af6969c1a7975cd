"""The run plan: what a parsed config means for the run, computed once into a plain value.

:func:`plan_run` splits the budget into compiled learn chunks (:func:`chunk_split`), makes the
static :class:`~stoixlite.ppo.types.PPOConfig` of the learner, and says in one line where the run
trains another number of steps or chunks than the config asks (``budget_note``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stoixlite.config.schema import RunConfig
from stoixlite.ppo.types import PPOConfig

# Equal chunks of whole updates rarely fit a budget exactly: the run keeps arch.num_evaluations
# while that trains at least this share of the budget's updates, else takes fewer chunks.
KEPT_BUDGET_SHARE = 0.95


def chunk_split(num_updates: int, max_chunks: int) -> tuple[int, int]:
    """``(chunks, updates per chunk)``: ``num_updates`` whole updates (>= 1) in at most
    ``max_chunks`` equal chunks, the most chunks that train at least :data:`KEPT_BUDGET_SHARE`
    of them (``max_chunks`` whenever it does). E.g. 36 updates, at most 20 chunks: 18 x 2
    (20 x 1 would train 20); 244 updates: 20 x 12 = 240; 6 updates: 6 x 1."""
    for chunks in range(min(max_chunks, num_updates), 1, -1):
        if chunks * (num_updates // chunks) >= KEPT_BUDGET_SHARE * num_updates:
            return chunks, num_updates // chunks
    return 1, max(1, num_updates)  # below one update: refused by the parser's budget check


@dataclass(frozen=True)
class RunPlan:
    """What a run does with its config's budget."""

    num_updates: int  # whole updates in arch.total_timesteps
    num_chunks: int  # compiled learn chunks, an evaluation after each
    steps_per_update: int  # arch.num_envs x system.rollout_length
    ppo: PPOConfig  # the learner's static settings (updates_per_chunk, num_updates trained)
    total_steps: int  # env steps the run trains: whole updates in whole chunks
    chunking: str  # "<chunks> chunks x <updates per chunk> updates x <steps per update> steps"
    budget_note: str | None  # one line when the run trains other steps or chunks than asked
    name: str  # "<env>[<difficulty>] <network> seed=<seed or first..last>"


def plan_run(cfg: RunConfig) -> RunPlan:
    """The :class:`RunPlan` of ``cfg``: ``arch.num_evaluations`` chunks, unless fewer equal
    chunks keep more of the budget (:func:`chunk_split`)."""
    from stoixlite.networks.memory import is_stateless

    steps_per_update = cfg.steps_per_update
    num_updates = cfg.arch.total_timesteps // steps_per_update
    num_chunks, updates_per_chunk = chunk_split(num_updates, cfg.arch.num_evaluations)
    given = {f.name: getattr(cfg.system, f.name) for f in dataclasses.fields(cfg.system)}
    # Stateless networks train on shuffled single transitions (no sequences, no burn-in).
    transitions = cfg.system.stateless_transitions and is_stateless(cfg.network.name)
    if transitions:
        given["burn_in"] = 0
    ppo = PPOConfig(
        **{f.name: given[f.name] for f in dataclasses.fields(PPOConfig) if f.name in given},
        transitions=transitions,
        num_envs=cfg.arch.num_envs,
        num_updates=updates_per_chunk * num_chunks,
        updates_per_chunk=updates_per_chunk,
    )
    total_steps = ppo.num_updates * steps_per_update
    chunking = f"{num_chunks} chunks x {updates_per_chunk} updates x {steps_per_update} steps"
    seeds = cfg.arch.seeds
    seed = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
    return RunPlan(
        num_updates=num_updates,
        num_chunks=num_chunks,
        steps_per_update=steps_per_update,
        ppo=ppo,
        total_steps=total_steps,
        chunking=chunking,
        budget_note=_budget_note(cfg, num_updates, num_chunks, total_steps, chunking),
        name=f"{cfg.env.name}[{cfg.env.difficulty or '-'}] {cfg.network.name} seed={seed}",
    )


def _budget_note(
    cfg: RunConfig, num_updates: int, num_chunks: int, total_steps: int, chunking: str
) -> str | None:
    """One line when ``arch.total_timesteps`` does not divide into whole updates and chunks (the
    run then trains ``total_steps``) or runs fewer chunks than ``arch.num_evaluations``."""
    evaluations = cfg.arch.num_evaluations
    fewer = num_chunks != evaluations
    if total_steps == cfg.arch.total_timesteps and not fewer:
        return None
    why = ""
    if num_updates < evaluations:
        why = f"; the budget holds {num_updates} whole updates, fewer than arch.num_evaluations"
    elif fewer:
        kept = num_updates // evaluations * evaluations * cfg.steps_per_update
        why = f"; arch.num_evaluations={evaluations} equal chunks would train {kept} steps"
    return (
        f"arch.total_timesteps={cfg.arch.total_timesteps} runs {total_steps} steps: "
        f"{chunking} (arch.num_envs x system.rollout_length){why}"
    )
