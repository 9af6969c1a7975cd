"""Adapter from gymnax (>= 1.0) environments to the stoixlite :class:`Environment` API: a
:class:`~stoixlite.envs.gymnax_style.GymnaxStyleEnv` (the generic adapter of gymnax-style APIs)
whose time limit is gymnax's ``is_truncated``.

gymnax's ``env.step`` auto-resets internally (and would throw away the true final observation),
so the adapter never calls it: it uses ``reset_env`` and ``step_env`` (no auto-reset), and the
one reset happens in :class:`stoixlite.envs.wrappers.AutoResetWrapper`.

Terminated vs truncated. gymnax 1.0 separates the two: ``step_env`` returns the *natural*
termination flag only (``is_terminated``: pole fell, goal reached, memory query answered, ...),
and the time limit is ``is_truncated(state) = state.time >= params.max_steps_in_episode``, which
gymnax's own ``step`` evaluates on the post-step state. The adapter does the same:

* ``terminated = step_env(...)[3]`` -> discount 0 (no bootstrap);
* ``truncated = is_truncated(new_state, params)`` -> LAST with discount 1 (bootstrap),
  unless the step also terminated: when both happen on the same step, termination wins
  (LAST, discount 0, ``extras["truncated"]`` False after the wrappers), because the true MDP
  ended there and there is nothing to bootstrap from.

The adapter state holds the gymnax state and its own PRNG key, split on every step (the subkey
goes to ``step_env``, which matters for stochastic envs). Observations are float32 and flattened;
the action space is :class:`Discrete` or :class:`Box` from gymnax's space.

Invalid actions (``docs/envs.md``). gymnax clamps or extrapolates out-of-range actions silently
(CartPole's force is ``10 a - 10 (1 - a)``, MountainCar's ``(a - 1) F``, Acrobot indexes its torque
table with clamping) and propagates NaN. The adapter clips Box actions to their bounds and
replaces an invalid action (out-of-range integer, NaN) by the *worst valid action* at that state:
every valid action (every corner ``low``/``high`` of a Box) is stepped with the same key and the
lowest-reward outcome (the first on ties) is taken
(:func:`stoixlite.envs.actions.worst_valid_step`). Valid actions take the normal path; under
``vmap`` the candidates are stepped only on steps where some action of the batch is invalid
(``n + 1`` gymnax steps then, 3 for a Box; one otherwise).

Registered names: ``gymnax/<id>`` for every id of ``gymnax.registered_envs`` that runs offline
(:data:`GYMNAX_ENVS`; ``MNISTBandit-bsuite``, which downloads MNIST when it is made, is refused
with that reason: :data:`GYMNAX_REFUSED`). Factory kwargs are gymnax ``EnvParams`` overrides, e.g.
``make("gymnax/CartPole-v1", max_steps_in_episode=100)``; ``env_kwargs`` go to the gymnax
constructor, e.g. ``env_kwargs={"num_bits": 2}`` for MemoryChain. Image observations
(MinAtar's ``[10, 10, C]`` channels, Pong's ``[30, 40, 3]``) stay images, which the cnn
encoder reads and the mlp encoder flattens; other observations are flattened (Catch's
``[10, 5]`` board, DeepSea's ``[8, 8]`` grid), FrozenLake's cell index is one-hot. The envs
with a config of their own (``configs/env/gymnax/<id>.yaml``), in detail:

* ``gymnax/CartPole-v1`` (time limit 500), ``gymnax/Acrobot-v1`` (500),
  ``gymnax/Pendulum-v1`` (200, Box action of shape (1,)), ``gymnax/MountainCar-v0`` (200).
* ``gymnax/MemoryChain-bsuite``: bsuite's memory chain (defaults ``memory_length=5``,
  ``num_bits=1``). Observation ``[1 - t/memory_length, query, 2*context-1]`` computed from the
  *pre-step* time (as in bsuite), so the context is visible in the reset observation and again
  in the first step's observation (both at t=0), the query at the observation returned by step
  ``memory_length``; the episode terminates (discount 0) after ``memory_length + 1`` steps with
  reward +1 if the last action equals ``context[query]`` and -1 otherwise (0 on earlier steps).
  With one bit the query is always 0. The time limit (1000) is never reached.
* ``gymnax/DiscountingChain-bsuite``: bsuite's discounting chain (``n_actions=5``,
  ``mapping_seed=0``). The first action picks chain ``c``; reward ``rewards[c]`` arrives once, on
  step ``reward_timestep[c]`` = 1, 3, 10, 30, 100; chain ``mapping_seed`` pays
  ``optimal_return`` = 1.1, the others 1. Observation ``[c (-1 before the choice), t / 100]``.
  100 steps, truncated (the reward of chain 4 arrives on the last step).
* ``gymnax/MetaMaze-misc``: the meta-RL maze of Miconi et al. (2019): a 9 x 9 maze (open cells
  between wall pillars), a goal drawn per episode; reaching it pays 10 and teleports the agent to
  a random cell (the episode goes on, so the agent should remember where the goal was).
  Observation ``[3 x 3 walls around the agent, one-hot previous action (4), previous reward,
  step t]``; 200 steps, truncated (termination only if a teleport lands on the goal).
* ``gymnax/BernoulliBandit-misc``: two arms paying 1 with probabilities ``(p, 1 - p)``,
  ``p`` drawn from ``{0.1, 0.9}`` per episode (Wang et al. 2017). Observation ``[previous reward,
  one-hot previous action (2), time in [-1, 1]]``; 100 pulls, truncated.
* ``gymnax/GaussianBandit-misc``: arm 0 pays 0; arm 1 pays ``N(mu, 0.1^2)`` with ``mu ~ N(-1,
  1)`` drawn per episode (Lange & Sprekeler 2022). Observation as the Bernoulli bandit's; 100
  pulls, truncated.

The others take the gymnax family's defaults (``configs/env_defaults/gymnax.yaml``, selected by
``env=gymnax/<id>``: :mod:`stoixlite.cli.env_names`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import types
from functools import partial
from typing import Any

import jax

from stoixlite.envs.gymnax_style import GymnaxState, GymnaxStyleEnv, replace_params
from stoixlite.envs.registry import refuse_env, register_env

__all__ = ["GYMNAX_ENVS", "GYMNAX_REFUSED", "GymnaxEnv", "GymnaxState", "load_gymnax"]


STABLE_GYMNAX_FIX = (
    "pip uninstall -y stable-gymnax && pip install --force-reinstall --no-deps 'gymnax>=1.0'"
)


@functools.cache
def load_gymnax() -> types.ModuleType:
    """gymnax, imported on first use: its import (seaborn, pandas, ...) takes seconds, and the
    registry imports this module to list the env names of every run.

    ``ImportError`` (one line, with the fix) if the distribution ``stable-gymnax`` is installed:
    it ships a module also named ``gymnax`` (a fork of gymnax 0.0.x), so whichever of the two was
    installed last has silently replaced the other's files (popgym-arcade depends on it; install
    popgym-arcade with ``--no-deps`` instead: docs/envs.md, "POPGym Arcade")."""
    try:
        importlib.metadata.distribution("stable-gymnax")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        raise ImportError(
            "stable-gymnax is installed and shares the module name 'gymnax' with gymnax, whose "
            f"files it replaces; fix: {STABLE_GYMNAX_FIX}"
        )
    import gymnax

    if not hasattr(gymnax.environments.environment.Environment, "is_truncated"):
        raise ImportError(
            "stoixlite needs gymnax >= 1.0 (separate is_terminated/is_truncated); "
            f"found gymnax {getattr(gymnax, '__version__', 'unknown')}"
        )
    return gymnax


class GymnaxEnv(GymnaxStyleEnv):
    """A gymnax env as a stoixlite :class:`Environment` (unbatched, no auto-reset).

    Args:
        env_id: gymnax id, e.g. ``"CartPole-v1"``.
        difficulty: accepted for a uniform config interface; must be ``None``.
        env_kwargs: keyword arguments for the gymnax env constructor.
        **param_overrides: fields of the gymnax ``EnvParams`` to replace.
    """

    def __init__(
        self,
        env_id: str,
        difficulty: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        **param_overrides: Any,
    ):
        if difficulty is not None:
            raise ValueError(f"gymnax/{env_id} has no difficulty levels; got {difficulty!r}")
        env, params = load_gymnax().make(env_id, **(env_kwargs or {}))
        params = replace_params(
            params, param_overrides, f"gymnax/{env_id}", time_limit="max_steps_in_episode"
        )
        super().__init__(
            env, params, f"gymnax/{env_id}", int(params.max_steps_in_episode), keep_images=True
        )
        self._env_id = env_id

    @property
    def gymnax_env(self) -> Any:
        return self._env

    def terminated_truncated(
        self, env_state: Any, done: jax.Array, info: dict[str, Any]
    ) -> tuple[jax.Array, jax.Array]:
        """gymnax 1.0: ``done`` of ``step_env`` is the natural termination; the time limit is
        ``is_truncated`` of the post-step state."""
        del info
        return done, self._env.is_truncated(env_state, self.params)


# Every id of gymnax.registered_envs (gymnax 1.0) that runs offline; tests/test_gymnax_adapter.py
# checks the list against gymnax's. Listed here, not read from gymnax: its import takes seconds.
GYMNAX_ENVS = (
    *("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0"),
    *("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar"),
    "SpaceInvaders-MinAtar",
    *("Catch-bsuite", "DeepSea-bsuite", "MemoryChain-bsuite", "UmbrellaChain-bsuite"),
    *("DiscountingChain-bsuite", "SimpleBandit-bsuite"),
    *("FourRooms-misc", "MetaMaze-misc", "PointRobot-misc", "BernoulliBandit-misc"),
    *("GaussianBandit-misc", "Reacher-misc", "Swimmer-misc", "Pong-misc", "FrozenLake-misc"),
)
# gymnax's ids stoixlite does not register, and why.
GYMNAX_REFUSED = {
    "MNISTBandit-bsuite": (
        "gymnax downloads MNIST when it makes this env, and stoixlite never downloads at run time"
    ),
}

for _env_id in GYMNAX_ENVS:
    register_env(f"gymnax/{_env_id}")(partial(GymnaxEnv, _env_id))
for _env_id, _reason in GYMNAX_REFUSED.items():
    refuse_env(f"gymnax/{_env_id}", _reason)
