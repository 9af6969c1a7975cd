"""The uniformly random policy's mean episodic return on an env (the tables' "random" column).

Each of ``episodes`` vmapped copies of the env plays exactly one episode with actions drawn
uniformly from the action space (a discrete choice, or uniform in a box), through the same
wrapper stack training uses (no observation augmentation: the policy ignores observations).
:func:`random_episodes` also keeps the env's own episode statistics (``extras
["episode_metrics"]``, e.g. Craftax's achievements) of each episode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs import make, make_batched_env
from stoixlite.envs.types import EPISODE_METRICS
from stoixlite.specs import Discrete, Space


def uniform_actions(space: Space, key: jax.Array, num_envs: int) -> jax.Array:
    """``[num_envs]`` uniform discrete actions, or ``[num_envs, *shape]`` uniform in the box."""
    if isinstance(space, Discrete):
        return jax.random.randint(key, (num_envs, *space.shape), 0, space.n)
    low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), space.shape)
    high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), space.shape)
    return jax.random.uniform(key, (num_envs, *space.shape), minval=low, maxval=high)


def random_returns(
    name: str, difficulty: str | None, episodes: int = 512, seed: int = 0, max_steps: int = 10_000
) -> np.ndarray:
    """``[episodes]`` returns of one random-policy episode per env copy (an episode still
    running after ``max_steps`` steps counts as 0)."""
    return random_episodes(name, difficulty, episodes, seed, max_steps)["return"]


def random_episodes(
    name: str,
    difficulty: str | None,
    episodes: int = 512,
    seed: int = 0,
    max_steps: int = 10_000,
    **kwargs: object,
) -> dict[str, np.ndarray]:
    """``{"return": [episodes], <metric>: [episodes], ...}``: the return and the env's episode
    statistics (if it has any) of one random-policy episode per env copy (an episode still
    running after ``max_steps`` steps counts as 0). ``kwargs`` go to the env's factory."""
    if difficulty is not None:
        kwargs["difficulty"] = difficulty
    env = make_batched_env(make(name, **kwargs), episodes, obs_augment=False)

    def values(timestep) -> dict[str, jax.Array]:
        return {
            "return": timestep.extras["episode_return"],
            **timestep.extras.get(EPISODE_METRICS, {}),
        }

    @jax.jit
    def play(key: jax.Array) -> dict[str, jax.Array]:
        key, reset_key = jax.random.split(key)
        state, timestep = env.reset(reset_key)
        done = jnp.zeros((episodes,), bool)
        kept = jax.tree.map(jnp.zeros_like, values(timestep))

        def cond(loop):
            return (~loop[3].all()) & (loop[5] < max_steps)

        def body(loop):
            state, timestep, key, done, kept, step = loop
            key, sub = jax.random.split(key)
            state, timestep = env.step(state, uniform_actions(env.action_space, sub, episodes))
            finished = timestep.last() & ~done
            now = values(timestep)
            kept = jax.tree.map(lambda new, old: jnp.where(finished, new, old), now, kept)
            return state, timestep, key, done | finished, kept, step + 1

        loop = jax.lax.while_loop(cond, body, (state, timestep, key, done, kept, jnp.asarray(0)))
        return loop[4]

    return {k: np.asarray(v, np.float64) for k, v in play(jax.random.PRNGKey(seed)).items()}
