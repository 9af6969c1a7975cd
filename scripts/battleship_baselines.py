#!/usr/bin/env python
"""Scripted policies on popgym/battleship and the advantage signal that teaches "do not repeat a
shot": the measurements behind docs/learning.md, section 6.

1. Mean return (and its standard error) of scripted policies on the JAX port, one episode per
   board, ``--episodes`` boards:

   * ``random``: uniform over the B*B cells (what the PPO agents start from);
   * ``random_no_repeat``: uniform over the cells not fired at yet: the agent that remembers its
     own shots and nothing else (no use of the hits);
   * ``sweep``: the cell after the previous one (row-major); memoryless given the previous action,
     which the training input holds (``env.obs_augment``);
   * ``hunt_target``: a free neighbour of a hit cell when there is one, else a random free cell.

2. Under the random policy, the GAE advantage (``system.gamma``, each ``--lambdas`` value, a
   critic that knows only the step number: the mean discounted return-to-go at that step) of a
   fresh shot minus that of a repeated shot, over the advantage's standard deviation: the
   signal-to-noise ratio of the credit a policy gradient gets for not repeating (from step 10 on).

    python scripts/battleship_baselines.py [--difficulty easy] [--episodes 20000]

Prints one JSON object per line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.cli.args import OneLineArgumentParser  # noqa: E402
from stoixlite.envs.popgym.battleship import Battleship, BattleshipState  # noqa: E402
from stoixlite.envs.registry import make  # noqa: E402
from stoixlite.ppo.gae import gae_advantages  # noqa: E402

# policy(state, previous action (-1 at the first step), key) -> action
Policy = Callable[[BattleshipState, jax.Array, jax.Array], jax.Array]


def _pick(key: jax.Array, allowed: jax.Array) -> jax.Array:
    """A uniform draw among the True cells of ``allowed`` (bool ``[B, B]``), flattened index."""
    return jax.random.categorical(key, jnp.where(allowed.reshape(-1), 0.0, -jnp.inf))


def policies(env: Battleship) -> dict[str, Policy]:
    cells = env.board_size**2

    def random(state, prev, key):
        return jax.random.randint(key, (), 0, cells)

    def random_no_repeat(state, prev, key):
        return _pick(key, ~state.guesses)

    def sweep(state, prev, key):
        return (prev + 1) % cells

    def hunt_target(state, prev, key):
        hit = state.board & state.guesses
        near = jnp.zeros_like(hit)
        near = near.at[1:].set(near[1:] | hit[:-1]).at[:-1].set(near[:-1] | hit[1:])
        near = (
            near.at[:, 1:].set(near[:, 1:] | hit[:, :-1]).at[:, :-1].set(near[:, :-1] | hit[:, 1:])
        )
        free = ~state.guesses
        targets = near & free
        return _pick(key, jnp.where(targets.any(), targets, free))

    return {
        "random": random,
        "random_no_repeat": random_no_repeat,
        "sweep": sweep,
        "hunt_target": hunt_target,
    }


def play(env: Battleship, policy: Policy, key: jax.Array, episodes: int) -> dict[str, np.ndarray]:
    """``episodes`` episodes of ``policy``. Returns ``reward``, ``repeat`` (the shot's cell was
    fired at before) and ``live`` (the step is in the episode), each ``[episodes, B*B]``."""
    length = env.max_episode_length

    def one(key: jax.Array):
        reset_key, steps_key = jax.random.split(key)
        state, _ = env.reset(reset_key)

        def step(carry, k):
            state, done, prev = carry
            action = policy(state, prev, k).astype(jnp.int32)
            repeat = state.guesses.reshape(-1)[action]
            state, ts = env.step(state, action)
            out = (jnp.where(done, 0.0, ts.reward), repeat, ~done)
            return (state, done | ts.last(), action), out

        init = (state, jnp.bool_(False), jnp.int32(-1))
        return jax.lax.scan(step, init, jax.random.split(steps_key, length))[1]

    reward, repeat, live = jax.jit(jax.vmap(one))(jax.random.split(key, episodes))
    return {"reward": np.asarray(reward), "repeat": np.asarray(repeat), "live": np.asarray(live)}


def repeat_signal(data: dict[str, np.ndarray], gamma: float, lam: float) -> dict[str, float]:
    """GAE advantages of ``data`` (:func:`stoixlite.ppo.gae.gae_advantages`; the critic: the mean
    discounted return-to-go at each step); fresh-minus-repeat advantage gap and its ratio to the
    advantage's standard deviation, over the live steps from step 10 on."""
    reward, repeat, live = data["reward"], data["repeat"], data["live"]
    # time-major [L, N]; a step's transition continues the episode iff the next step is live
    r = jnp.asarray(reward.T, jnp.float32)
    going_on = np.zeros_like(live.T, dtype=np.float32)
    going_on[:-1] = live.T[1:]
    going_on = jnp.asarray(going_on)
    zeros = jnp.zeros_like(r)
    # discounted returns-to-go: GAE with lambda 1 against a zero critic
    ret, _ = gae_advantages(r, going_on, zeros, zeros, zeros, gamma, 1.0)
    ret = np.asarray(ret)
    value = np.array([ret[t][on].mean() if on.any() else 0.0 for t, on in enumerate(live.T)])
    next_value = np.append(value[1:], 0.0)
    value_b = jnp.broadcast_to(jnp.asarray(value, jnp.float32)[:, None], r.shape)
    next_b = jnp.broadcast_to(jnp.asarray(next_value, jnp.float32)[:, None], r.shape)
    adv, _ = gae_advantages(r, going_on, zeros, value_b, next_b, gamma, lam)
    adv = np.asarray(adv, np.float64).T
    sel = live & (np.arange(live.shape[1]) >= 10)
    gap = adv[sel & ~repeat].mean() - adv[sel & repeat].mean()
    std = adv[sel].std()
    return {
        "gae_lambda": lam,
        "fresh_minus_repeat": gap,
        "adv_std": std,
        "signal_to_noise": gap / std,
    }


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--difficulty", choices=("easy", "medium", "hard"), default="easy")
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.95, 0.8, 0.5, 0.0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error("--episodes must be at least 2")
    if not 0.0 < args.gamma <= 1.0 or not all(0.0 <= x <= 1.0 for x in args.lambdas):
        parser.error("--gamma must be in (0, 1] and every --lambdas value in [0, 1]")
    env = make("popgym/battleship", difficulty=args.difficulty)
    key = jax.random.PRNGKey(args.seed)
    label = {"env": "popgym/battleship", "difficulty": args.difficulty}
    for i, (name, policy) in enumerate(policies(env).items()):
        data = play(env, policy, jax.random.fold_in(key, i), args.episodes)
        ret = (data["reward"] * data["live"]).sum(1)
        shots = data["live"].sum()
        row = {
            **label,
            "policy": name,
            "return": round(float(ret.mean()), 4),
            "return_se": round(float(ret.std() / np.sqrt(len(ret))), 4),
            "repeat_fraction": round(float((data["repeat"] & data["live"]).sum() / shots), 4),
        }
        print(json.dumps(row), flush=True)
        if name == "random":
            for lam in args.lambdas:
                signal = repeat_signal(data, args.gamma, lam)
                print(
                    json.dumps(
                        {
                            **label,
                            "policy": name,
                            "measure": "repeat_signal",
                            **{k: round(float(v), 4) for k, v in signal.items()},
                        }
                    ),
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
