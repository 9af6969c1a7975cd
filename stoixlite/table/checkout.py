"""Where the table runner works: the source checkout it runs from (if any), its git state, and
how paths and commands below the checkout are shown.

In a source checkout (``pyproject.toml`` and the committed records ``results/popgym_table/``
beside the ``stoixlite`` package) the runner's places default to the checkout's: records in
``results/popgym_table/``, run directories in ``outputs/popgym_table/``, the docs pages in
``docs/``. An installed package (``pip install .``, a wheel) has no checkout: every place must
be named (``--records``, ``--out``), and records name the package's version instead of a commit.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

COMMITTED_RECORDS = Path("results") / "popgym_table"  # below the checkout


PACKAGE = Path(__file__).resolve().parents[1]  # the stoixlite directory


def find_checkout(package: Path = PACKAGE) -> Path | None:
    """The source checkout that holds ``package`` (the ``stoixlite`` directory): its parent when
    that has ``pyproject.toml`` and the committed records; ``None`` for an installed package."""
    root = package.parent
    if (root / "pyproject.toml").is_file() and (root / COMMITTED_RECORDS).is_dir():
        return root
    return None


CHECKOUT = find_checkout()


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def package_version() -> str:
    """``stoixlite <version>`` of the installed distribution (``stoixlite unknown`` without)."""
    try:
        return f"stoixlite {metadata.version('stoixlite')}"
    except metadata.PackageNotFoundError:
        return "stoixlite unknown"


def git_state(root: Path | None) -> tuple[str, str]:
    """``(commit, tree)`` of the checkout ``root``: its short commit and ``"clean"``, or
    ``"changes <sha256 of git diff HEAD, 12 hex>"`` when tracked files have uncommitted changes.
    Without a checkout (``None``): the package's version (:func:`package_version`) and
    ``"installed"``."""
    if root is None:
        return package_version(), "installed"
    commit = _git(root, "rev-parse", "--short", "HEAD").strip() or "unknown"
    if not _git(root, "status", "--porcelain", "--untracked-files=no").strip():
        return commit, "clean"
    digest = hashlib.sha256(_git(root, "diff", "HEAD").encode()).hexdigest()[:12]
    return commit, f"changes {digest}"


def relative(path: Path, root: Path | None) -> str:
    """``path`` relative to the checkout ``root`` where it lies below it, else as given."""
    if root is None:
        return str(path)
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def portable(cmd: list[str], root: Path | None) -> str:
    """A command as a user types it: ``python`` for the interpreter, paths below the checkout
    ``root`` relative to it."""
    text = shlex.join(["python", *cmd[1:]])
    return text.replace(f"{root}/", "") if root is not None else text
