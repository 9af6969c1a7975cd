"""A fused group's members on a CPU: consecutive members in parts, the parts computed at the same
time, one core each.

XLA:CPU computes one call of a program on one core at a time (apart from the few operations it
splits over its thread pool), and runs calls made from different threads at the same time. A
group of ``M`` members on a machine with ``C`` usable cores is cut into ``min(M, C)`` parts of
consecutive members, their sizes differing by at most one (:func:`part_sizes`); each part is one
call of the program of its members one after another (:func:`over_members`:
every member computes with the operations of its run alone), the calls made from one thread
each, and their results joined along the lane axis in member order. Parts of one size share one
compiled program (at most two sizes, compiled at the same time).

Every argument and result of the programs has the leading lane axis (members x seeds, lane
``m * S + s`` being seed ``s`` of member ``m``); a part holds the lanes of its members.
docs/experiments.md, "Sweeps as one program", has the speed-up.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp


def over_members(fn: Callable, members: int, seeds: int) -> Callable:
    """``fn`` of one seed over ``members x seeds`` lanes (lane ``m * seeds + s``), the members
    one after another in the program (``lax.map``), each member's seeds ``vmap``-ped: every
    member computes with the operations of its run alone. The members' axis of a fused group on
    a CPU, in each part of :class:`MemberParts`."""
    one = fn if seeds == 1 else jax.vmap(fn)

    def split(x: jax.Array) -> jax.Array:
        return x.reshape((members, seeds, *x.shape[1:]))

    def merge(x: jax.Array) -> jax.Array:
        return x.reshape((members * seeds, *x.shape[2:]))

    def mapped(*args: Any) -> Any:
        if seeds == 1:
            return jax.lax.map(lambda a: one(*a), args)
        out = jax.lax.map(lambda a: one(*a), jax.tree.map(split, args))
        return jax.tree.map(merge, out)

    return mapped


def members_axis(platform: str, mesh: Any) -> str:
    """How a fused group computes its members on devices of ``platform``: ``vmap`` (one program,
    one batch over members, each matmul a batched one: an accelerator's wider batch) or
    ``parts`` (:class:`MemberParts`: parts of members at the same time, one core each, each
    part's members one after another, :func:`over_members`). XLA:CPU runs a batched matmul of
    per-member weights slower than the members' matmuls one after another, and one call of a
    program on about one core (docs/experiments.md, "Sweeps as one program"), so on a CPU with
    one device the members are in parts; a group split over devices keeps ``vmap`` (its lanes
    are sharded)."""
    return "parts" if platform == "cpu" and mesh is None else "vmap"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where the platform
    has no affinity)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def part_sizes(members: int, cores: int) -> tuple[int, ...]:
    """The members of each part: ``min(members, cores)`` parts (at least one) of consecutive
    members, the first ``members % parts`` of them one member larger. ``part_sizes(5, 2) ==
    (3, 2)``; ``part_sizes(12, 16) == (1,) * 12``."""
    if members < 1:
        raise ValueError(f"members must be at least 1, got {members}")
    parts = max(1, min(members, cores))
    size, extra = divmod(members, parts)
    return tuple(size + 1 if i < extra else size for i in range(parts))


def _cut(args: tuple[Any, ...], bounds: tuple[tuple[int, int], ...]) -> list[tuple[Any, ...]]:
    """``args`` (every leaf with the leading lane axis) as one tuple per part: lanes
    ``lo:hi`` of each ``(lo, hi)`` of ``bounds``."""
    return [jax.tree.map(lambda x, lo=lo, hi=hi: x[lo:hi], args) for lo, hi in bounds]


def _join(outs: list[Any]) -> Any:
    """The parts' results as one tree: each leaf concatenated along its leading lane axis."""
    return jax.tree.map(lambda *x: jnp.concatenate(x), *outs)


class MemberParts:
    """``fn`` of one seed over ``sum(sizes) x seeds`` lanes, computed in parts of ``sizes``
    consecutive members at the same time (the module's docstring). Called like the jitted
    program of the whole group: ``parts(*args)`` returns its results (ready: each part's thread
    waits for its own), and ``parts.lower(*args).compile()`` compiles every part's program (the
    distinct sizes at the same time) and returns a callable that runs the compiled programs.
    ``donate``: each part's program donates the first argument of its part (the copy cut out of
    the caller's arguments; the caller's own arrays are not donated)."""

    def __init__(self, fn: Callable, sizes: Sequence[int], seeds: int, donate: bool) -> None:
        self.sizes = tuple(sizes)
        edges = [sum(self.sizes[:i]) * seeds for i in range(len(self.sizes) + 1)]
        self.bounds = tuple(zip(edges[:-1], edges[1:], strict=True))
        self.programs = {
            size: jax.jit(over_members(fn, size, seeds), donate_argnums=0 if donate else ())
            for size in sorted(set(self.sizes))
        }
        self.cut = jax.jit(partial(_cut, bounds=self.bounds))
        self.join = jax.jit(_join)

    def __call__(self, *args: Any) -> Any:
        return self._run([self.programs[size] for size in self.sizes], args)

    def lower(self, *args: Any) -> _LoweredParts:
        """What ``compile()`` compiles: the parts' programs for ``args``' shapes."""
        return _LoweredParts(self, args)

    def compile(self, *args: Any) -> Callable[..., Any]:
        """Every part's program compiled for ``args``' shapes (one compilation per distinct size),
        and the small cut and join programs into the jit caches their calls hit, all at the same
        time; returns one callable."""
        parts = jax.eval_shape(self.cut, args)
        first = dict(zip(self.sizes, parts, strict=True))  # one part's shapes per size
        jobs = [self.programs[size].lower(*part) for size, part in first.items()]
        outs = {size: lowered.out_info for size, lowered in zip(first, jobs, strict=True)}
        small = [self.cut.lower(args), self.join.lower([outs[size] for size in self.sizes])]
        with ThreadPoolExecutor(len(jobs) + len(small)) as pool:
            warm = [pool.submit(lowered.compile) for lowered in small]
            compiled = dict(
                zip(first, pool.map(lambda lowered: lowered.compile(), jobs), strict=True)
            )
            for future in warm:
                future.result()
        programs = [compiled[size] for size in self.sizes]
        return lambda *call_args: self._run(programs, call_args)

    def _run(self, programs: list[Callable], args: tuple[Any, ...]) -> Any:
        """The parts of ``args`` through ``programs`` (one per part) from one thread each, the
        results joined."""
        parts = self.cut(args)
        if len(programs) == 1:
            return self.join([programs[0](*parts[0])])

        def one(program: Callable, part: tuple[Any, ...]) -> Any:
            return jax.block_until_ready(program(*part))

        with ThreadPoolExecutor(len(programs)) as pool:
            outs = list(pool.map(one, programs, parts))
        return self.join(outs)


class _LoweredParts:
    """:meth:`MemberParts.lower`'s result: ``compile()`` as a jitted program's lowering has it."""

    def __init__(self, parts: MemberParts, args: tuple[Any, ...]) -> None:
        self.parts, self.args = parts, args

    def compile(self) -> Callable[..., Any]:
        return self.parts.compile(*self.args)
