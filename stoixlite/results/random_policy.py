"""The uniformly random policy's mean episodic return on an env (the tables' "random" column).

Each of ``episodes`` vmapped copies of the env plays exactly one episode with actions drawn
uniformly from the action space (a discrete choice, or uniform in a box), through the same
wrapper stack training uses (no observation augmentation: the policy ignores observations).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs import make, make_batched_env
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
    """``[episodes]`` returns of one random-policy episode per env copy (an episode cut at
    ``max_steps`` counts with its return so far)."""
    kwargs = {} if difficulty is None else {"difficulty": difficulty}
    env = make_batched_env(make(name, **kwargs), episodes, obs_augment=False)

    @jax.jit
    def play(key: jax.Array) -> jax.Array:
        key, reset_key = jax.random.split(key)
        state, timestep = env.reset(reset_key)
        zeros = jnp.zeros((episodes,), jnp.float32)
        done = jnp.zeros((episodes,), bool)

        def cond(loop):
            return (~loop[3].all()) & (loop[5] < max_steps)

        def body(loop):
            state, timestep, key, done, ret, step = loop
            key, sub = jax.random.split(key)
            state, timestep = env.step(state, uniform_actions(env.action_space, sub, episodes))
            finished = timestep.last() & ~done
            ret = jnp.where(finished, timestep.extras["episode_return"], ret)
            return state, timestep, key, done | finished, ret, step + 1

        loop = jax.lax.while_loop(cond, body, (state, timestep, key, done, zeros, jnp.asarray(0)))
        return loop[4]

    return np.asarray(play(jax.random.PRNGKey(seed)), np.float64)
