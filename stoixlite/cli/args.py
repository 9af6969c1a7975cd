"""Command-line helpers shared by the scripts (``scripts/*.py``) and ``python -m
stoixlite.evaluate``, so that every bad input they are given is refused the same way: one line on
stderr naming the option or value and what is allowed, exit status 2, before anything expensive
(compiling, training) runs, and nothing already written lost.

* :class:`OneLineArgumentParser`: an ``argparse.ArgumentParser`` whose errors are the single line
  ``<prog>: error: <message> (see --help)`` instead of argparse's usage block (``--help`` is
  unchanged). Every check a script makes after parsing goes through ``parser.error`` too.
* :func:`output_file_error` / :func:`output_dir_error`: an output path (``--out``) checked before
  the work whose results it would hold, not after.
* :func:`checked_run_config`: composes and reads a run config from Hydra overrides the way
  ``python -m stoixlite.rec_ppo`` does (:mod:`stoixlite.cli.overrides`, then
  :func:`stoixlite.cli.configs.read_config`), every mistake as one line.
* :func:`last_error_line`: the line of a failed subprocess's stderr that says what went wrong
  (the exception, not JAX's note on its filtered traceback).
* :func:`compile_for_real`: the benchmark and profiling scripts' processes compile every program
  (no JAX persistent compilation cache, which a user's ``JAX_COMPILATION_CACHE_DIR`` would
  otherwise turn on), so that the compile seconds they report are compilations, not cache loads.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from stoixlite.config.schema import RunConfig

BAD_INPUT = 2  # exit status of a refused argument or config


def one_line(message: str) -> str:
    """``message``'s non-empty lines joined with ``"; "``."""
    return "; ".join(line.strip() for line in str(message).splitlines() if line.strip())


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr,
    ``<prog>: error: <message> (see --help)``, with exit status 2 (argparse prints its usage
    block first). ``--help`` prints the usual help."""

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {one_line(message)} (see --help)\n")


def output_file_error(path: str | Path, option: str = "--out") -> str | None:
    """Why results cannot be written to file ``path`` (``None`` when they can), found before
    they are computed: its directory must exist and the file must open for writing. An existing
    file is opened for appending only (its content is kept until the results replace it); a file
    this check creates is removed again."""
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        return f"{option} {path} is a directory: give a file name"
    if not parent.exists():
        return f"{option} {path}: directory {parent} does not exist"
    if not parent.is_dir():
        return f"{option} {path}: {parent} is not a directory"
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as err:
        return f"{option} {path} cannot be written: {err.strerror or err}"
    if not existed:
        path.unlink(missing_ok=True)
    return None


def output_dir_error(path: str | Path, option: str = "--out") -> str | None:
    """Why results cannot be written into directory ``path`` (``None`` when they can); creates
    it (and its parents) when it does not exist yet."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return f"{option} {path} is an existing file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{id(path)}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        return f"{option} {path} cannot be written: {err.strerror or err}"
    return None


def checked_run_config(overrides: Sequence[str]) -> tuple[RunConfig | None, str | None]:
    """``(config, None)`` for Hydra ``overrides`` of ``configs/config.yaml`` that make a valid
    run config, else ``(None, one line)``: an unknown group option, key or malformed override
    (:func:`stoixlite.cli.overrides.composed_or_error`, as ``python -m stoixlite.rec_ppo`` reports
    them) or an invalid value (:class:`~stoixlite.config.ConfigError`, every mistake)."""
    from stoixlite.cli.configs import CONFIG_DIR, read_config
    from stoixlite.cli.overrides import MULTIRUN_FLAGS, composed_or_error
    from stoixlite.config.strict import ConfigError

    overrides = list(overrides)
    flags = [arg for arg in overrides if arg.startswith("-")]
    if flags:
        multirun = " (a multirun)" if set(flags) & set(MULTIRUN_FLAGS) else ""
        return None, f"{flags[0]} is invalid here{multirun}: give key=value overrides only"
    cfg, error = composed_or_error(overrides, CONFIG_DIR)
    if error is not None:
        return None, error
    try:
        return read_config(cfg, join_processes=False), None
    except ConfigError as err:
        return None, one_line(str(err))


# JAX's notes around an exception whose traceback it filtered, and the separators of chained
# tracebacks: never what went wrong.
_NOISE = (
    "For simplicity, JAX has removed its internal frames",
    "Set JAX_TRACEBACK_FILTERING",
    "The above exception was the direct cause",
    "During handling of the above exception",
    "jax.errors.SimplifiedTraceback",
    "---",
)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")


def last_error_line(stderr: str, default: str = "failed (no error message)") -> str:
    """The line of a failed process's ``stderr`` that says what went wrong: the last exception
    line (``SomeError: message``), else the last line that is not JAX's traceback note."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(_NOISE)]
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line
    return lines[-1] if lines else default


def compile_for_real() -> None:
    """Turn JAX's persistent compilation cache off in this process (call it before the first
    compile): a timed compile must compile, not load a cached executable."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


def fail(message: str, status: int = BAD_INPUT, prog: str | None = None) -> NoReturn:
    """Print ``<prog>: error: <message>`` (one line) on stderr and exit with ``status``."""
    prog = prog or Path(sys.argv[0]).name
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(status)
