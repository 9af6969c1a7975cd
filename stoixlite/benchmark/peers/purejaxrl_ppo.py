"""Feed-forward PPO on a gymnax task with PureJaxRL ``ppo.py``'s recipe: a benchmark reference.

PureJaxRL (Lu et al., "Discovered Policy Optimisation", NeurIPS 2022,
https://github.com/luchris429/purejaxrl) showed that PPO runs fastest when the environment, the
rollout, GAE and the updates are one compiled JAX program. This file is stoixlite's own
implementation of the PPO set-up that PureJaxRL's ``ppo.py`` runs on CartPole, so that the
benchmark tool (``python -m stoixlite.benchmark``) can time that set-up and stoixlite side by
side on one machine. It contains no PureJaxRL code; ``python -m stoixlite.benchmark
--purejaxrl-dir DIR`` times PureJaxRL's own files from a checkout instead.

The set-up (:class:`Settings` holds the hyper-parameters, ``ppo.py``'s defaults):

* **network**: actor and critic are separate MLPs of two hidden layers of 64 tanh units; kernels
  orthogonal with gain sqrt(2) in the hidden layers, 0.01 for the logits and 1 for the value;
  biases zero; a categorical policy over the logits;
* **one update**: a rollout of ``rollout_length`` steps in ``num_envs`` vmapped gymnax
  environments (gymnax's ``step`` resets a finished episode itself; an episode ends when it
  terminates or is truncated, and both stop the bootstrap); GAE(gamma, lambda) by a reverse
  ``lax.scan`` (unrolled 16 steps); then ``epochs`` passes over the batch, each a new random
  order of all ``rollout_length x num_envs`` transitions cut into ``minibatches`` equal parts;
* **loss** per minibatch: clipped surrogate on the minibatch's standardised advantages, plus
  ``vf_coef`` times half the larger of the plain and the clipped squared value error, minus
  ``ent_coef`` times the entropy;
* **optimiser**: gradients clipped to global norm 0.5, then Adam (eps 1e-5) whose learning
  rate falls linearly from ``lr`` towards 0, one step per update.

:func:`build` returns ``init(key) -> state`` and ``run_updates(state, n) -> (state, metrics)``
so that a benchmark times ``n`` updates at a time after compiling; ``purejaxrl_ppo_rnn.py``
beside it runs the same loop with a recurrent policy (:class:`Policy`).

Usage::

    python -m stoixlite.benchmark.peers.purejaxrl_ppo    # 4 envs, 5e5 steps: SPS, final return
    python -m stoixlite.benchmark.peers.purejaxrl_ppo --num-envs 64 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import orthogonal


@dataclasses.dataclass(frozen=True)
class Settings:
    """Hyper-parameters; the defaults are PureJaxRL ``ppo.py``'s for CartPole-v1."""

    env_name: str = "CartPole-v1"
    num_envs: int = 4
    rollout_length: int = 128
    total_timesteps: int = 500_000
    epochs: int = 4
    minibatches: int = 4
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    @property
    def num_updates(self) -> int:
        return int(self.total_timesteps) // (self.num_envs * self.rollout_length)


# --- categorical policy ---------------------------------------------------------------------


def log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    """log pi(action) under ``softmax(logits)``."""
    log_p = jax.nn.log_softmax(logits)
    return jnp.sum(log_p * jax.nn.one_hot(action, logits.shape[-1], dtype=log_p.dtype), axis=-1)


def entropy(logits: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


# --- the policy interface the loop runs -----------------------------------------------------


class Policy(NamedTuple):
    """What the PPO loop needs from a network.

    ``init(key, obs_dim, num_envs) -> (params, memory)``; ``act(params, memory, obs [N, F],
    first [N]) -> (memory, logits [N, A], value [N])`` for one rollout step (``first``: the
    step's observation starts an episode); ``evaluate(params, memory, obs, flags) -> (logits,
    value)`` on a minibatch. ``sequences``: minibatches are whole ``[T, n]`` environment
    sequences replayed from the memory the rollout started with (``obs [T, n, F]``); otherwise
    they are shuffled single transitions (``obs [b, F]``, ``memory`` and ``flags`` unused).
    """

    init: Callable
    act: Callable
    evaluate: Callable
    sequences: bool


class TwoTowers(nn.Module):
    """``obs [..., F] -> (logits [..., A], value [...])``: separate actor and critic MLPs."""

    num_actions: int
    width: int = 64
    depth: int = 2

    def tower(self, x: jax.Array, out: int, gain: float, name: str) -> jax.Array:
        for i in range(self.depth):
            dense = nn.Dense(self.width, kernel_init=orthogonal(math.sqrt(2)), name=f"{name}{i}")
            x = nn.tanh(dense(x))
        return nn.Dense(out, kernel_init=orthogonal(gain), name=f"{name}_out")(x)

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = self.tower(obs, self.num_actions, 0.01, "actor")
        value = self.tower(obs, 1, 1.0, "critic")
        return logits, value[..., 0]


def feedforward_policy(num_actions: int) -> Policy:
    net = TwoTowers(num_actions)

    def init(key, obs_dim, num_envs):
        return net.init(key, jnp.zeros((obs_dim,))), None

    def act(params, memory, obs, first):
        logits, value = net.apply(params, obs)
        return memory, logits, value

    def evaluate(params, memory, obs, flags):
        return net.apply(params, obs)

    return Policy(init, act, evaluate, sequences=False)


# --- the PPO loop ---------------------------------------------------------------------------


class Batch(NamedTuple):
    """One update's data, ``[T, N, ...]`` (flattened and shuffled for the minibatches)."""

    obs: jax.Array
    flags: jax.Array  # the step's observation starts an episode (the recurrent replay's resets)
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


class State(NamedTuple):
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array  # [N, F] the next observation
    first: jax.Array  # [N] it starts an episode
    memory: Any  # the policy's memory before that observation (None for feed-forward)
    running_return: jax.Array  # [N] of the episodes in progress
    key: jax.Array


def advantages(
    reward: jax.Array, value: jax.Array, done: jax.Array, bootstrap: jax.Array, s: Settings
) -> tuple[jax.Array, jax.Array]:
    """GAE over ``[T, N]``: ``(advantage, advantage + value)``."""

    def backwards(later, step):
        later_adv, later_value = later
        r, v, d = step
        keep = 1.0 - d
        delta = r + s.gamma * keep * later_value - v
        adv = delta + s.gamma * s.gae_lambda * keep * later_adv
        return (adv, v), adv

    start = (jnp.zeros_like(bootstrap), bootstrap)
    _, adv = jax.lax.scan(backwards, start, (reward, value, done), reverse=True, unroll=16)
    return adv, adv + value


def ppo_loss(logits: jax.Array, value: jax.Array, mb: Batch, s: Settings) -> jax.Array:
    """Clipped surrogate + ``vf_coef`` x clipped value loss - ``ent_coef`` x entropy."""
    ratio = jnp.exp(log_prob(logits, mb.action) - mb.log_prob)
    adv = (mb.advantage - mb.advantage.mean()) / (mb.advantage.std() + 1e-8)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - s.clip_eps, 1 + s.clip_eps) * adv)
    clipped_value = mb.value + jnp.clip(value - mb.value, -s.clip_eps, s.clip_eps)
    value_error = jnp.maximum(jnp.square(value - mb.target), jnp.square(clipped_value - mb.target))
    return (
        -surrogate.mean()
        + s.vf_coef * 0.5 * value_error.mean()
        - s.ent_coef * entropy(logits).mean()
    )


def optimiser(s: Settings) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam (eps 1e-5), its rate annealed per update."""
    steps_per_update = s.epochs * s.minibatches
    rate: Any = s.lr
    if s.anneal_lr:
        rate = lambda count: s.lr * (1.0 - (count // steps_per_update) / s.num_updates)
    return optax.chain(optax.clip_by_global_norm(s.max_grad_norm), optax.adam(rate, eps=1e-5))


def build(s: Settings, make_policy: Callable[[int], Policy] = feedforward_policy):
    """``(init, run_updates)`` of a PPO run with settings ``s``.

    ``init(key) -> State``; ``run_updates(state, n) -> (state, metrics)``, ``n`` updates in
    one ``lax.scan``, with ``metrics["episode_return"]`` and ``metrics["episode_done"]``
    ``[n, T, N]``: the return of each episode that ended at a step, and where one did.
    """
    import gymnax  # here, not at import: gymnax starts a JAX backend when imported

    env, env_params = gymnax.make(s.env_name)
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    policy = make_policy(env.action_space(env_params).n)
    tx = optimiser(s)
    n, t, m = s.num_envs, s.rollout_length, s.minibatches
    if n * t % m or (policy.sequences and n % m):
        raise ValueError(f"{n} envs x {t} steps do not split into {m} minibatches")
    env_reset = jax.vmap(env.reset, in_axes=(0, None))
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key: jax.Array) -> State:
        k_net, k_env, key = jax.random.split(key, 3)
        params, memory = policy.init(k_net, obs_dim, n)
        obs, env_state = env_reset(jax.random.split(k_env, n), env_params)
        return State(
            params=params,
            opt_state=tx.init(params),
            env_state=env_state,
            obs=obs.reshape(n, obs_dim),
            first=jnp.zeros(n, bool),
            memory=memory,
            running_return=jnp.zeros(n),
            key=key,
        )

    def rollout_step(st: State, _):
        key, k_act, k_env = jax.random.split(st.key, 3)
        memory, logits, value = policy.act(st.params, st.memory, st.obs, st.first)
        action = jax.random.categorical(k_act, logits)
        obs, env_state, reward, terminated, truncated, _ = env_step(
            jax.random.split(k_env, n), st.env_state, action, env_params
        )
        done = terminated | truncated
        ended = st.running_return + reward
        record = {
            "obs": st.obs,
            "flags": st.first,
            "done": done,
            "action": action,
            "log_prob": log_prob(logits, action),
            "value": value,
            "reward": reward,
            "episode_return": jnp.where(done, ended, 0.0),
        }
        st = st._replace(
            env_state=env_state,
            obs=obs.reshape(n, obs_dim),
            first=done,
            memory=memory,
            running_return=jnp.where(done, 0.0, ended),
            key=key,
        )
        return st, record

    def minibatch_step(carry, mb: tuple[Any, Batch]):
        params, opt_state = carry
        memory, data = mb

        def loss(p):
            logits, value = policy.evaluate(p, memory, data.obs, data.flags)
            return ppo_loss(logits, value, data, s)

        grads = jax.grad(loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def shuffled(memory, batch: Batch, key: jax.Array):
        """``[m, ...]`` minibatches: whole env sequences, or single transitions."""
        if policy.sequences:
            order = jax.random.permutation(key, n)
            split = lambda x: jnp.swapaxes(x[:, order].reshape(t, m, n // m, *x.shape[2:]), 0, 1)
            part = lambda x: x[order].reshape(m, n // m, *x.shape[1:])
            return jax.tree.map(part, memory), jax.tree.map(split, batch)
        order = jax.random.permutation(key, n * t)
        split = lambda x: x.reshape(n * t, *x.shape[2:])[order].reshape(m, -1, *x.shape[2:])
        return None, jax.tree.map(split, batch)

    def update(st: State, _):
        memory0 = st.memory
        st, rec = jax.lax.scan(rollout_step, st, None, t)
        _, _, bootstrap = policy.act(st.params, st.memory, st.obs, st.first)
        adv, target = advantages(rec["reward"], rec["value"], rec["done"], bootstrap, s)
        batch = Batch(
            rec["obs"], rec["flags"], rec["action"], rec["log_prob"], rec["value"], adv, target
        )

        def epoch(carry, key):
            return jax.lax.scan(minibatch_step, carry, shuffled(memory0, batch, key))[0], None

        key, k_epochs = jax.random.split(st.key)
        (params, opt_state), _ = jax.lax.scan(
            epoch, (st.params, st.opt_state), jax.random.split(k_epochs, s.epochs)
        )
        st = st._replace(params=params, opt_state=opt_state, key=key)
        return st, {"episode_return": rec["episode_return"], "episode_done": rec["done"]}

    def run_updates(st: State, num_updates: int):
        return jax.lax.scan(update, st, None, num_updates)

    return init, run_updates


def final_return(metrics: dict[str, Any], last: int | None = None) -> float:
    """Mean return of the episodes that ended in the last ``last`` updates (all if None)."""
    done = np.asarray(metrics["episode_done"])[-last if last else None :]
    returns = np.asarray(metrics["episode_return"])[-last if last else None :]
    return float(returns[done].mean()) if done.any() else float("nan")


def main(description: str, name: str, make_policy: Callable[[int], Policy]) -> None:
    """Command line of this script and ``purejaxrl_ppo_rnn.py``: one run of
    ``--timesteps`` steps; prints env steps/s (compile excluded) and the mean return of the
    episodes of the last 5 updates."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--num-envs", type=int, default=Settings.num_envs)
    parser.add_argument("--timesteps", type=float, default=Settings.total_timesteps)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    s = Settings(num_envs=args.num_envs, total_timesteps=int(args.timesteps))
    init, run_updates = build(s, make_policy)
    key = jax.random.PRNGKey(args.seed)
    tic = time.perf_counter()
    train = jax.jit(lambda k: run_updates(init(k), s.num_updates)).lower(key).compile()
    compiled_s = time.perf_counter() - tic
    tic = time.perf_counter()
    _, metrics = jax.block_until_ready(train(key))
    seconds = time.perf_counter() - tic
    steps = s.num_updates * s.num_envs * s.rollout_length
    print(
        f"{name} {s.num_envs} envs: {steps / seconds:,.0f} steps/s (compile {compiled_s:.1f} s), "
        f"final return {final_return(metrics, 5):.1f}"
    )


if __name__ == "__main__":
    main(__doc__.splitlines()[0], "ppo", feedforward_policy)
