"""Data parallelism: how a run's arrays are laid out on the devices its plan selected
(:func:`stoixlite.config.plan.select_devices`).

A run on ``D > 1`` devices (``arch.num_devices``; all devices of every process by default) is the
single-device program compiled for a one-axis device :class:`~jax.sharding.Mesh` (axis
:data:`DEVICE_AXIS`) with :class:`~jax.sharding.NamedSharding` annotations (GSPMD), not a
hand-written per-device program:

* the env axis of the learner state (env states, last timesteps, memory carries: ``[N, ...]``,
  ``[S, N, ...]`` with several seeds) is split over the devices, so each device steps and
  rolls out ``N / D`` envs; parameters, optimiser state and PRNG keys are replicated;
* each minibatch of training sequences is split over the devices
  (:meth:`Placement.constrain_minibatch`): each device computes the loss and gradients of its
  ``1 / D`` share, and XLA sums the gradients and every global statistic (advantage
  normalisation, losses, episode counts) across devices;
* the shuffle is the single-device one: a minibatch holds the same sequences on any number of
  devices, so a run on ``D`` devices equals the run on one within float tolerance (only the
  summation order of cross-device reductions differs). PRNG draws are partitionable
  (``jax_threefry_partitionable``, on by default), i.e. the same values however they are sharded.

With ``D = 1`` there is no mesh and no annotation: the program is exactly the single-device one.
Several processes (``jax.distributed``, :mod:`stoixlite.run.distributed`) share one global mesh;
devices are ordered by process, so each process steps a contiguous block of the envs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from stoixlite.config.plan import RunPlan
from stoixlite.ppo.sequences import BATCH_MAJOR_FIELDS, SequenceBatch
from stoixlite.ppo.types import LearnerState

DEVICE_AXIS = "devices"


@dataclass(frozen=True)
class Placement:
    """Where the arrays of a run live: a one-axis mesh over its devices (``mesh is None`` for a
    single device: default placement, today's program) and the lane count (seeds, or members x
    seeds of a fused group: the env axis of the learner state is axis 1 when ``num_seeds > 1``)."""

    mesh: Mesh | None
    num_seeds: int

    @classmethod
    def of(cls, plan: RunPlan, members: int = 1) -> Placement:
        """The placement of ``plan``'s run (of a fused group of ``members`` runs like it) on its
        devices (:attr:`RunPlan.devices`)."""
        devices = plan.devices
        mesh = Mesh(np.asarray(devices), (DEVICE_AXIS,)) if len(devices) > 1 else None
        return cls(mesh=mesh, num_seeds=members * plan.config.arch.num_seeds)

    @property
    def num_devices(self) -> int:
        return 1 if self.mesh is None else self.mesh.size

    def _sharding(self, *spec: str | None) -> NamedSharding:
        assert self.mesh is not None
        return NamedSharding(self.mesh, PartitionSpec(*spec))

    @property
    def replicated(self) -> NamedSharding | None:
        """Every device holds the whole array (``None`` without a mesh)."""
        return None if self.mesh is None else self._sharding()

    def state_shardings(self, state: LearnerState) -> LearnerState | None:
        """Shardings of a learner state of this run: env states, timesteps and carries split on
        their env axis, everything else replicated (``None`` without a mesh)."""
        if self.mesh is None:
            return None
        env_axis = 0 if self.num_seeds == 1 else 1
        split = self._sharding(*([None] * env_axis), DEVICE_AXIS)
        rep = self._sharding()
        per_env = {"env_state", "timestep", "carry"}
        return state.replace(
            **{
                name: jax.tree.map(lambda _, s=(split if name in per_env else rep): s, value)
                for name, value in vars(state).items()
            }
        )

    def put(self, tree: Any, shardings: Any) -> Any:
        """Global arrays of ``tree`` (the same host values on every process) laid out by
        ``shardings`` (a pytree prefix of ``tree``); ``tree`` itself without a mesh."""
        if self.mesh is None:
            return tree

        def place(x: Any, sharding: NamedSharding) -> jax.Array:
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                impl = jax.random.key_impl(x)
                return jax.random.wrap_key_data(place(jax.random.key_data(x), sharding), impl=impl)
            host = np.asarray(x)
            return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

        return jax.tree.map(place, tree, shardings)

    def constrain_minibatch(self, batch: SequenceBatch) -> SequenceBatch:
        """Split a minibatch ``[L, B, ...]`` (per-sequence fields such as the initial carries
        ``[B, ...]``) over the devices on its sequence axis: each device computes the loss and
        gradients of ``B / D`` of its sequences."""
        if self.mesh is None:
            return batch
        time_major = self._sharding(None, DEVICE_AXIS)  # [L, B, ...]
        batch_major = self._sharding(DEVICE_AXIS)  # [B, ...]

        def constrain(name: str, value: Any) -> Any:
            spec = batch_major if name in BATCH_MAJOR_FIELDS else time_major
            return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, spec), value)

        return SequenceBatch(**{name: constrain(name, v) for name, v in vars(batch).items()})


def to_host(tree: Any) -> Any:
    """``tree`` as numpy arrays on this process: replicated arrays from a local copy, sharded
    ones gathered from every process."""
    from jax.experimental import multihost_utils

    def fetch(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(jax.device_get(x))
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(fetch, tree)
