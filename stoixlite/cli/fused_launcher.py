"""The ``fused`` Hydra launcher: a sweep's jobs that share one program train as one program.

``python -m stoixlite.rec_ppo -m hydra/launcher=fused system.lr=1e-4,3e-4,1e-3 arch.seed=0,1``
composes every job's config as Hydra's basic launcher does, groups the jobs whose programs are
the same (:func:`stoixlite.run.build.program_key`: they differ only in their seeds, the values
the programs take as inputs, :class:`~stoixlite.ppo.types.Hyper`, their outputs and the host
loop's own keys) and trains each group as one program (:mod:`stoixlite.run.fused`), one group
after another in the order of their first jobs. Every job is still a run: its own
``hydra.sweep.subdir`` directory with ``.hydra/``, ``config.yaml``, metrics, checkpoints, curve and
W&B run, as if it had run alone (up to float rounding), and the value it returns to the sweeper.

A job runs as the basic launcher runs it (in this process, alone) when it shares its program with
no other job, or cannot be fused: one line says why (``resume=``, a host env, a multi-process
run, a config that does not parse: that job then fails as it would alone). A sweep split into
several programs says in one line per program which jobs it trains and in which keys the programs
differ; a group whose memory estimate (:mod:`stoixlite.run.footprint`) exceeds its devices' memory,
or ``hydra.launcher.max_members``, is split into programs that fit, with one line. Failed jobs
write ``error.txt`` and return NaN; the sweep goes on, and the failed-jobs summary
(:mod:`stoixlite.cli.sweep_callback`) ends it non-zero. Callbacks see each fused job start before
its group trains and end after it, with its result.

Hydra instantiates launchers only from the ``hydra_plugins`` package:
``hydra_plugins/stoixlite_fused/`` holds the class Hydra finds, a subclass of :class:`FusedLauncher`
(installed with the package). This module imports no JAX at import time (Hydra imports every
plugin module on start-up).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobRuntime,
    JobStatus,
    configure_log,
    env_override,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)
PREFIX = "fused launcher"


@dataclass
class Job:
    """One job of the sweep: its index, overrides, composed config (with ``hydra``) and run
    directory; its plan and program key when it can be fused, else why not."""

    index: int
    overrides: list[str]
    sweep_config: DictConfig
    run_dir: Path
    sweep: str | None
    plan: Any = None  # stoixlite.config.plan.RunPlan
    key: str | None = None
    alone: str | None = None  # why it runs alone (None: it may be fused)


class FusedLauncher(Launcher):
    """See the module docstring. ``max_members``: at most this many jobs per program (``None``:
    as many as fit in memory)."""

    def __init__(self, max_members: int | None = None) -> None:
        super().__init__()
        if max_members is not None and (not isinstance(max_members, int) or max_members < 1):
            raise ValueError(
                f"hydra.launcher.max_members={max_members!r} is invalid: a positive integer or null"
            )
        self.max_members = max_members
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from stoixlite.cli.process import setup_process
        from stoixlite.run.signals import raise_if_ctrl_c

        setup_globals()
        setup_process()  # what rec_ppo's task applies in each job (logger levels)
        assert self.config is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally, fused where they share a program")
        jobs = [self._job(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        returns: dict[int, JobReturn] = {}
        for unit in self._units(jobs):
            raise_if_ctrl_c()
            if len(unit) == 1:
                returns[unit[0].index] = self._alone(unit[0])
            else:
                returns.update(self._fused(unit))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return [returns[job.index] for job in jobs]

    # -- planning ---------------------------------------------------------------------------

    def _job(self, index: int, overrides: list[str]) -> Job:
        """Compose job ``index``'s config as the basic launcher does, and read it."""
        from stoixlite.cli.configs import sweep_name

        assert self.hydra_context is not None and self.config is not None
        log.info(f"\t#{index} : {' '.join(filter_overrides(overrides))}")
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = index
            sweep_config.hydra.job.num = index
        HydraConfig.instance().set_config(sweep_config)
        run_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
        with read_write(sweep_config.hydra.runtime), open_dict(sweep_config.hydra.runtime):
            sweep_config.hydra.runtime.output_dir = str(run_dir.resolve())
        HydraConfig.instance().set_config(sweep_config)
        job = Job(index, overrides, sweep_config, run_dir.resolve(), sweep_name())
        job.alone = _read(job)
        return job

    def _units(self, jobs: list[Job]) -> list[list[Job]]:
        """The programs to run, in the order of their first jobs: groups of fusable jobs with
        one program key (split to fit, :meth:`_fitting`), and jobs alone; one line each for the
        jobs that cannot be fused and for a sweep of several programs."""
        groups: dict[str, list[Job]] = {}
        for job in jobs:
            if job.alone is not None:
                print(f"{PREFIX}: job {job.index} runs alone: {job.alone}", file=sys.stderr)
            else:
                assert job.key is not None
                groups.setdefault(job.key, []).append(job)
        if len(groups) > 1:
            for line in _split_lines(list(groups.values())):
                print(f"{PREFIX}: {line}", file=sys.stderr)
        units = [[job] for job in jobs if job.alone is not None]
        for group in groups.values():
            units.extend(self._fitting(group) if len(group) > 1 else [group])
        return sorted(units, key=lambda unit: unit[0].index)

    def _fitting(self, group: list[Job]) -> list[list[Job]]:
        """``group`` in programs of at most ``max_members`` jobs that fit in the devices'
        memory (the footprint estimate of the group, per member), with one line if split."""
        from stoixlite.run.fused import fitting_size

        plans = [job.plan for job in group]
        size, why = fitting_size(plans, self.max_members, "hydra.launcher.max_members")
        if size >= len(group):
            return [group]
        parts = [group[i : i + size] for i in range(0, len(group), size)]
        print(
            f"{PREFIX}: jobs {_indices(group)} split into {len(parts)} programs of at most "
            f"{size} jobs: {why}",
            file=sys.stderr,
        )
        return parts

    # -- running ----------------------------------------------------------------------------

    def _alone(self, job: Job) -> JobReturn:
        """The job as the basic launcher runs it."""
        assert self.hydra_context is not None and self.task_function is not None
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=job.sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )

    def _fused(self, jobs: list[Job]) -> dict[int, JobReturn]:
        """Train ``jobs`` as one program (:func:`stoixlite.run.fused.train_group`): each job's
        directory and ``.hydra/`` files first and its start callbacks, then the group, then each
        job's return (its final eval return, or NaN and ``error.txt``) and end callbacks."""
        from stoixlite.cli.sweep_callback import record_failure
        from stoixlite.run.fused import Member, train_group
        from stoixlite.run.signals import TrainingInterrupted, ctrl_c_raises

        assert self.hydra_context is not None
        callbacks = self.hydra_context.callbacks
        returns = {job.index: self._start(job) for job in jobs}
        print(f"{PREFIX}: jobs {_indices(jobs)} train as one program", file=sys.stderr)
        members = [Member(job.plan, job.run_dir, job.sweep) for job in jobs]
        failure: tuple[str, str] | None = None
        first = jobs[0].sweep_config.hydra.job.env_set
        try:
            with env_override(first), ctrl_c_raises():
                train_group(members)
        except TrainingInterrupted as stop:
            print(str(stop), file=sys.stderr)
            raise
        except KeyboardInterrupt:
            print(
                f"{PREFIX}: interrupted; each job that saved a checkpoint resumes with "
                "`python -m stoixlite.rec_ppo resume=<job dir>`",
                file=sys.stderr,
            )
            raise
        except Exception as err:  # the group's program or set-up: every job still training
            only = "".join(traceback.format_exception_only(type(err), err)).strip().splitlines()
            failure = (traceback.format_exc(), only[0] if only else type(err).__name__)
        for job, member in zip(jobs, members, strict=True):
            ret = returns[job.index]
            if member.error is not None:
                error = member.error
                text = f"{type(error).__name__}: {error}\n"
                ret.return_value = record_failure(job.run_dir, text)
            elif failure is not None and math.isnan(member.final):
                ret.return_value = record_failure(job.run_dir, *failure)
            else:
                ret.return_value = member.final
            ret.status = JobStatus.COMPLETED
            callbacks.on_job_end(config=job.sweep_config, job_return=ret)
        return returns

    def _start(self, job: Job) -> JobReturn:
        """What ``run_job`` does before a task runs: the job's directory, its ``.hydra/``
        files, the job's runtime config, the start callbacks; its :class:`JobReturn`."""
        assert self.hydra_context is not None
        config = job.sweep_config
        HydraConfig.instance().set_config(config)
        ret = JobReturn()
        task_cfg = copy.deepcopy(config)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        ret.cfg = task_cfg
        hydra_cfg = copy.deepcopy(HydraConfig.instance().cfg)
        assert isinstance(hydra_cfg, DictConfig)
        ret.hydra_cfg = hydra_cfg
        ret.overrides = list(OmegaConf.to_container(config.hydra.overrides.task))
        job.run_dir.mkdir(parents=True, exist_ok=True)
        ret.working_dir = os.getcwd()
        if config.hydra.output_subdir is not None:
            files = job.run_dir / str(config.hydra.output_subdir)
            files.mkdir(parents=True, exist_ok=True)
            for name, part in (
                ("config.yaml", task_cfg),
                ("hydra.yaml", hydra_cfg),
                ("overrides.yaml", config.hydra.overrides.task),
            ):
                (files / name).write_text(OmegaConf.to_yaml(part), encoding="utf-8")
        ret.task_name = JobRuntime.instance().get("name")
        self.hydra_context.callbacks.on_job_start(config=config, task_function=self.task_function)
        return ret


def _read(job: Job) -> str | None:
    """Read and plan ``job``'s config and find its program key; why it must run alone, if it
    must (a config that does not parse runs alone and fails there as it would in any sweep)."""
    from stoixlite.cli.configs import read_config
    from stoixlite.config.checks import wandb_dir_error
    from stoixlite.config.parse import parse_distributed
    from stoixlite.config.plan import plan_run
    from stoixlite.config.strict import ConfigError
    from stoixlite.envs.host import is_host_env
    from stoixlite.run.build import program_key
    from stoixlite.run.parts import make_raw_env

    task_cfg = copy.deepcopy(job.sweep_config)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    if OmegaConf.select(task_cfg, "resume", default=None) is not None:
        return "resume= continues one run in its own directory"
    try:
        if parse_distributed(task_cfg).enabled:
            return "distributed.enabled: a run over several processes"
        cfg = read_config(task_cfg, join_processes=False)
        if error := wandb_dir_error(cfg):
            raise ConfigError([error])
        plan = plan_run(cfg)
    except ConfigError as err:
        return f"its config is invalid ({str(err).splitlines()[0]})"
    if is_host_env(cfg.env.name):
        return f"env={cfg.env.name} is a host env (stepped outside the compiled program)"
    try:
        job.key = program_key(plan, make_raw_env(cfg))
    except Exception as err:  # the env's factory refused its arguments: fails alone
        return f"its env cannot be made ({type(err).__name__}: {err})"
    job.plan = plan
    return None


def _indices(jobs: list[Job]) -> str:
    return ",".join(str(job.index) for job in jobs)


def _split_lines(groups: list[list[Job]]) -> list[str]:
    """One line per program of a sweep split into several: its jobs and its values of the keys
    in which the programs differ (the first few)."""
    from stoixlite.ppo.types import HYPER_KEYS

    def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    traced = {f"system.{key}" for key in HYPER_KEYS} | {"arch.seed"}
    views = [flat(group[0].plan.config_dict) for group in groups]
    keys = sorted({k for view in views for k in view} - traced)
    differ = [k for k in keys if len({str(view.get(k)) for view in views}) > 1]
    lines = [f"the sweep needs {len(groups)} programs (they differ in {', '.join(differ[:4])})"]
    for number, (group, view) in enumerate(zip(groups, views, strict=True), 1):
        values = " ".join(f"{k}={view.get(k)}" for k in differ[:4])
        lines.append(f"program {number}: jobs {_indices(group)} ({values})")
    return lines
