"""Replay a gymnax-style adapter against the wrapped env's own ``step_env`` (shared by the
Craftax and POPGym Arcade adapter tests)."""

from __future__ import annotations

import jax

from stoixlite.envs import wrap_env


def replay_against_step_env(raw, actions: jax.Array, seed: int = 0):
    """``actions [T]`` through the adapter ``raw`` (wrapped: auto-reset, episode stats) and, at
    every step, through the wrapped env's own ``step_env`` from the adapter's state with the
    adapter's step key. Returns ``(first timestep, (timesteps [T], obs, reward, done, info))``,
    the second group as the env's own ``step_env`` gave them."""
    env = wrap_env(raw, obs_augment=False)
    functional, params = raw._env, raw.params

    @jax.jit
    def run():
        state, ts = env.reset(jax.random.PRNGKey(seed))
        inner = state.env_state.env_state  # EpisodeStats -> AutoReset -> adapter state

        def body(carry, action):
            state, inner = carry
            step_key = jax.random.split(inner.key)[1]
            obs, _, reward, done, info = functional.step_env(
                step_key, inner.env_state, action, params
            )
            state, ts = env.step(state, action)
            inner = state.env_state.env_state
            return (state, inner), (ts, obs, reward, done, info)

        return ts, jax.lax.scan(body, (state, inner), actions)[1]

    return run()
