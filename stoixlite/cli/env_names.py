"""Environments named the way their own library names them, with no config file per id:
``env=gymnasium/<id>`` (any registered Gymnasium id), ``env=gymnasium/<module>:<id>`` (the module
registers the id), ``env=gymnax/<id>`` (every gymnax env stoixlite registers).

``env=<family>/<id>`` is the file ``configs/env/<family>/<id>.yaml`` where one exists (its settings
were chosen for that env). Otherwise, for a family with defaults
(``configs/env_defaults/<family>.yaml``), the id is checked against the family's names
(:func:`family_ids`: Gymnasium's registry, the env registry) and a config of that name is stored
in Hydra's config store before Hydra composes: the family's defaults with ``env.name:
<family>/<id>``. Hydra then composes, sweeps (``-m env=gymnasium/Acrobot-v1,gymnax/Catch-bsuite``),
shows (``--cfg job``) and records (``hydra.runtime.choices.env``) it like any option; a
launcher's job processes get it with Hydra's own state. An option that names nothing is one line
with the closest names (:func:`env_option_error`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

ENV_DEFAULTS = "env_defaults"  # configs/env_defaults/<family>.yaml: a family's defaults
_CLOSEST = 5


def families_with_defaults(config_dir: Path) -> list[str]:
    """The env families whose ids need no file of their own (``configs/env_defaults/*.yaml``)."""
    return sorted(p.stem for p in (config_dir / ENV_DEFAULTS).glob("*.yaml"))


def env_files(config_dir: Path) -> list[str]:
    """The ``env=`` options that are files: ``configs/env/<family>/<name>.yaml``."""
    root = config_dir / "env"
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


class UnknownId(ValueError):
    """An id its family does not know; the message is the reason (one phrase)."""


def family_ids(family: str) -> list[str]:
    """The ids of ``family``: Gymnasium's registry for ``gymnasium`` (``UnknownId`` if it is not
    installed), the registered envs ``<family>/<id>`` otherwise."""
    if family == "gymnasium":
        if importlib.util.find_spec("gymnasium") is None:
            from stoixlite.envs.host import INSTALL_HINT

            raise UnknownId(f"host envs need gymnasium, which is not installed: {INSTALL_HINT}")
        import gymnasium

        return sorted(gymnasium.registry)
    from stoixlite.envs.registry import available_envs

    return [n.split("/", 1)[1] for n in available_envs() if n.split("/", 1)[0] == family]


def check_id(family: str, env_id: str) -> None:
    """Nothing if ``env_id`` is an id of ``family``; :class:`UnknownId` saying why not. A
    Gymnasium ``<module>:<id>`` imports the module first (it registers the id)."""
    from stoixlite.envs.registry import refusal

    if family == "gymnasium":
        module, _, bare = env_id.rpartition(":")
        if module:
            family_ids(family)  # gymnasium installed
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise UnknownId(f"cannot import {module} ({err})") from None
        if bare not in family_ids(family):
            raise UnknownId(
                f"{bare} is not a registered Gymnasium id (gymnasium/<module>:<id> imports the "
                "module that registers it)"
            )
        return
    reason = refusal(f"{family}/{env_id}")
    if reason is not None:
        raise UnknownId(f"not available: {reason}")
    if env_id not in family_ids(family):
        raise UnknownId(f"not an env of stoixlite's {family} family")


def _candidates(config_dir: Path) -> list[str]:
    """Every option a close name may be drawn from: the files, the ids of the families with
    defaults (Gymnasium's where it is installed)."""
    names = set(env_files(config_dir))
    for family in families_with_defaults(config_dir):
        try:
            names |= {f"{family}/{i}" for i in family_ids(family)}
        except UnknownId:
            continue
    return sorted(names)


def _close(name: str, names: list[str]) -> list[str]:
    """The ``names`` closest to ``name``, ignoring case: those holding it first, then difflib's."""
    lower = {n.lower(): n for n in names}
    key = name.lower()
    holding = [lower[n] for n in lower if key and key in n]
    near = difflib.get_close_matches(key, list(lower), n=_CLOSEST, cutoff=0.6)
    found = holding + [lower[n] for n in near if lower[n] not in holding]
    return found[:_CLOSEST]


def closest(option: str, candidates: list[str]) -> list[str]:
    """The options of ``candidates`` closest to ``option``: within its family (or the closest
    family's) the closest ids, then the same id in the other families; the closest whole
    options when ``option`` names no family."""
    by_family: dict[str, list[str]] = {}
    for candidate in candidates:
        family, _, env_id = candidate.partition("/")
        by_family.setdefault(family, []).append(env_id)
    family, _, env_id = option.partition("/")
    if not env_id:
        return _close(option, candidates)
    if family not in by_family:
        near = _close(family, list(by_family))
        if not near:
            return _close(option, candidates)
        family = near[0]
    found = [f"{family}/{i}" for i in _close(env_id, by_family[family])]
    same = [f"{f}/{i}" for f, ids in by_family.items() for i in ids if i.lower() == env_id.lower()]
    return (found + [o for o in same if o not in found])[:_CLOSEST]


def env_option_error(option: str, config_dir: Path) -> str | None:
    """``None`` if ``env=<option>`` selects an env (its file, or an id of a family with
    defaults); else one line naming why, with the closest names."""
    files = env_files(config_dir)
    if option in files:
        return None
    family, _, env_id = option.partition("/")
    with_defaults = families_with_defaults(config_dir)
    if family in with_defaults and env_id:
        try:
            check_id(family, env_id)
            return None
        except UnknownId as err:
            if str(err).startswith("not available"):  # refused: the reason is the answer
                return f"env={option} is invalid: {err}"
            why = str(err)
    else:
        why = "no such env"
    near = closest(option, _candidates(config_dir))
    line = f"env={option} is invalid: {why}"
    if near:
        return f"{line}; closest: {', '.join(near)}"
    known = sorted({f.split("/", 1)[0] for f in files} | set(with_defaults))
    if family in known and family not in with_defaults:
        return f"{line}; choose one of {[f for f in files if f.startswith(f'{family}/')]}"
    if family not in known:
        hint = ", ".join(f"{f}/<id>" if f in with_defaults else f"{f}/<name>" for f in known)
        return f"{line}; choose one of {hint}"
    return line


def env_option_values(argv: list[str]) -> Iterator[str]:
    """The options ``env=`` names in ``argv``: a value, a multirun's comma list or ``choice``
    (other sweeps, ``glob`` and ranges, are Hydra's to expand over the existing options)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-") or arg.split("=", 1)[0].lstrip("+") != "env":
            continue
        try:
            override = parser.parse_override(arg)
        except Exception:  # malformed: Hydra's composition reports it (cli/overrides)
            continue
        if override.is_sweep_override():
            if isinstance(override.value(), ChoiceSweep):
                yield from override.sweep_string_iterator()
            continue
        value = override.value()
        if isinstance(value, str):
            yield value


def add_env_options(argv: list[str], config_dir: Path) -> str | None:
    """Check every ``env=`` option of ``argv`` and store those of a family's ids without a file
    in Hydra's config store (see the module docstring); one line for the first that names
    nothing."""
    from hydra.core.config_store import ConfigStore

    files = set(env_files(config_dir))
    for option in env_option_values(argv):
        if option in files:
            continue
        if error := env_option_error(option, config_dir):
            return error
        group, _, name = f"env/{option}".rpartition("/")
        family = option.split("/", 1)[0]
        node = {"defaults": [f"/{ENV_DEFAULTS}/{family}", "_self_"], "env": {"name": option}}
        ConfigStore.instance().store(group=group, name=name, node=node, package="_global_")
    return None
