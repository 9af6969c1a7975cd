"""What a traced or compiled learn chunk holds: its data-dependent branches inside loops, the
jaxpr equations of its loop bodies, and the XLA fusions of the compiled program.

``jax.make_jaxpr`` of a learn chunk gives nested jaxprs: the chunk's ``scan`` over updates holds
the rollout's ``scan`` over steps, the epochs' ``scan`` over minibatches and the memory models'
scans over time. A ``while`` (``lax.while_loop``, a ``fori_loop`` whose bounds are traced) or a
``cond`` (``lax.cond``, ``lax.switch``) inside any of them is a data-dependent branch: on an
accelerator each one copies its predicate to the host and waits for it, in every iteration of
the loops around it (``arch.branching=mask`` leaves none; ``tests/test_branching.py``). A
``scan`` (``lax.scan``, a ``fori_loop`` with static bounds) has a static trip count and is not
one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from jax.extend import core as jax_core

BRANCHES = ("while", "cond")  # lax.switch is a cond with an index
LOOPS = ("scan", "while")


@dataclass(frozen=True)
class Branch:
    """A data-dependent branch inside a loop: its primitive, the primitives around it
    (outermost first) and where stoixlite (or the first frame outside JAX) traced it."""

    primitive: str
    path: tuple[str, ...]
    source: str

    def __str__(self) -> str:
        return f"{self.primitive} in {' > '.join(self.path)} at {self.source}"


def source_of(eqn: Any) -> str:
    """``file:line (function)`` of the innermost frame of ``eqn``'s trace in stoixlite, else the
    innermost outside JAX, else ``"?"``."""
    traceback = eqn.source_info.traceback
    frames = list(traceback.frames) if traceback is not None else []
    for wanted in (lambda f: "/stoixlite/" in f, lambda f: "/jax/" not in f):
        for frame in frames:
            if wanted(frame.file_name):
                name = re.sub(r".*/(stoixlite|site-packages)/", "", frame.file_name)
                return f"{name}:{frame.line_num} ({frame.function_name})"
    return "?"


def walk(jaxpr: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """Every equation of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``) and of the jaxprs inside its
    equations, with the primitives around it (outermost first)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn, path
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from walk(sub, (*path, eqn.primitive.name))


def branches_in_loops(jaxpr: Any) -> list[Branch]:
    """The ``while`` and ``cond`` equations of ``jaxpr`` that sit inside a loop (a ``scan`` or
    ``while`` body at any depth)."""
    return [
        Branch(eqn.primitive.name, path, source_of(eqn))
        for eqn, path in walk(jaxpr)
        if eqn.primitive.name in BRANCHES and any(p in LOOPS for p in path)
    ]


def equations(jaxpr: Any) -> int:
    """The equations of ``jaxpr`` and of every jaxpr inside them (a loop's body once)."""
    return sum(1 for _ in walk(jaxpr))


def scans(jaxpr: Any, around: tuple[Any, ...] = ()) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Every ``scan`` equation of ``jaxpr`` at any depth, with the scan equations around it
    (outermost first)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        inner = around
        if eqn.primitive.name == "scan":
            yield eqn, around
            inner = (*around, eqn)
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from scans(sub, inner)


def step_equations(jaxpr: Any, rollout_length: int, epochs: int, minibatches: int) -> dict:
    """Equations per step of the loops of an update in ``jaxpr`` (a learn chunk or a PPO
    program traced with ``jax.make_jaxpr``): ``minibatch``, the body of a scan of
    ``minibatches`` steps directly inside a scan of ``epochs`` steps (the epochs), and
    ``rollout``, the largest body among the scans of ``rollout_length`` steps outside the
    epochs (the rollout's, not GAE's). ``None`` where there is no such scan (a rollout cut into
    segment scans, ``arch.branching=mask`` with kept carries)."""
    found = list(scans(jaxpr))
    epoch_scans = {
        id(around[-1])
        for eqn, around in found
        if eqn.params["length"] == minibatches and around and around[-1].params["length"] == epochs
    }
    minibatch = [
        equations(eqn.params["jaxpr"])
        for eqn, around in found
        if around and id(around[-1]) in epoch_scans and eqn.params["length"] == minibatches
    ]
    rollout = [
        equations(eqn.params["jaxpr"])
        for eqn, around in found
        if eqn.params["length"] == rollout_length
        and id(eqn) not in epoch_scans
        and not any(id(a) in epoch_scans for a in around)
    ]
    return {
        "rollout": max(rollout) if rollout else None,
        "minibatch": max(minibatch) if minibatch else None,
    }


def fusions(compiled: Any) -> int:
    """The fusions of a compiled program: the ``fusion`` instructions of XLA's optimised HLO
    (each a kernel on a GPU; a loop's body counted once)."""
    return sum(1 for line in compiled.as_text().splitlines() if re.search(r"= \S+ fusion\(", line))
