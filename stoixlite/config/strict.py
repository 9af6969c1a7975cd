"""The generic strict parser: plain values read into typed dataclass fields, every mistake one line.

Every error is ``<key>=<value> is invalid: <what is allowed>`` (:class:`ConfigError` joins them):

* booleans accept only ``true``/``false`` (``env.obs_augment=no`` is an error);
* integers accept integral floats and scientific notation (``arch.total_timesteps=5e6``) and
  refuse fractions (``arch.seed=1.5``);
* an unknown key (also a ``+key`` override) is an error naming the nearest valid key;
* a field's :class:`~stoixlite.rules.Rule` (its dataclass field's ``rule`` metadata) says what it
  allows beyond its type.

It knows no config group: :mod:`stoixlite.config.parse` applies it to the run's schema.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from stoixlite.rules import Rule


class ConfigError(ValueError):
    """Configuration mistakes, one line each (``str`` joins them with newlines)."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class Errors(list):
    """The errors found so far, one line each."""

    def add(self, path: str, value: Any, allowed: str) -> None:
        self.append(f"{path}={value!r} is invalid: {allowed}")


def nearest(key: str, valid: Sequence[str]) -> str | None:
    """The valid key equal to ``key`` up to case, else the closest by spelling (difflib, cutoff
    0.5), else ``None``."""
    for candidate in valid:
        if candidate.lower() == key.lower():
            return candidate
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return close[0] if close else None


def unknown_key_hint(prefix: str, key: str, valid: Sequence[str], suffix: str = "") -> str:
    """``unknown key (did you mean <prefix><nearest><suffix>?)``, or the valid keys when none is
    close (``suffix``: the rest of a dotted path below the unknown key)."""
    near = nearest(key, valid)
    hint = f"did you mean {prefix}{near}{suffix}?" if near else f"valid keys: {sorted(valid)}"
    return f"unknown key ({hint})"


def report_unknown(errors: Errors, prefix: str, key: str, value: Any, valid: Sequence[str]) -> None:
    errors.add(f"{prefix}{key}", value, unknown_key_hint(prefix, key, valid))


_TYPE_NOUNS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _type_noun(tp: Any) -> str:
    """``tp`` in words: ``str | None`` -> "a string or null", ``tuple[str, ...]`` -> "a list of
    strings"."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        words = [_type_noun(a) for a in args if a is not type(None)]
        return " or ".join(words + (["null"] if type(None) in args else []))
    if origin is tuple:
        inner = {str: "strings", int: "integers", float: "numbers"}.get(args[0], "values")
        return f"a list of {inner}"
    return _TYPE_NOUNS.get(tp, getattr(tp, "__name__", str(tp)))


def type_words(tp: Any) -> str:
    return f"must be {_type_noun(tp)}"


def convert(tp: Any, value: Any) -> tuple[bool, Any]:
    """``(ok, converted)`` for ``value`` read as type ``tp`` (strict, see the module doc)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return True, None
        for arg in args:
            if arg is not type(None):
                ok, out = convert(arg, value)
                if ok:
                    return True, out
        return False, value
    if tp is bool:
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if tp is int:
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return True, int(value)
        return False, value
    if tp is float:
        ok = isinstance(value, (int, float))
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    if origin is tuple:
        ok = isinstance(value, (list, tuple)) and all(convert(args[0], v)[0] for v in value)
        return ok, tuple(value) if ok else value
    return True, value  # Any, Mapping: taken as given


def field_value(errors: Errors, path: str, tp: Any, value: Any, check: Rule | None) -> Any:
    ok, out = convert(tp, value)
    if ok and check is not None and out is not None:
        ok = check.ok(out)
    if not ok:
        errors.add(path, value, check.describe(value) if check is not None else type_words(tp))
    return out


def section(errors: Errors, cls: type, given: Any, prefix: str, skip: Sequence[str] = ()) -> Any:
    """Parse ``given`` (a mapping) into dataclass ``cls``; ``None`` when it has errors."""
    if not isinstance(given, Mapping):
        errors.add(prefix.rstrip("."), given, "config group is missing")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    before = len(errors)
    values: dict[str, Any] = {}
    for key, value in given.items():
        if key not in fields:
            report_unknown(errors, prefix, str(key), value, list(fields))
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp) or optional_dataclass(tp):
            inner = optional_dataclass(tp) or tp
            values[key] = (
                None if value is None else section(errors, inner, value, f"{prefix}{key}.")
            )
            continue
        values[key] = field_value(errors, prefix + key, tp, value, fields[key].metadata.get("rule"))
    for key, f in fields.items():
        missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if key not in values and missing and not any(e.startswith(prefix + key) for e in errors):
            check = f.metadata.get("rule")
            words = check.describe() if check is not None else type_words(hints[key])
            errors.append(f"{prefix}{key} is missing: {words}")
    return cls(**values) if len(errors) == before else None


def optional_dataclass(tp: Any) -> type | None:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None
