"""One generic registry of named plug-ins with discovery, used for memory models and envs.

A plug-in module registers its entries when it is imported; :meth:`Registry.names` and
:meth:`Registry.get` first import every module under the registry's packages (recursively), so a
new plug-in needs only its own file (or folder) inside one of them, nothing else changes.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one ``kind`` (e.g. ``"memory model"``) by name, discovered under ``packages``
    (dotted package names)."""

    def __init__(self, kind: str, packages: Sequence[str]):
        self.kind = kind
        self.packages = tuple(packages)
        self._entries: dict[str, T] = {}
        self._discovered = False

    def add(self, name: str, entry: T) -> None:
        """Register ``entry`` under ``name`` (the same entry again is a no-op)."""
        if name in self._entries and self._entries[name] != entry:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = entry

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for package_name in self.packages:
            package = importlib.import_module(package_name)
            for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
                importlib.import_module(info.name)

    def names(self) -> list[str]:
        """Sorted names of every entry (after discovery)."""
        self._discover()
        return sorted(self._entries)

    def get(self, name: str) -> T:
        """The entry ``name``; ``KeyError`` naming the nearest names and the choices otherwise."""
        self._discover()
        if name not in self._entries:
            near = difflib.get_close_matches(name, list(self._entries), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise KeyError(f"unknown {self.kind} {name!r}; {hint}choose one of {self.names()}")
        return self._entries[name]
