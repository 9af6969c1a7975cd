"""POPGym Arcade (Wang et al. 2025): pixel POMDPs with MDP twins, through the gymnax-style adapter.

Registered names, one per game (the ``popgym-arcade`` package is an optional dependency, see
docs/envs.md "POPGym Arcade" for its install; the names are listed without it, and the config
check refuses them in one line until it is installed):

``arcade/autoencode``, ``arcade/battleship``, ``arcade/breakout``, ``arcade/cartpole``,
``arcade/count_recall``, ``arcade/minesweeper``, ``arcade/navigator``, ``arcade/noisy_cartpole``,
``arcade/skittles``, ``arcade/tetris``

each with ``difficulty`` ``easy`` | ``medium`` | ``hard`` (the package's ``<Game>Easy`` ...
classes) and two factory keyword arguments (``env.kwargs`` in a config):

* ``partial_obs`` (default ``True``): the POMDP, whose frames hide the state the game needs
  remembered (the cards played, the pole's velocity, ...); ``False`` gives the game's MDP twin,
  whose frames show it: the same game, dynamics and rewards, so a memoryless policy can do as
  well there as a memory model does on the POMDP (the counterfactual the arcade is built for);
* ``obs_size`` (default 128): the frame side, one of the sizes the game draws (128 or 256).

Observations are ``uint8`` RGB frames ``[obs_size, obs_size, 3]``, kept as images for
``network.encoder=cnn`` (scaled to [0, 1] inside the network); actions are ``Discrete(5)`` for
most games (up, down, left, right, fire; Breakout and Tetris their own sets). Each game's
``step_env`` returns ``done`` and ``info["terminated"]``/``info["truncated"]``; the adapter keeps
them apart: a step that ends the episode (``done``) is a termination (discount 0) when
``info["terminated"]`` says so, a truncation (time limit, discount 1, bootstrapped) otherwise;
CartPole, NoisyCartPole and Breakout also set ``info["terminated"]`` on the time limit, so for
them a step with ``info["truncated"]`` is a truncation (:data:`TIME_LIMIT_IN_TERMINATED`).
CartPole and NoisyCartPole test ``done`` on the state before the step, so their episodes last
one step past the limit (``max_episode_steps`` = limit + 1; :data:`DONE_ONE_STEP_LATE`).
The wrapped ``step`` never auto-resets (:class:`stoixlite.envs.wrappers.AutoResetWrapper` does,
keeping the true final frame); the time limit is the game's own (``max_steps_in_episode``, or
``max_episode_length`` for Battleship and MineSweeper).

The package is imported on first use. It imports ``gymnax.environments`` (only the base class and
spaces, which gymnax >= 1.0 provides): :func:`stoixlite.envs.gymnax_adapter.load_gymnax` runs
first and refuses an install where ``stable-gymnax`` has replaced gymnax's files.
"""

from __future__ import annotations

import functools
import importlib
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from stoixlite.envs.gymnax_adapter import load_gymnax
from stoixlite.envs.gymnax_style import GymnaxStyleEnv
from stoixlite.envs.registry import register_env

# registered game -> the package's class-name stem (``<stem>Easy``, ``<stem>Medium``, ...)
ARCADE_GAMES: dict[str, str] = {
    "autoencode": "AutoEncode",
    "battleship": "BattleShip",
    "breakout": "Breakout",
    "cartpole": "CartPole",
    "count_recall": "CountRecall",
    "minesweeper": "MineSweeper",
    "navigator": "Navigator",
    "noisy_cartpole": "NoisyCartPole",
    "skittles": "Skittles",
    "tetris": "Tetris",
}
# Games whose ``info["terminated"]`` also holds on the time limit (it is their ``done``): a step
# they report as both terminated and truncated ended on the time limit.
TIME_LIMIT_IN_TERMINATED = frozenset({"breakout", "cartpole", "noisy_cartpole"})
# Games that test ``done`` on the state *before* the step (CartPole's ``is_terminal(state)``):
# their episodes last one step past the time limit (201 steps at easy's limit of 200), and the
# step after the pole falls is the last (it pays 0).
DONE_ONE_STEP_LATE = frozenset({"cartpole", "noisy_cartpole"})
DIFFICULTIES = ("easy", "medium", "hard")
# popgym-arcade's own dependencies but one come with the `arcade` extra; the package itself goes
# in without its dependencies (its stable-gymnax installs a module named `gymnax` over gymnax's
# files, and an extra cannot leave out a dependency's dependency): docs/envs.md, "POPGym Arcade".
ARCADE_INSTALL = "pip install 'stoixlite[arcade]' && pip install --no-deps 'popgym-arcade==0.0.7'"
# the frame sides every game draws (their render tables are keyed by these)
OBS_SIZES = (128, 256)


@functools.cache
def arcade_class(game: str, difficulty: str) -> type:
    """The package's env class of ``game`` at ``difficulty`` (imports popgym-arcade), on gymnax
    >= 1.0's base class.

    popgym-arcade is written against gymnax 0.0.x's base class (as ``stable-gymnax`` ships it),
    where ``discount(state, params)`` is 0 when ``is_terminal`` holds. gymnax 1.0 renamed the
    hook that ``discount`` asks to ``is_terminated`` (its ``is_terminal`` calls that), so a game
    that defines ``is_terminal`` (CartPole, Breakout, Skittles, Tetris call ``self.discount`` in
    ``step_env``) gets a subclass whose ``is_terminated`` is its own ``is_terminal``: the 0.0.x
    semantics, checked step for step against popgym-arcade on stable-gymnax
    (docs/envs.md, "POPGym Arcade"). Nothing else of the base class is used by ``reset_env``
    and ``step_env``. Cached: one class per game and level.
    """
    gymnax = load_gymnax()
    module = importlib.import_module("popgym_arcade.environments")
    cls = getattr(module, ARCADE_GAMES[game] + difficulty.capitalize())
    base = gymnax.environments.environment.Environment
    if cls.is_terminal is base.is_terminal:
        return cls

    def is_terminated(self: Any, state: Any, params: Any) -> jax.Array:
        return cls.is_terminal(self, state, params)

    return type(cls.__name__, (cls,), {"is_terminated": is_terminated})


class ArcadeEnv(GymnaxStyleEnv):
    """A POPGym Arcade game as a stoixlite :class:`Environment` (see the module docstring).

    Args:
        game: a key of :data:`ARCADE_GAMES`.
        difficulty: ``easy``, ``medium`` or ``hard``.
        partial_obs: the POMDP (``True``) or its MDP twin (``False``).
        obs_size: the frame side, one of :data:`OBS_SIZES`.
    """

    def __init__(
        self,
        game: str,
        difficulty: str = "easy",
        partial_obs: bool = True,
        obs_size: int = 128,
    ):
        name = f"arcade/{game}"
        if difficulty not in DIFFICULTIES:
            raise ValueError(
                f"env.difficulty={difficulty!r} is not a level of {name}; allowed: "
                f"{list(DIFFICULTIES)}"
            )
        if not isinstance(partial_obs, bool):
            raise ValueError(f"env.kwargs.partial_obs must be true or false, got {partial_obs!r}")
        if isinstance(obs_size, bool) or obs_size not in OBS_SIZES:
            raise ValueError(
                f"env.kwargs.obs_size={obs_size!r} is not a frame size of {name}; allowed: "
                f"{list(OBS_SIZES)}"
            )
        functional = arcade_class(game, difficulty)(partial_obs=partial_obs, obs_size=obs_size)
        limit = getattr(functional, "max_steps_in_episode", None)
        if limit is None:
            limit = functional.max_episode_length
        longest = int(limit) + (game in DONE_ONE_STEP_LATE)
        super().__init__(functional, functional.default_params, name, longest, keep_images=True)
        self.game, self.partial_obs, self.obs_size = game, partial_obs, obs_size

    def terminated_truncated(
        self, env_state: Any, done: jax.Array, info: dict[str, Any]
    ) -> tuple[jax.Array, jax.Array]:
        """``done`` split by the game's own ``info``: terminated if ``info["terminated"]`` says
        so (and, for :data:`TIME_LIMIT_IN_TERMINATED`, ``info["truncated"]`` does not),
        truncated if the episode ended otherwise (its time limit)."""
        del env_state
        done = jnp.asarray(done, jnp.bool_)
        terminated = done & jnp.asarray(info["terminated"], jnp.bool_)
        if self.game in TIME_LIMIT_IN_TERMINATED:
            terminated &= ~jnp.asarray(info["truncated"], jnp.bool_)
        return terminated, done & ~terminated


for _game in ARCADE_GAMES:
    register_env(
        f"arcade/{_game}",
        difficulties=DIFFICULTIES,
        requires=("popgym_arcade", "dm_pix"),
        install=ARCADE_INSTALL,
    )(partial(ArcadeEnv, _game))
