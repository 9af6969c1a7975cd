"""The memory a run needs at least, estimated before anything is compiled or allocated, and the
one-line refusal of a run that cannot fit (:func:`check_fits`).

The estimate is a lower bound read from shapes alone (``jax.eval_shape``: nothing is computed):

* ``state``: the learner state of every lane (a seed; a member x seed of a fused group):
  parameters, the optimiser's moments, the envs' states, their last timesteps, the carries;
* ``gradients``: one gradient of the parameters;
* ``rollout``: ``system.rollout_length`` timesteps of every env (observations, rewards, ...), which
  the rollout keeps for the update;
* ``evaluation``: the evaluation envs' states, timesteps and carries (``arch.num_eval_envs`` per
  lane).

The compiled programs need more (activations, temporaries), so a run under the bound may still
not fit; a run over it never does. It is compared with the memory of the run's devices: an
accelerator's ``bytes_limit``, or the machine's physical memory for the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any

import jax

from stoixlite.config.strict import ConfigError

if TYPE_CHECKING:
    from stoixlite.run.parts import Run


def tree_bytes(tree: Any) -> int:
    """Bytes of the arrays (or shape-dtype structs) of ``tree``."""
    return sum(
        math.prod(leaf.shape) * leaf.dtype.itemsize
        for leaf in jax.tree.leaves(tree)
        if hasattr(leaf, "shape")
    )


@dataclasses.dataclass(frozen=True)
class Footprint:
    """A run's memory lower bound by part, in bytes (see the module docstring)."""

    params: int  # of every lane, included in ``state``
    state: int
    gradients: int
    rollout: int
    evaluation: int

    @property
    def total(self) -> int:
        return self.state + self.gradients + self.rollout + self.evaluation


def estimate(run: Run) -> Footprint:
    """The memory lower bound of ``run`` from the shapes of its state (nothing is computed)."""
    from stoixlite.run.parts import make_env_stack

    cfg = run.config
    state = jax.eval_shape(run.initial_states)
    eval_envs = cfg.arch.num_eval_envs
    eval_env = make_env_stack(cfg.env, eval_envs)
    reset = jax.eval_shape(eval_env.reset, jax.ShapeDtypeStruct((2,), "uint32"))
    carry = jax.eval_shape(lambda: run.network.initialize_carry(eval_envs))
    params = tree_bytes(state.params)
    return Footprint(
        params=params,
        state=tree_bytes(state),
        gradients=params,
        rollout=tree_bytes(state.timestep) * run.ppo.rollout_length,
        evaluation=(tree_bytes(reset) + tree_bytes(carry)) * run.num_lanes,
    )


def device_memory(devices: list[jax.Device]) -> tuple[int, str] | None:
    """``(bytes, what)``: the memory of ``devices`` (an accelerator's ``bytes_limit``, summed),
    or of the machine for the CPU (its devices share it); ``None`` when unknown."""
    try:
        stats = [device.memory_stats() or {} for device in devices]
    except Exception:  # a backend without memory statistics
        stats = []
    if stats and all("bytes_limit" in s for s in stats):
        kind = devices[0].platform
        return sum(int(s["bytes_limit"]) for s in stats), f"{len(devices)} {kind} device(s)"
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return int(ram), "this machine"


def size_text(num_bytes: float) -> str:
    """``num_bytes`` in binary units, e.g. ``"11.6 TiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if num_bytes < 1024 or unit == "PiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    raise AssertionError("unreachable")


def _culprit(run: Run, footprint: Footprint) -> str:
    """``key=value`` of the setting behind the largest part of ``footprint``."""
    cfg = run.config
    parts = {
        "params": footprint.params * 4,  # parameters, two moments, gradients
        "envs": footprint.state - footprint.params * 3 + footprint.rollout,
        "evaluation": footprint.evaluation,
    }
    largest = max(parts, key=lambda part: parts[part])
    if largest == "params":  # the network's largest size
        net = cfg.network
        sizes = {
            "embed_size": net.embed_size,
            "head_size": net.head_size,
            **{k: v for k, v in net.memory.items() if isinstance(v, int) and k.endswith("size")},
        }
        name = max(sizes, key=lambda key: sizes[key])
        return f"network.{name}={sizes[name]}"
    if largest == "evaluation":
        return f"arch.num_eval_envs={cfg.arch.num_eval_envs}"
    if footprint.rollout > footprint.state:
        return f"system.rollout_length={cfg.system.rollout_length}"
    return f"arch.num_envs={cfg.arch.num_envs}"


def run_devices(run: Run) -> list[jax.Device]:
    """The devices of this process that hold ``run``'s arrays."""
    mesh = run.placement.mesh
    if mesh is None:
        return jax.local_devices()[:1]
    return [d for d in mesh.devices.flat if d.process_index == jax.process_index()]


def check_fits(run: Run, devices: list[jax.Device]) -> Footprint | None:
    """The run's :func:`estimate`; :class:`ConfigError` (one line naming the setting behind
    most of it, the estimate and the memory there is) when it exceeds the memory of
    ``devices``. ``None`` for a run whose envs step on the host (``Run.envs_on_host``): its
    rollout lives in host arrays and its initial state needs the envs opened."""
    if run.envs_on_host:
        return None
    if "footprint" not in run.compiled:  # shared by the runs that compile the same
        run.compiled["footprint"] = estimate(run)
    footprint = run.compiled["footprint"]
    memory = device_memory(devices)
    if memory is not None and footprint.total > memory[0]:
        parts = ", ".join(
            f"{name} {size_text(getattr(footprint, name))}"
            for name in ("state", "gradients", "rollout", "evaluation")
        )
        raise ConfigError(
            [
                f"{_culprit(run, footprint)} is invalid: the run needs at least "
                f"{size_text(footprint.total)} of memory ({parts}) and {memory[1]} has "
                f"{size_text(memory[0])}"
            ]
        )
    return footprint
