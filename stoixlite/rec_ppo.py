"""Recurrent PPO entry point: ``python -m stoixlite.rec_ppo [overrides]``.

Composes the Hydra config (:data:`CONFIG_DIR`: shipped inside the package by a wheel, the
repository's ``configs/`` otherwise, so it works from any working directory), parses it into the
typed :class:`~stoixlite.config.RunConfig` (every mistake one line on stderr, exit code 2,
before anything compiles), then runs the host loop of :mod:`stoixlite.run.loop`: compiled learn
chunks, evaluation between chunks, JSON-lines metrics, W&B (``logger=wandb``), checkpoints,
progress bar, learning-curve plot. Returns the final mean evaluation return (what Hydra
sweepers optimise).

``resume=<run dir>`` continues an interrupted run in its own directory from its latest intact
checkpoint, with the config saved there (command-line overrides given with ``resume`` are
applied on top; a different network or env config is refused). The run directory, its checkpoint
and the config match are checked before anything is compiled; a run that stopped before its
first checkpoint (nothing saved) is started afresh, by ``resume=`` or by the same command into
the same directory, with one line saying so. In a multirun (``-m``) a failing
job writes its traceback to ``<job dir>/error.txt``, returns NaN (a failed trial for Optuna) and
the sweep goes on (and ends non-zero, see :mod:`stoixlite.cli.sweep_callback`).

Every way a run can end badly is one line on stderr and a non-zero exit: a config error (2); a
non-finite loss or parameter, no intact checkpoint or an unwritable output (1); SIGINT/SIGTERM
(128 + signal; the line is the exact ``resume=`` command); Ctrl-C before training started, e.g.
while compiling (130; SIGTERM there: 143; ending the process without interpreter teardown: see
:class:`Abandoned`).
A run refused before it started removes the ``.hydra/`` files and empty log Hydra created for it.

Ctrl-C (and SIGTERM, the same way) is honoured at any moment from the process's start: it is held
(:func:`stoixlite.run.signals.hold_ctrl_c`) before Hydra or JAX is imported, raises at once only
while the run is built, compiled and trained (:func:`~stoixlite.run.signals.ctrl_c_raises`), and
is checked between the steps before and after; one that Python dropped (raised in a garbage
collector callback) still stops the run before its loop starts.
"""

from __future__ import annotations

from stoixlite.run.signals import hold_ctrl_c

if __name__ == "__main__":  # before anything slow is imported: Ctrl-C is held from the start
    hold_ctrl_c()

import shutil
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from stoixlite.cli.configs import CONFIG_DIR, read_config, sweep_name
from stoixlite.cli.sweep_callback import record_failure
from stoixlite.config.parse import parse_distributed
from stoixlite.config.strict import ConfigError
from stoixlite.run.signals import (
    ctrl_c_pending,
    ctrl_c_raises,
    exit_now,
    interrupted_exit_code,
    raise_if_ctrl_c,
    release_ctrl_c,
)


def train(cfg: DictConfig, run_dir: Path, resume: bool = False) -> float:
    """Train one agent as composed, writing outputs to ``run_dir``; returns the final eval
    return: the config read once (:func:`~stoixlite.cli.configs.read_config`), the run planned
    once (:func:`~stoixlite.config.plan.plan_run`), then :func:`stoixlite.run.loop.train`."""
    from stoixlite.config.plan import plan_run
    from stoixlite.run.loop import train as run

    return run(plan_run(read_config(cfg)), run_dir, resume=resume)


def _interrupted_line(run_dir: Path) -> str:
    """One line for a KeyboardInterrupt outside the training loop (e.g. during compilation)."""
    from stoixlite.tracking.checkpointing import checkpoint_dir

    ckpts = checkpoint_dir(run_dir)
    if ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir()):
        return (
            f"interrupted before the next checkpoint; resume with "
            f"`python -m stoixlite.rec_ppo resume={run_dir}`"
        )
    return (
        f"interrupted before the first checkpoint: nothing was saved in {run_dir}; the same "
        "command (or resume=) starts it afresh"
    )


class Abandoned(SystemExit):
    """Ctrl-C outside the training loop (building or compiling, or a second Ctrl-C): exit 130
    (143 for a SIGTERM, which the entry point holds the same way).

    XLA's compiler can be interrupted midway (it checks for signals); the interpreter's teardown
    then crashes in native destructors (a segmentation fault, exit 139, after the one line). The
    command line therefore ends such a process with :func:`~stoixlite.run.signals.exit_now`,
    skipping the teardown; in-process callers (tests, the API) get this ``SystemExit`` as
    usual."""


def _abandon(run_dir: Path, output_dir: Path) -> NoReturn:
    """Ctrl-C before or outside the training loop: the one line, what Hydra created for a run
    that never started removed (:func:`_remove_litter`), exit 128 + the signal."""
    hold_ctrl_c()  # a second Ctrl-C while this ends is recorded only
    print(_interrupted_line(run_dir), file=sys.stderr)
    _remove_litter(output_dir)
    raise Abandoned(interrupted_exit_code()) from None


@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    from stoixlite.cli.process import setup_process
    from stoixlite.cli.resume import resume_config
    from stoixlite.config.checks import wandb_dir_error
    from stoixlite.config.plan import plan_run
    from stoixlite.envs.host.sources import HostEnvError
    from stoixlite.run.distributed import DistributedError
    from stoixlite.run.divergence import NonFiniteError
    from stoixlite.run.loop import train as run
    from stoixlite.run.peers import end_if_peer_lost, several_processes, watch_run
    from stoixlite.run.resume import check_resumable
    from stoixlite.run.run_dir import RunDirInUseError, stopped_before_first_checkpoint
    from stoixlite.run.signals import TrainingInterrupted
    from stoixlite.tracking.checkpointing import CheckpointCorruptError, CheckpointMismatchError

    setup_process()
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        raise_if_ctrl_c()
        resume = OmegaConf.select(cfg, "resume", default=None)
        if resume is not None and not str(resume).strip():
            raise ConfigError(["resume='' is invalid: give a run directory (resume=<run dir>)"])
        if resume:
            run_dir = Path(str(resume)).expanduser().resolve()
            cfg = resume_config(cfg, run_dir, list(hydra_cfg.overrides.task))
        _supervise_processes(cfg)
        run_cfg = read_config(cfg)  # the config, read once
        if error := wandb_dir_error(run_cfg):
            raise ConfigError([error])
        plan = plan_run(run_cfg)  # the run, planned once: everything below receives the plan
        # A run that stopped before its first checkpoint has nothing to resume: started afresh.
        if resume and stopped_before_first_checkpoint(run_dir):
            resume = None
        if resume:
            check_resumable(plan.fingerprint, run_dir)
        watch_run(run_dir)  # a lost process of several: the line names its newest checkpoint
        with ctrl_c_raises():  # stops XLA's compiler midway
            final = run(plan, run_dir, resume=bool(resume), sweep=sweep_name())
        raise_if_ctrl_c()
        return final
    except (
        ConfigError,
        CheckpointMismatchError,
        DistributedError,
        FileNotFoundError,
        NonFiniteError,
        CheckpointCorruptError,
        RunDirInUseError,
        HostEnvError,
    ) as err:
        if ctrl_c_pending():  # e.g. SIGTERM to the process group ended a host env's workers
            _abandon(run_dir, Path(hydra_cfg.runtime.output_dir))
        if multirun:
            return record_failure(run_dir, f"{type(err).__name__}: {err}\n")
        kind = "config error" if isinstance(err, ConfigError) else "error"
        for line in str(err).splitlines():
            print(f"{kind}: {line}", file=sys.stderr)
        _remove_litter(Path(hydra_cfg.runtime.output_dir))
        # (every process of several meets these together, and they end together)
        sys.exit(
            1 if isinstance(err, (NonFiniteError, CheckpointCorruptError, HostEnvError)) else 2
        )
    except OSError as err:  # a full disk, an unwritable output directory
        if ctrl_c_pending():  # what an interrupted write or import raised
            _abandon(run_dir, Path(hydra_cfg.runtime.output_dir))
        if multirun:
            return record_failure(run_dir, f"{type(err).__name__}: {err}\n")
        from stoixlite.tracking.checkpointing import CheckpointWriteError

        what = "" if isinstance(err, CheckpointWriteError) else "cannot write the run's outputs: "
        print(f"error: {what}{err}", file=sys.stderr)
        _exit(1)
    except TrainingInterrupted as stop:
        print(str(stop), file=sys.stderr)
        raise
    except KeyboardInterrupt:
        _abandon(run_dir, Path(hydra_cfg.runtime.output_dir))
    except Exception as err:
        if ctrl_c_pending():  # e.g. an extension module's import, interrupted
            _abandon(run_dir, Path(hydra_cfg.runtime.output_dir))
        end_if_peer_lost(err)  # several processes, one lost: the line, and the process ends
        if several_processes():  # this process alone failed: the others notice it gone
            if multirun:
                record_failure(run_dir, traceback.format_exc())
            else:
                traceback.print_exc()
            _exit(1)
        if not multirun:
            raise
        # the exception's own first line, not what a library appended to the traceback
        only = "".join(traceback.format_exception_only(type(err), err)).strip().splitlines()
        return record_failure(run_dir, traceback.format_exc(), only[0] if only else None)


def _supervise_processes(cfg: DictConfig) -> None:
    """A process of a multi-process run is supervised from here on (before JAX starts), so that
    JAX's abort when another process is lost becomes one line (:mod:`stoixlite.run.supervisor`)."""
    from stoixlite.run.supervisor import supervise

    try:
        enabled = parse_distributed(cfg).enabled
    except ConfigError:  # reported when the config is read
        return
    if enabled:
        supervise()


def _exit(code: int) -> NoReturn:
    """End a run that failed in this process alone with ``code``: ``sys.exit``; one process of
    several ends at once (JAX's teardown would wait for the others at a shutdown barrier, and
    then abort; its supervisor drops what JAX says meanwhile)."""
    from stoixlite.run.peers import ending, several_processes

    if several_processes():
        ending(code)
        exit_now(code)
    sys.exit(code)


# What existed before Hydra created this run's directory (set by :func:`cli` for a single run):
# a run refused with a config error removes what it created there, and nothing else.
_EXISTED: set[Path] | None = None


def _existing_paths(argv: list[str]) -> set[Path] | None:
    """The paths, among those Hydra may create for this single run, that exist now: the run
    directory named by ``hydra.run.dir`` (or the default ``outputs/<date>/<time>...`` tree, two
    levels deep), its parents, and its ``.hydra/`` and log files. ``None`` for a multirun."""
    from stoixlite.cli.overrides import MULTIRUN_FLAGS

    if any(arg in MULTIRUN_FLAGS for arg in argv):
        return None
    given = [a.split("=", 1)[1] for a in argv if a.split("=", 1)[0] == "hydra.run.dir"]
    if given and "${" not in given[-1]:
        runs = [Path(given[-1].strip("'\"")).expanduser().resolve()]
        root = runs[0]
    else:  # the default: outputs/<date>/<time>_<env>_<network> (see configs/config.yaml)
        root = Path("outputs").resolve()
        dates = [d for d in root.iterdir() if d.is_dir()] if root.is_dir() else []
        runs = [r for d in dates for r in d.iterdir() if r.is_dir()]
    existed = {q for q in (root, *root.parents) if q.exists()}
    for run in (r for r in runs if r.is_dir()):
        existed |= {run, run.parent, run / ".hydra", *run.glob("*.log")}
    return {q for q in existed if q.exists()}


def _remove_litter(run_dir: Path) -> None:
    """Remove what Hydra created for a run that failed before it started (a config error, a
    resume with no intact checkpoint): its ``.hydra/``, an empty log, and the directories it
    created that are left empty; nothing that existed before, nor anything of a run that
    started (its outputs are there: ``.hydra/`` stays with them)."""
    from stoixlite.run.run_dir import held_outputs

    if _EXISTED is None or held_outputs(run_dir):
        return
    run_dir = run_dir.resolve()
    hydra_dir = run_dir / ".hydra"
    if hydra_dir.is_dir() and hydra_dir not in _EXISTED:
        shutil.rmtree(hydra_dir, ignore_errors=True)
    # Other processes of a multi-process run may be cleaning the same directory at the same
    # moment: a file or directory that vanished, or filled, in between is theirs to handle.
    try:
        log_files = list(run_dir.glob("*.log"))
    except FileNotFoundError:  # the whole directory is gone (or never was)
        log_files = []
    for log_file in log_files:
        try:
            if log_file not in _EXISTED and log_file.stat().st_size == 0:
                log_file.unlink(missing_ok=True)
        except FileNotFoundError:
            continue
    for directory in (run_dir, *run_dir.parents):
        try:
            if directory in _EXISTED:
                break
            if not directory.exists():  # removed by another process: on to its parent
                continue
            if not directory.is_dir() or any(directory.iterdir()):
                break
            directory.rmdir()
        except OSError:  # removed by another process, or no longer empty
            break


def _output_dir_error(argv: list[str]) -> str | None:
    """One line when ``hydra.run.dir`` or ``hydra.sweep.dir`` names a directory that cannot be
    created (Hydra would fail with a traceback before the run starts)."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and value and "${" not in value:
            path = Path(value).expanduser().absolute()
            created = [q for q in (path, *path.parents) if not q.exists()]
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                return f"{key}={value} is invalid: cannot create it ({err.strerror or err})"
            for directory in created:  # Hydra creates it when the run starts, not before
                try:
                    directory.rmdir()
                except OSError:  # filled in between (another process): not ours to remove
                    break
    return None


def _value_error(cfg: DictConfig | None) -> str | None:
    """The config's invalid values (:func:`~stoixlite.cli.configs.read_config`'s lines),
    checked on the config composed before Hydra starts, so that a refused value costs no second
    composition and no run directory. ``None`` also where :func:`main` checks it instead: no
    composed config (a multirun, Hydra flags), ``resume=`` (the run directory's config is the one
    used) and multi-process runs (their processes join before JAX starts, which reading the
    config may do)."""
    from stoixlite.config.checks import wandb_dir_error

    if cfg is None or OmegaConf.select(cfg, "resume", default=None) is not None:
        return None
    try:
        if parse_distributed(cfg).enabled:
            return None
        run_cfg = read_config(cfg, join_processes=False)
    except ConfigError as err:
        return str(err)
    return wandb_dir_error(run_cfg)


def cli(argv: list[str] | None = None) -> None:
    """The command line: overrides checked first (one line, exit 2, :mod:`stoixlite.cli.overrides`),
    then :func:`main` under Hydra."""
    from stoixlite.cli.overrides import (
        composed_or_error,
        flags_first,
        plain_overrides,
        resume_in_place,
    )

    global _EXISTED
    # Ctrl-C means stop, also where the process was started with SIGINT ignored (a background
    # job of a script, some test harnesses): compiling is interrupted, training saves and stops.
    previous = hold_ctrl_c()
    try:
        argv = plain_overrides(sys.argv[1:] if argv is None else argv, CONFIG_DIR)
        cfg, error = composed_or_error(argv, CONFIG_DIR)
        _EXISTED = _existing_paths([*argv, *resume_in_place(argv)]) if error is None else None
        error = error or _output_dir_error(argv) or _value_error(cfg)
        if ctrl_c_pending():
            print("interrupted before the run started: nothing was written", file=sys.stderr)
            raise Abandoned(interrupted_exit_code())
        if error is not None:
            for line in error.splitlines():
                print(f"config error: {line}", file=sys.stderr)
            sys.exit(2)
        sys.argv = [sys.argv[0], *flags_first([*argv, *resume_in_place(argv)])]
        main()
        if ctrl_c_pending():  # after the run's own end (Hydra's closing steps)
            print("interrupted after the run ended", file=sys.stderr)
            raise Abandoned(interrupted_exit_code())
    finally:
        release_ctrl_c(previous)


if __name__ == "__main__":
    try:
        cli()
    except Abandoned as stop:  # no interpreter teardown after an interrupted compile
        exit_now(int(stop.code))
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's line was written
        exit_now(interrupted_exit_code())
