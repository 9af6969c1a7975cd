"""The run plan: what a parsed config means for the run, derived once into an immutable value.

The entry point plans a run once (:func:`plan_run`) and hands the :class:`RunPlan` down: the
build (:func:`stoixlite.run.build.build_run`), the host envs' run, the device layout, the host
loop and the resume checks all read it, and none of them derives any of it again. The plan:

* splits the budget into compiled learn chunks (:func:`chunk_split`) and says in one line where
  the run trains another number of steps or chunks than the config asks (``budget_note``);
* makes the static :class:`~stoixlite.ppo.types.PPOConfig` of the learner, and the values its
  programs take as inputs (:class:`~stoixlite.ppo.types.Hyper`; the env's params among them are
  the run's, :func:`stoixlite.run.parts.run_hyper`);
* selects the run's devices (:func:`select_devices`) and checks that the envs and every
  minibatch split evenly over them (:func:`~stoixlite.config.checks.check_device_split`);
* reads the config's plain dict once, and from it the checkpoint fingerprint
  (:func:`~stoixlite.config.fingerprint.config_fingerprint`), the YAML saved as the run's
  ``config.yaml`` and the key of the compiled programs' cache (without the seed and the
  ``Hyper`` values: runs that differ only in them share their programs).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import jax
from omegaconf import OmegaConf

from stoixlite.config.checks import check_device_split
from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.schema import RunConfig
from stoixlite.config.strict import ConfigError
from stoixlite.ppo.types import HYPER_KEYS, Hyper, PPOConfig

# Equal chunks of whole updates rarely fit a budget exactly: the run keeps arch.num_evaluations
# while that trains at least this share of the budget's updates, else takes fewer chunks.
KEPT_BUDGET_SHARE = 0.95
# Config groups that change no compiled program (what the run writes, how its processes meet).
_UNCOMPILED_GROUPS = ("logger", "checkpoint", "distributed", "resume")
# arch keys that change no compiled program (seed: an input; the others: host-side checks).
_UNCOMPILED_ARCH_KEYS = ("seed", "target_return", "on_nonfinite", "max_rollbacks")


def chunk_split(num_updates: int, max_chunks: int) -> tuple[int, int]:
    """``(chunks, updates per chunk)``: ``num_updates`` whole updates (>= 1) in at most
    ``max_chunks`` equal chunks, the most chunks that train at least :data:`KEPT_BUDGET_SHARE`
    of them (``max_chunks`` whenever it does). E.g. 36 updates, at most 20 chunks: 18 x 2
    (20 x 1 would train 20); 244 updates: 20 x 12 = 240; 6 updates: 6 x 1."""
    for chunks in range(min(max_chunks, num_updates), 1, -1):
        if chunks * (num_updates // chunks) >= KEPT_BUDGET_SHARE * num_updates:
            return chunks, num_updates // chunks
    return 1, max(1, num_updates)  # below one update: refused by the parser's budget check


def config_chunks(cfg: RunConfig) -> tuple[int, int]:
    """``(chunks, updates per chunk)`` of ``cfg``'s budget (:func:`chunk_split` of its whole
    updates into at most ``arch.num_evaluations`` chunks)."""
    return chunk_split(cfg.arch.total_timesteps // cfg.steps_per_update, cfg.arch.num_evaluations)


def chunking_line(chunks: int, updates_per_chunk: int, steps_per_update: int) -> str:
    """``"<chunks> chunks x <updates per chunk> updates x <steps per update> steps"``."""
    return f"{chunks} chunks x {updates_per_chunk} updates x {steps_per_update} steps"


def select_devices(num_devices: int | None) -> tuple[jax.Device, ...]:
    """The first ``num_devices`` local devices of every process (all when ``None``), ordered by
    process. Raises :class:`ConfigError` when a process has fewer devices."""
    local = jax.local_device_count()
    per_process = local if num_devices is None else num_devices
    if per_process > local:
        raise ConfigError(
            [
                f"arch.num_devices={num_devices!r} is invalid: this process has {local} "
                f"{jax.default_backend()} device(s)"
            ]
        )
    by_process: dict[int, list[jax.Device]] = {}
    for device in jax.devices():
        by_process.setdefault(device.process_index, []).append(device)
    ordered = [sorted(by_process[p], key=lambda d: d.id) for p in sorted(by_process)]
    return tuple(device for devices in ordered for device in devices[:per_process])


@dataclass(frozen=True)
class RunPlan:
    """A run's config and what it means for the run (see the module docstring). Read, never
    changed: a rollback's halved learning rate is a new plan (:meth:`with_lr`)."""

    config: RunConfig
    num_updates: int  # whole updates in arch.total_timesteps
    num_chunks: int  # compiled learn chunks, an evaluation after each
    steps_per_update: int  # arch.num_envs x system.rollout_length
    ppo: PPOConfig  # the learner's static settings (updates_per_chunk, num_updates trained)
    hyper: Hyper  # the system values the programs take as inputs (floats; env params: the run's)
    total_steps: int  # env steps the run trains: whole updates in whole chunks
    chunking: str  # "<chunks> chunks x <updates per chunk> updates x <steps per update> steps"
    budget_note: str | None  # one line when the run trains other steps or chunks than asked
    name: str  # "<env>[<difficulty>] <network> seed=<seed or first..last>"
    devices: tuple[jax.Device, ...]  # of every process, ordered by process
    config_dict: dict[str, Any]  # RunConfig.to_dict(): the config W&B shows
    fingerprint: dict[str, Any]  # what a checkpoint must agree on (config_fingerprint)
    saved_config: str  # the YAML of the run's config.yaml (without the processes' settings)
    # everything the compiled programs depend on (not the seed, the Hyper values, the outputs)
    compile_key: str

    @property
    def steps_per_chunk(self) -> int:
        return self.steps_per_update * self.ppo.updates_per_chunk

    def with_lr(self, lr: float) -> RunPlan:
        """This run's plan with ``system.lr`` = ``lr`` (a rollback after non-finite values; the
        devices stay those selected)."""
        system = dataclasses.replace(self.config.system, lr=lr)
        return _derive(dataclasses.replace(self.config, system=system), self.devices)


def resolve_branching(branching: str, platform: str) -> str:
    """``arch.branching`` for devices of ``platform`` (``jax.Device.platform``: "cpu", "gpu",
    "tpu", ...): ``skip`` or ``mask``. ``auto`` is ``skip`` on CPUs, where a branch that skips
    rare work pays, and ``mask`` on accelerators, where a data-dependent branch waits for its
    predicate on the host (docs/scaling.md, "Branching on accelerators")."""
    if branching != "auto":
        return branching
    return "skip" if platform == "cpu" else "mask"


def plan_run(cfg: RunConfig) -> RunPlan:
    """The :class:`RunPlan` of ``cfg``, once per run: ``arch.num_evaluations`` chunks, unless
    fewer equal chunks keep more of the budget (:func:`chunk_split`), on the devices of
    ``arch.num_devices`` (:class:`ConfigError` where they do not exist or the envs and
    minibatches do not split over them)."""
    from stoixlite.envs.host import is_host_env

    # A host env's run steps its envs on the host and learns on one device (the config checks).
    devices = select_devices(1 if is_host_env(cfg.env.name) else cfg.arch.num_devices)
    check_device_split(cfg, len(devices))
    return _derive(cfg, devices)


def _derive(cfg: RunConfig, devices: tuple[jax.Device, ...]) -> RunPlan:
    from stoixlite.networks.memory import is_stateless

    steps_per_update = cfg.steps_per_update
    num_updates = cfg.arch.total_timesteps // steps_per_update
    num_chunks, updates_per_chunk = config_chunks(cfg)
    given = {f.name: getattr(cfg.system, f.name) for f in dataclasses.fields(cfg.system)}
    # Stateless networks train on shuffled single transitions (no sequences, no burn-in).
    transitions = cfg.system.stateless_transitions and is_stateless(cfg.network.name)
    if transitions:
        given["burn_in"] = 0
    ppo = PPOConfig(
        **{f.name: given[f.name] for f in dataclasses.fields(PPOConfig) if f.name in given},
        transitions=transitions,
        branching=resolve_branching(cfg.arch.branching, devices[0].platform),
        num_envs=cfg.arch.num_envs,
        num_updates=updates_per_chunk * num_chunks,
        updates_per_chunk=updates_per_chunk,
    )
    total_steps = ppo.num_updates * steps_per_update
    chunking = chunking_line(num_chunks, updates_per_chunk, steps_per_update)
    seeds = cfg.arch.seeds
    seed = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
    container = cfg.to_dict()
    return RunPlan(
        config=cfg,
        num_updates=num_updates,
        num_chunks=num_chunks,
        steps_per_update=steps_per_update,
        ppo=ppo,
        hyper=Hyper(**{key: float(getattr(cfg.system, key)) for key in HYPER_KEYS}),
        total_steps=total_steps,
        chunking=chunking,
        budget_note=_budget_note(cfg, num_updates, num_chunks, total_steps, chunking),
        name=f"{cfg.env.name}[{cfg.env.difficulty or '-'}] {cfg.network.name} seed={seed}",
        devices=tuple(devices),
        config_dict=container,
        fingerprint=config_fingerprint(container),
        saved_config=OmegaConf.to_yaml({k: v for k, v in container.items() if k != "distributed"}),
        compile_key=_compile_key(container),
    )


def _compile_key(container: dict[str, Any]) -> str:
    """The JSON of what the compiled programs depend on: the config without the groups and keys
    that change none of them (the programs take the seed and the ``Hyper`` values as inputs)."""
    compiled = {k: v for k, v in container.items() if k not in _UNCOMPILED_GROUPS}
    compiled["arch"] = {k: v for k, v in compiled["arch"].items() if k not in _UNCOMPILED_ARCH_KEYS}
    compiled["system"] = {k: v for k, v in compiled["system"].items() if k not in HYPER_KEYS}
    return json.dumps(compiled, sort_keys=True, default=str)


# Fewer PPO updates than this in a run: the budget note says so (e.g. many envs, a small budget).
FEW_UPDATES = 10


def _budget_note(
    cfg: RunConfig, num_updates: int, num_chunks: int, total_steps: int, chunking: str
) -> str | None:
    """One line: the envs of a run scaled by ``arch.scale_to_envs``, :func:`_split_note`, and
    whether the run does fewer than :data:`FEW_UPDATES` PPO updates."""
    notes = []
    if cfg.arch.scale_to_envs is not None:
        notes.append(
            f"arch.scale_to_envs={cfg.arch.scale_to_envs}: arch.num_envs={cfg.arch.num_envs}, "
            f"arch.total_timesteps={cfg.arch.total_timesteps} ({num_updates} PPO updates)"
        )
    notes.append(_split_note(cfg, num_updates, num_chunks, total_steps, chunking))
    if num_updates < FEW_UPDATES:
        scale = "" if cfg.arch.scale_to_envs else "; preset=gpu scales it with the envs"
        notes.append(
            f"{num_updates} PPO updates of arch.num_envs={cfg.arch.num_envs} x "
            f"system.rollout_length={cfg.system.rollout_length} steps, fewer than {FEW_UPDATES} "
            f"(raise arch.total_timesteps{scale})"
        )
    return "; ".join(note for note in notes if note) or None


def _split_note(
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
