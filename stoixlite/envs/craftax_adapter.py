"""Craftax (Matthews et al. 2024) with symbolic observations, through the gymnax-style adapter.

Registered names (the ``craftax`` package is an optional dependency: ``pip install
'stoixlite[craftax]'``; the names are listed without it, and the config check refuses them in
one line until it is installed):

* ``craftax/classic_symbolic``: Craftax-Classic (Crafter's rules in JAX): observation ``[1345]``
  float32 in [0, 1] (a 7 x 9 local map of 17 block and 4 mob channels, then inventory,
  intrinsics, light, sleep and direction), 17 actions, 22 achievements, time limit 10,000 steps;
* ``craftax/symbolic``: Craftax: observation ``[8268]``, 43 actions, 67 achievements, time limit
  100,000 steps;

* ``craftax/classic_pixels``: Craftax-Classic with pixel observations, float32 images
  ``[63, 63, 3]`` in [0, 1] (the 7 x 9 block view and the inventory rows drawn at 7 pixels a
  block), for ``network.encoder=cnn``; actions, achievements and time limit as classic_symbolic;
* ``craftax/pixels``: Craftax with pixel observations, ``[130, 110, 3]`` (9 x 11 blocks and 4
  inventory rows at 10 pixels), as ``craftax/symbolic`` otherwise.

Factory kwargs replace fields of Craftax's ``EnvParams`` (e.g. ``make("craftax/classic_symbolic",
max_timesteps=1000)``; ``env.kwargs.max_timesteps=1000`` in a config); an unknown field raises
``ValueError`` naming it and the allowed ones.

Episode ends. Craftax's ``done`` fires on death (health 0), on lava (Classic), on defeating the
final boss (Craftax) and on the time limit. The adapter splits it: the time limit
(``timestep >= max_timesteps``) is a truncation (LAST, discount 1: bootstrapped), everything
else a termination (discount 0); a step that does both terminates. Craftax's own training code
treats the time limit as a termination; nothing else differs.

Rewards are Craftax's: +1 for each achievement unlocked for the first time in the episode, plus
0.1 times the change in health (negative when health is lost).

Episode metrics (``extras["episode_metrics"]``, logged as ``train/env/<name>``, the mean over the
episodes finished in an update): ``achievements``, the number of distinct achievements unlocked
in the episode, and ``achievement/<name>`` (0 or 1) for each achievement, named as in Craftax's
``Achievement`` enum, lower case (e.g. ``achievement/collect_wood``): its mean is the fraction of
episodes that unlocked it.

Invalid actions are the worst valid action at that state (the gymnax-style adapter's rule,
:func:`stoixlite.envs.actions.worst_valid_step`).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs.gymnax_style import GymnaxStyleEnv, replace_params
from stoixlite.envs.registry import register_env

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _texture_notes_logged() -> Iterator[None]:
    """Craftax prints notes on its texture cache when its modules are imported and its envs
    made ("Loading Craftax textures from cache.", ...): they go to this module's debug log
    instead of stdout, where they came before a run's first line (a config error included)."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    finally:
        for line in printed.getvalue().splitlines():
            log.debug("craftax: %s", line)


def _classic_symbolic() -> tuple[Any, Any]:
    """Craftax-Classic's symbolic env (no auto-reset) and its ``Achievement`` enum."""
    with _texture_notes_logged():
        from craftax.craftax_classic.constants import Achievement
        from craftax.craftax_classic.envs.craftax_symbolic_env import (
            CraftaxClassicSymbolicEnvNoAutoReset,
        )

        env = CraftaxClassicSymbolicEnvNoAutoReset()
    return env, Achievement


def _symbolic() -> tuple[Any, Any]:
    """Craftax's symbolic env (no auto-reset) and its ``Achievement`` enum."""
    with _texture_notes_logged():
        from craftax.craftax.constants import Achievement
        from craftax.craftax.envs.craftax_symbolic_env import CraftaxSymbolicEnvNoAutoReset

        env = CraftaxSymbolicEnvNoAutoReset()
    return env, Achievement


def _classic_pixels() -> tuple[Any, Any]:
    """Craftax-Classic's pixel env (no auto-reset) and its ``Achievement`` enum."""
    with _texture_notes_logged():
        from craftax.craftax_classic.constants import Achievement
        from craftax.craftax_classic.envs.craftax_pixels_env import (
            CraftaxClassicPixelsEnvNoAutoReset,
        )

        env = CraftaxClassicPixelsEnvNoAutoReset()
    return env, Achievement


def _pixels() -> tuple[Any, Any]:
    """Craftax's pixel env (no auto-reset) and its ``Achievement`` enum."""
    with _texture_notes_logged():
        from craftax.craftax.constants import Achievement
        from craftax.craftax.envs.craftax_pixels_env import CraftaxPixelsEnvNoAutoReset

        env = CraftaxPixelsEnvNoAutoReset()
    return env, Achievement


# registered variant -> the loader of its env and achievements. Craftax is imported on first use:
# it loads its textures into JAX arrays on import, and the registry imports this module to list
# the env names of every run.
CRAFTAX_VARIANTS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "classic_symbolic": _classic_symbolic,
    "symbolic": _symbolic,
    "classic_pixels": _classic_pixels,
    "pixels": _pixels,
}

_NO_TIME_LIMIT = int(np.iinfo(np.int32).max)


class CraftaxEnv(GymnaxStyleEnv):
    """A Craftax env (symbolic or pixel observations) as a stoixlite :class:`Environment`.

    Args:
        variant: a key of :data:`CRAFTAX_VARIANTS`.
        difficulty: accepted for a uniform config interface; must be ``None``.
        **param_overrides: fields of Craftax's ``EnvParams`` to replace (``max_timesteps``, ...).
    """

    def __init__(self, variant: str, difficulty: str | None = None, **param_overrides: Any):
        name = f"craftax/{variant}"
        if difficulty is not None:
            raise ValueError(f"{name} has no difficulty levels; got {difficulty!r}")
        functional, achievement = CRAFTAX_VARIANTS[variant]()
        params = replace_params(
            functional.default_params, param_overrides, name, time_limit="max_timesteps"
        )
        super().__init__(
            functional,
            params,
            name,
            int(params.max_timesteps),
            keep_images=variant.endswith("pixels"),
        )
        # (name, index into the state's achievement flags), in Craftax's enum order
        self.achievements = tuple((a.name.lower(), int(a.value)) for a in achievement)

    def terminated_truncated(
        self, env_state: Any, done: jax.Array, info: dict[str, Any]
    ) -> tuple[jax.Array, jax.Array]:
        """Death, lava or the boss terminate (Craftax's ``is_terminal`` without its time limit);
        ``timestep >= max_timesteps`` truncates."""
        del done, info
        params = self.params
        untimed = params.replace(max_timesteps=_NO_TIME_LIMIT)
        terminated = self._env.is_terminal(env_state, untimed)
        return terminated, env_state.timestep >= params.max_timesteps

    def episode_metrics(self, env_state: Any) -> dict[str, jax.Array]:
        """``achievements`` (distinct achievements unlocked so far) and ``achievement/<name>``
        (0/1 each), from the state's ``achievements`` flags ``[K]``."""
        unlocked = jnp.asarray(env_state.achievements, jnp.float32)
        metrics = {"achievements": unlocked.sum()}
        for name, index in self.achievements:
            metrics[f"achievement/{name}"] = unlocked[index]
        return metrics


for _variant in CRAFTAX_VARIANTS:
    register_env(f"craftax/{_variant}", requires=("craftax",))(partial(CraftaxEnv, _variant))
