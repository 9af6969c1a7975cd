"""A Gymnasium env's keyword arguments (``env.kwargs``), checked against its constructor before
any env is made.

Gymnasium passes ``env.kwargs`` to the env's constructor untouched, and a Python env stores what
it is given: ``goal_velocity='abc'`` trained MountainCar without ever reaching its goal. So each
kwarg is checked against the constructor's parameter of that name (the registered
``EnvSpec.kwargs`` override its default; ``gymnasium.make``'s own ``max_episode_steps`` and
``disable_env_checker`` are parameters too):

* a name the constructor does not take (and no ``**kwargs``): refused, with the names it takes;
* a bool default (or annotation) takes ``true``/``false`` only;
* a number default (int or float, or such an annotation) takes a finite number (an integer where
  the annotation says ``int``);
* a string default (or annotation) takes a string; a list or tuple default a list; a mapping
  default a mapping; a parameter with neither a default nor an annotation anything;
* ``render_mode``: ``null``, or one of the env's ``metadata["render_modes"]``; on a machine
  without a display (no ``DISPLAY`` or ``WAYLAND_DISPLAY`` on Linux) only ``null`` and
  ``rgb_array`` (nothing of training renders; ``human`` would need a window).

:func:`kwargs_error` gives the first mistake as one line, or ``None``.
"""

from __future__ import annotations

import inspect
import math
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

HEADLESS_RENDER_MODES = (None, "rgb_array")

# gymnasium.make's own keyword arguments (the others go to the constructor).
_MAKE_PARAMETERS = {
    "max_episode_steps": (None, int),  # -1: no TimeLimit
    "disable_env_checker": (None, bool),
}


def headless() -> bool:
    """Whether this process has no display to open a window on (Linux/BSD without ``DISPLAY``
    or ``WAYLAND_DISPLAY``; macOS and Windows always have one)."""
    if sys.platform in ("darwin", "win32"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _creator(spec: Any) -> Callable[..., Any]:
    from gymnasium.envs.registration import load_env_creator

    entry = spec.entry_point
    return entry if callable(entry) else load_env_creator(entry)


def _annotation(hint: Any) -> Any:
    """``hint`` without ``None`` (``Optional[X]``, ``X | None``): ``X``, or ``None`` when it
    names several types or none."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else None
    return hint if isinstance(hint, type) else None


def parameters(spec: Any) -> tuple[dict[str, tuple[Any, Any]], bool, Any]:
    """``({name: (default, annotated type)}, takes **kwargs, creator)`` of the constructor of the
    Gymnasium ``EnvSpec`` ``spec``, with the spec's registered kwargs as defaults and
    ``gymnasium.make``'s own parameters; a default is ``inspect.Parameter.empty`` where there is
    none, a type ``None`` where it is not one plain type."""
    creator = _creator(spec)
    target = creator.__init__ if inspect.isclass(creator) else creator
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # unresolvable annotations: untyped
        hints = {}
    try:
        signature = inspect.signature(creator)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return {}, True, creator
    named: dict[str, tuple[Any, Any]] = dict(_MAKE_PARAMETERS)
    is_open = False
    for p in signature.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            is_open = True
        elif p.kind is not inspect.Parameter.VAR_POSITIONAL and p.name != "self":
            default = spec.kwargs.get(p.name, p.default)
            named[p.name] = (default, _annotation(hints.get(p.name)))
    return named, is_open, creator


def _kind(default: Any, annotated: Any) -> str | None:
    """What a parameter takes: ``bool``, ``int``, ``number``, ``str``, ``list``, ``mapping``,
    or ``None`` (anything)."""
    if isinstance(default, bool) or annotated is bool:
        return "bool"
    if annotated is int:
        return "int"
    if annotated is float or isinstance(default, (int, float)):
        return "number"
    if isinstance(default, str) or annotated is str:
        return "str"
    if isinstance(default, (list, tuple)) or annotated in (list, tuple):
        return "list"
    if isinstance(default, Mapping) or annotated is dict:
        return "mapping"
    return None


_WORDS = {
    "bool": "must be true or false",
    "int": "must be an integer",
    "number": "must be a finite number",
    "str": "must be a string",
    "list": "must be a list",
    "mapping": "must be a mapping",
}


def _fits(kind: str, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return math.isfinite(value) and (kind == "number" or float(value).is_integer())
    if kind == "str":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, (list, tuple))
    return isinstance(value, Mapping)


def _render_mode_error(value: Any, creator: Any) -> str | None:
    if value is None:
        return None
    modes = list(getattr(creator, "metadata", {}).get("render_modes") or [])
    if headless() and value not in HEADLESS_RENDER_MODES:
        return (
            "this machine has no display (no DISPLAY or WAYLAND_DISPLAY) and training renders "
            "nothing: choose null or rgb_array"
        )
    if modes and value not in modes:
        return f"choose null or one of the env's render modes {modes}"
    return None


def kwargs_error(env_id: str, kwargs: Mapping[str, Any]) -> str | None:
    """The first mistake of the kwargs of the registered Gymnasium id ``env_id`` as one line
    (``env.kwargs.<name>=<value> is invalid: ...``), or ``None`` if there is none."""
    import gymnasium

    if not kwargs:
        return None
    try:
        named, is_open, creator = parameters(gymnasium.spec(env_id))
    except Exception:  # the creator does not import (a missing package): making it says so
        return None
    for key, value in kwargs.items():
        given = f"env.kwargs.{key}={value!r} is invalid"
        if key not in named:
            if is_open:
                continue
            takes = sorted(k for k in named if k not in _MAKE_PARAMETERS)
            return (
                f"{given}: not a parameter of {env_id} (it takes {takes}; gymnasium.make takes "
                f"{sorted(_MAKE_PARAMETERS)})"
            )
        if key == "render_mode":
            why = _render_mode_error(value, creator)
            if why:
                return f"{given}: {why}"
            continue
        default, annotated = named[key]
        kind = _kind(None if default is inspect.Parameter.empty else default, annotated)
        if kind is None or (value is None and default is None):
            continue
        if not _fits(kind, value):
            shown = "" if default is inspect.Parameter.empty else f"; default {default!r}"
            return f"{given}: {_WORDS[kind]}{shown}"
    return None
