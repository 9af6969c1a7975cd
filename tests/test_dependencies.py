"""pyproject.toml declares what the code imports and nothing else, and constraints.txt pins it.

Imports are read with ``ast`` from every file under stoixlite/, scripts/ and tests/ (nested and
lazy imports included) and mapped to their distributions with
``importlib.metadata.packages_distributions``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Declared but never imported by name, each for a reason:
NOT_IMPORTED = {
    "six": "gymnax imports it without declaring it",
    "mazelib": "tests/test_popgym_labyrinth.py patches it by name (mock.patch strings)",
    "hydra-joblib-launcher": "a Hydra plugin, found by Hydra (tests/test_launchers.py)",
    "hydra-submitit-launcher": "a Hydra plugin, found by Hydra (tests/test_launchers.py)",
    "hydra-optuna-sweeper": "a Hydra plugin (hydra/sweeper=ppo_optuna)",
    "pytest-xdist": "a pytest plugin (-n 2 in pyproject's addopts)",
    "ruff": "a command-line tool",
    "dm-pix": "popgym-arcade imports it (popgym-arcade goes in with --no-deps, docs/envs.md)",
    "jaxtyping": "popgym-arcade imports it (likewise)",
    "chex": "popgym-arcade imports it (likewise)",
    "sb3-contrib": "the benchmark's sb3 worker imports it by importlib, in its own Python",
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return norm(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))


def declared(extras: tuple[str, ...] = ()) -> set[str]:
    """Distributions of the core dependencies and the given extras (self-references expanded)."""
    names = {requirement_name(r) for r in PROJECT["dependencies"]}
    for extra in extras:
        for r in PROJECT["optional-dependencies"][extra]:
            if requirement_name(r) == "stoixlite":
                inner = re.search(r"\[(.*)\]", r).group(1).split(",")
                names |= declared(tuple(e.strip() for e in inner))
            else:
                names.add(requirement_name(r))
    return names


def imported_distributions(*folders: str) -> set[str]:
    """The distributions whose top-level modules the files under ``folders`` import."""
    local = {p.stem for f in ("scripts", "tests") for p in (ROOT / f).glob("*.py")}
    modules: set[str] = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    third_party = modules - set(sys.stdlib_module_names) - local - {"stoixlite", "__future__"}
    owners = metadata.packages_distributions()
    missing = sorted(m for m in third_party if m not in owners)
    assert not missing, f"imported but not installed: {missing}"
    return {norm(d) for m in third_party for d in owners[m]}


def test_the_package_imports_only_core_dependencies():
    # popgym and gymnasium are imported lazily, by the reference feature of the `reference` extra;
    # craftax lazily, by the craftax/* envs of the `craftax` extra
    optional = {"popgym", "gymnasium", "craftax"}
    assert imported_distributions("stoixlite") - declared() <= optional
    assert {"popgym", "gymnasium"} <= declared(("reference",))
    assert {"craftax"} <= declared(("craftax",))


def test_scripts_and_tests_import_only_declared_dependencies():
    undeclared = imported_distributions("stoixlite", "scripts", "tests") - declared(("dev",))
    assert not undeclared, f"imported but not declared: {sorted(undeclared)}"


def test_every_declared_dependency_is_used():
    extras = tuple(e for e in PROJECT["optional-dependencies"] if not e.startswith("cuda"))
    used = imported_distributions("stoixlite", "scripts", "tests") | set(NOT_IMPORTED)
    unused = declared(extras) - used - {"jax"}  # jax: imported (also the cuda extras' name)
    assert not unused, f"declared but never imported: {sorted(unused)}"


def test_constraints_pin_every_dev_dependency_exactly():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[norm(name)] = version
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", v) for v in pins.values()), pins
    assert declared(("dev",)) <= set(pins), sorted(declared(("dev",)) - set(pins))
