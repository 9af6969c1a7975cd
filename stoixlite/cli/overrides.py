"""Command-line overrides checked before Hydra runs, so that a mistake is one line.

Hydra reports an unknown group option (``env=popgym/nope``), an unknown key (``system.lrr=1``)
or a malformed override (``arch.num_envs``) in several lines, some without the list of choices.
:func:`composed_or_error` finds these first and returns one line naming the override and what is
allowed; :mod:`stoixlite.rec_ppo` prints it and exits with status 2 before anything is built.

* Group options (also in a multirun's comma lists): the option must be a ``.yaml`` file of the
  group under ``configs/``; the line lists every available option. ``env=`` also takes the ids of
  a family with defaults (``env=gymnasium/<id>``, ``env=gymnax/<id>``), which
  :mod:`stoixlite.cli.env_names` checks and adds to Hydra's options (a wrong one: the closest
  names).
* ``env.kwargs.<key>=<value>`` needs no ``+``, a group of the defaults list takes one
  (``+preset=gpu``): :func:`plain_overrides`.
* Everything else (single runs only; a multirun's sweep syntax is Hydra's to expand): the
  overrides are composed once with Hydra's compose API and its error is cut to one line;
  :func:`composed_or_error` also returns that composed config, so that a script checks and
  composes in one go.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from stoixlite.cli.env_names import add_env_options
from stoixlite.config.parse import resolved
from stoixlite.config.strict import ConfigError, unknown_key_hint
from stoixlite.run.run_dir import held_outputs, run_dir_in_use, stopped_before_first_checkpoint
from stoixlite.tracking.files import CONFIG_FILE

MULTIRUN_FLAGS = ("-m", "--multirun")
_SWEEP_SYNTAX = ("(", "[", "${")
_MISSING_KEY = re.compile(r"Could not override '([^']+)'")


def group_options(config_dir: Path, group: str) -> list[str]:
    """Options of a config group: ``.yaml`` files under ``config_dir/group``, without suffix."""
    root = config_dir / group
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def group_option_error(argv: list[str], config_dir: Path) -> str | None:
    """One line for the first ``group=option`` naming an option the group does not have."""
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        group = key.lstrip("+~")
        if "." in group or group.startswith("hydra") or not (config_dir / group).is_dir():
            continue
        if group == "env":  # also the ids of env families: stoixlite.cli.env_names
            continue
        if any(token in value for token in _SWEEP_SYNTAX):
            continue
        choices = group_options(config_dir, group)
        for option in value.split(","):
            if option not in choices:
                return f"{group}={option} is invalid: choose one of {choices}"
    return None


_ENV_KWARG = re.compile(r"\+{0,2}env\.kwargs\.[^=]+=")


def default_groups(config_dir: Path, config_name: str = "config") -> set[str]:
    """The config groups of the primary config's defaults list (``preset``, ``network``, ...)."""
    path = config_dir / f"{config_name}.yaml"
    loaded = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}
    defaults = loaded.get("defaults", [])
    groups = set()
    for entry in defaults:
        if isinstance(entry, dict):
            for key in entry:
                groups.add(str(key).split()[-1])  # "optional env_network", "override hydra/..."
    return groups


def plain_overrides(argv: list[str], config_dir: Path) -> list[str]:
    """``argv`` as Hydra takes it, without the ``+`` rules a user cannot know:

    * ``env.kwargs.<key>=<value>`` (with or without ``+``) becomes
      ``++env.kwargs.<key>=<value>``: Hydra sets a key the composed config lacks only with ``+``
      and refuses ``+`` for one it has (``configs/env/arcade/*.yaml`` set some); ``++`` sets it
      either way. The env's factory checks the keys and values
      (:func:`stoixlite.config.checks.check_env`).
    * ``+<group>=<option>`` for a group of the defaults list (``+preset=gpu``) becomes
      ``<group>=<option>`` (Hydra refuses to add a group that is already there).
    """
    groups = default_groups(config_dir)
    plain = []
    for arg in argv:
        key = arg.split("=", 1)[0]
        if _ENV_KWARG.match(arg):
            arg = f"++{arg.lstrip('+')}"
        elif "=" in arg and key.startswith("+") and key.lstrip("+") in groups:
            arg = arg.lstrip("+")
        plain.append(arg)
    return plain


def _one_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Set the environment variable")]
    return "; ".join(lines[:2]) if lines else "invalid command-line override"


# Hydra plugins a config group option needs, and the extra that installs each.
_PLUGIN_EXTRAS = {"optuna": "optuna", "joblib": "cluster", "submitit_local": "cluster"}
_PLUGIN_EXTRAS["submitit_slurm"] = "cluster"
_NOT_LOADED = re.compile(r"Could not load 'hydra/(\w+)/(\w+)'")


def _hydra_error_line(err: BaseException) -> str:
    """One line of a Hydra composition error: with the options Hydra lists one per line, the
    reason of a merge error (its cause), and the install of a plugin that is missing."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("Available options in"):
            options = []
            for option in lines[i + 1 :]:
                if option.startswith("Config search path"):
                    break
                options.append(option)
            return f"{lines[0]}; {line} {', '.join(options)}"
    plugin = _NOT_LOADED.search(str(err))
    if plugin and plugin.group(2) in _PLUGIN_EXTRAS:
        extra = _PLUGIN_EXTRAS[plugin.group(2)]
        return (
            f"{lines[0]} (Hydra's {plugin.group(2)} {plugin.group(1)} plugin is not installed: "
            f"pip install 'stoixlite[{extra}]')"
        )
    cause = err.__cause__
    if lines and lines[0].startswith("Error merging override") and cause is not None:
        reason = [line.strip() for line in str(cause).splitlines() if line.strip()]
        if reason:
            return f"{lines[0]}: {reason[0]}"
    return _one_line(str(err))


def _composed(
    argv: list[str], config_dir: Path, config_name: str = "config"
) -> tuple[DictConfig | None, str | None]:
    """``(config, None)`` with ``argv`` composed by Hydra, ``(None, one line)`` for an override
    it cannot apply, ``(None, None)`` where composing is Hydra's business (multirun, flags)."""
    if any(arg in MULTIRUN_FLAGS for arg in argv):
        return None, None
    overrides = [arg for arg in argv if not arg.startswith("-")]
    if len(overrides) != len(argv):  # other Hydra flags (--cfg, --help, ...): Hydra's business
        return None, None
    try:
        return _compose(config_dir, config_name, overrides), None
    except Exception as err:  # Hydra's override, composition and parse errors
        missing = _MISSING_KEY.search(str(err))
        if missing:
            return None, _missing_key_error(missing.group(1), overrides, config_dir, config_name)
        return None, _hydra_error_line(err)


def _compose(config_dir: Path, config_name: str, overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(config_dir), version_base=None):
            return compose(config_name, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _missing_key_error(path: str, overrides: list[str], config_dir: Path, config_name: str) -> str:
    """``key=value is invalid: unknown key (...)`` for an override of a key the composed config
    does not have (the same line the typed parse gives for ``+key=value``). The hint is given at
    the first component of ``path`` that is missing: the nearest key there (``Arch.seed``: did you
    mean ``arch.seed``?), or the group option that adds it (``logger.wandb.mode``: choose
    ``logger=wandb``), or that level's valid keys."""
    (own,) = [o for o in overrides if o.split("=", 1)[0] == path] or [f"{path}="]
    rest = [o for o in overrides if o != own]
    value = own.split("=", 1)[1]
    try:
        node: object = _compose(config_dir, config_name, rest)
    except Exception:  # another override is broken too: it is reported once this one is fixed
        return f"{own} is invalid: unknown key"
    parts = path.split(".")
    if len(parts) == 1 and (config_dir / path).is_dir():  # a group not in the defaults
        return (
            f"{path}={value!r} is invalid: {path} is a config group not in the defaults; add it "
            f"with +{path}={value} (choose one of {group_options(config_dir, path)})"
        )
    for depth, key in enumerate(parts):
        if not isinstance(node, DictConfig):
            break
        if key in node and depth < len(parts) - 1:
            node = node[key]
            continue
        prefix = "".join(f"{p}." for p in parts[:depth])
        if depth >= 1 and key in group_options(config_dir, parts[0]):
            hint = f"unknown key ({prefix}{key} is set by choosing {parts[0]}={key})"
            return f"{path}={value!r} is invalid: {hint}"
        suffix = "".join(f".{p}" for p in parts[depth + 1 :])
        hint = unknown_key_hint(prefix, key, [str(k) for k in node], suffix)
        return f"{path}={value!r} is invalid: {hint}"
    return f"{own} is invalid: unknown key"


def _single_run_values(argv: list[str]) -> dict[str, str] | None:
    """``{key: value}`` of the ``key=value`` arguments of a single run; ``None`` for a
    multirun."""
    if any(arg in MULTIRUN_FLAGS for arg in argv):
        return None
    return dict(arg.split("=", 1) for arg in argv if "=" in arg and not arg.startswith("-"))


def run_dir_error(argv: list[str]) -> str | None:
    """One line when a new single run names (``hydra.run.dir=``) a directory holding a run:
    caught before Hydra writes its ``.hydra/`` files there (the training loop checks again)."""
    values = _single_run_values(argv)
    if values is None or values.get("resume", "null") not in ("", "null"):
        return None
    if "hydra.run.dir" not in values:
        return None
    run_dir = Path(values["hydra.run.dir"]).expanduser()
    held = held_outputs(run_dir)
    if not held or stopped_before_first_checkpoint(run_dir):  # the run starts it afresh
        return None
    return run_dir_in_use(run_dir, held)


def resume_in_place(argv: list[str]) -> list[str]:
    """Hydra overrides that make a single ``resume=<run dir>`` run log into that directory
    (its ``rec_ppo.log`` appended to) instead of creating a new, otherwise empty output
    directory, and leave the run's ``.hydra/`` as its first start wrote it. None for a multirun,
    an explicit ``hydra.run.dir`` or a directory that does not exist (which the run refuses)."""
    values = _single_run_values(argv)
    if values is None or "hydra.run.dir" in values or values.get("resume", "") in ("", "null"):
        return []
    run_dir = Path(values["resume"]).expanduser()
    if not run_dir.is_dir():
        return []
    return [f"hydra.run.dir={_quoted(str(run_dir.resolve()))}", "hydra.output_subdir=null"]


def _quoted(value: str) -> str:
    """``value`` as a Hydra override value (quoted if it holds characters Hydra parses)."""
    if all(c.isalnum() or c in "/._-~" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Hydra's command-line flags (``python -m stoixlite.rec_ppo --help`` lists them).
HYDRA_FLAGS = (
    *MULTIRUN_FLAGS,
    *("-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-p", "--package"),
    *("-i", "--info", "-r", "--run", "--resolve", "-sc", "--shell-completion"),
    *("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir"),
    "--experimental-rerun",
)
# Flags followed by a value (``--cfg job``): the value is not an override.
_VALUED_FLAGS = ("-c", "--cfg", "-p", "--package", "-i", "--info", "-sc", "--shell-completion")
_VALUED_FLAGS += ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir")
_VALUED_FLAGS += ("--experimental-rerun",)


_INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
_CFG_CHOICES = ("job", "hydra", "all")


def _flag_value(flag: str, following: str | None) -> bool:
    """Whether ``following`` is ``flag``'s value (``--info`` takes one only optionally)."""
    if following is None or flag not in _VALUED_FLAGS:
        return False
    return flag not in ("-i", "--info") or following in _INFO_CHOICES


def flags_first(argv: list[str]) -> list[str]:
    """``argv`` with Hydra's flags (and their values) before the overrides: Hydra's parser
    takes the overrides as one list and refuses a flag placed between two of them."""
    flags: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if arg in HYDRA_FLAGS:
            takes = _flag_value(arg, following)
            flags += [arg, following] if takes and following is not None else [arg]
            i += 2 if takes else 1
            continue
        overrides.append(arg)
        i += 1
    return [*flags, *overrides]


def flag_value_error(argv: list[str], config_dir: Path) -> str | None:
    """One line for a Hydra flag whose value Hydra would refuse with its usage text or a
    search-path listing: ``--cfg`` other than job, hydra or all, a ``--config-name`` that is not
    a config of ``config_dir``, a valued flag given no value."""
    for i, arg in enumerate(argv):
        if arg not in _VALUED_FLAGS or arg in ("-i", "--info"):
            continue
        value = argv[i + 1] if i + 1 < len(argv) else None
        if value is None or value in HYDRA_FLAGS:
            return f"{arg} is invalid: give it a value (e.g. --cfg job)"
        if arg in ("-c", "--cfg") and value not in _CFG_CHOICES:
            return f"{arg} {value} is invalid: choose one of {list(_CFG_CHOICES)}"
        elsewhere = {"-cp", "--config-path", "-cd", "--config-dir"} & set(argv)
        if arg in ("-cn", "--config-name") and not elsewhere:
            names = sorted(p.stem for p in config_dir.glob("*.yaml"))
            if Path(value).stem not in names:
                return f"{arg} {value} is invalid: choose one of {names}"
    return None


def argument_error(argv: list[str]) -> str | None:
    """One line for an argument that is neither a Hydra flag nor a ``key=value`` override Hydra
    can parse: an unknown flag (``--foo``), no key (``=5``), a key with a non-ASCII character,
    an empty ``hydra.run.dir``/``hydra.sweep.dir``."""
    for arg in argv:
        if arg.startswith("-") and arg.split("=", 1)[0] not in HYDRA_FLAGS:
            return (
                f"{arg} is invalid: not an option (options: -m/--multirun, --cfg job, --info, "
                "--help; settings are key=value overrides, e.g. system.lr=1e-3)"
            )
    values = iter(argv)
    for arg in values:
        if arg in _VALUED_FLAGS:
            next(values, None)
            continue
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        bare = key.lstrip("+~").strip()
        if not bare:
            return f"{arg} is invalid: no key before '=' (give key=value, e.g. system.lr=1e-3)"
        odd = [c for c in bare if not c.isascii()]
        if odd:
            ascii_key = unicodedata.normalize("NFKD", bare).encode("ascii", "ignore").decode()
            hint = f"; did you mean {ascii_key}?" if ascii_key and ascii_key != bare else ""
            return (
                f"{arg} is invalid: the key {bare!r} has a non-ASCII character {odd[0]!r} (keys "
                f"are ASCII letters, digits, '_', '-', '.' and '/'){hint}"
            )
        if "" in bare.split("."):
            joined = ".".join(part for part in bare.split(".") if part)
            return (
                f"{arg} is invalid: the key {bare!r} has an empty part between dots; did you "
                f"mean {joined}?"
            )
        odd = [c for c in value if not c.isascii()]
        if odd and value[:1] not in ("'", '"'):
            plain = unicodedata.normalize("NFKC", value)
            hint = (
                f"did you mean {key}={plain}?" if plain.isascii() else f"quote it: {key}='{value}'"
            )
            return f"{arg} is invalid: the value has a non-ASCII character {odd[0]!r}; {hint}"
        if bare in ("hydra.run.dir", "hydra.sweep.dir") and not value.strip():
            return (
                f"{bare}='' is invalid: give a directory, or leave {bare} out for the default "
                "(outputs/<date>/<time>_<env>_<network>)"
            )
    return None


def resume_dir_error(argv: list[str]) -> str | None:
    """One line when a single run's ``resume=`` names no run directory (no such directory, or
    no ``config.yaml`` there) or comes with a ``hydra.run.dir`` elsewhere (the run would continue
    in its own directory and leave that one empty): caught before Hydra creates any directory."""
    values = _single_run_values(argv)
    if values is None or values.get("resume", "") in ("", "null"):
        return None
    run_dir = Path(values["resume"]).expanduser()
    if not run_dir.is_dir():
        return f"resume={run_dir}: no such directory (give a run directory: resume=<run dir>)"
    if not (run_dir / CONFIG_FILE).exists():
        return f"resume={run_dir}: no config.yaml there (not a run directory)"
    other = values.get("hydra.run.dir")
    if other is not None and Path(other).expanduser().resolve() != run_dir.resolve():
        return (
            f"hydra.run.dir={other} is invalid with resume={run_dir}: a resumed run continues in "
            "its own directory (drop hydra.run.dir; to branch off a copy, copy the directory "
            "and resume the copy)"
        )
    return None


def composed_or_error(
    argv: list[str], config_dir: Path, config_name: str = "config"
) -> tuple[DictConfig | None, str | None]:
    """The first command-line mistake of ``argv`` as one line, else the config Hydra composes from
    it (composed once: ``(config, None)``; ``(None, line)`` for the first mistake; ``(None,
    None)`` for a multirun or Hydra flags, whose composing is Hydra's). The ``env=`` options of
    env families are added to Hydra's options (:func:`~stoixlite.cli.env_names.add_env_options`)
    for this composition and Hydra's own."""
    argv = plain_overrides(argv, config_dir)
    error = (
        argument_error(argv)
        or flag_value_error(argv, config_dir)
        or group_option_error(argv, config_dir)
        or add_env_options(argv, config_dir)
        or run_dir_error(argv)
        or resume_dir_error(argv)
    )
    if error is not None:
        return None, error
    cfg, error = _composed(argv, config_dir, config_name)
    if cfg is not None:
        try:  # an interpolation that does not resolve, e.g. ${oc.env:UNSET}: one line
            resolved(cfg)
        except ConfigError as err:
            return None, str(err).splitlines()[0]
    return cfg, error
