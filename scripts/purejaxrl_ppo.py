"""PureJaxRL ``ppo.py`` (feed-forward PPO on gymnax), re-implemented as a benchmark reference.

A faithful copy of the default loop of PureJaxRL's single-file ``purejaxrl/ppo.py`` (Lu et al.,
2022, https://github.com/luchris429/purejaxrl), so that ``scripts/benchmark.py`` can time it
side by side with stoixlite in one run on one machine. What is kept exactly:

* the network: separate actor and critic MLPs, 2 x 64 tanh each, orthogonal(sqrt 2) hidden
  kernels, orthogonal(0.01) policy head, orthogonal(1) value head, zero biases;
* the loop: ``lax.scan`` over updates; per update a ``lax.scan`` rollout of ``NUM_STEPS`` steps
  (one network call and one vmapped gymnax ``env.step``, which auto-resets, per step), one
  value call on the last observation, GAE as a reverse scan (``unroll=16``), then
  ``UPDATE_EPOCHS`` epochs, each one permutation of all ``NUM_STEPS x NUM_ENVS`` transitions
  split into ``NUM_MINIBATCHES`` minibatches; clipped surrogate, clipped value loss, entropy
  bonus, per-minibatch advantage normalisation; Adam (eps 1e-5) after global-norm clipping
  (0.5) with the learning rate annealed linearly per update;
* the wrappers: ``FlattenObservationWrapper`` and ``LogWrapper`` (episode returns/lengths).
  gymnax >= 1.0 returns ``terminated`` and ``truncated`` apart; ``done`` is their ``or``, which
  is what the gymnax ppo.py was written against returned.

What differs: ``distrax.Categorical`` is replaced by the same arithmetic written out
(``jax.random.categorical`` sampling, ``log_softmax`` log-probs, ``-sum p log p`` entropy)
because distrax is not a dependency; and :func:`make_train` can run a given number of updates
from a given runner state (``make_train(config)(rng)`` is PureJaxRL's ``train(rng)``), so the
benchmark can time steady-state chunks excluding compilation like it does for stoixlite.

Usage::

    python scripts/purejaxrl_ppo.py                  # PureJaxRL defaults: 4 envs, 5e5 steps
    python scripts/purejaxrl_ppo.py --num-envs 64    # prints SPS (compile excluded) and return
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState

DEFAULT_CONFIG: dict[str, Any] = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}


class Categorical(NamedTuple):
    """``distrax.Categorical(logits)``: the three methods ppo.py uses."""

    logits: jax.Array

    def sample(self, seed: jax.Array) -> jax.Array:
        return jax.random.categorical(seed, self.logits, axis=-1)

    def log_prob(self, value: jax.Array) -> jax.Array:
        log_probs = jax.nn.log_softmax(self.logits, axis=-1)
        one_hot = jax.nn.one_hot(value, self.logits.shape[-1], dtype=log_probs.dtype)
        return jnp.sum(log_probs * one_hot, axis=-1)

    def entropy(self) -> jax.Array:
        log_probs = jax.nn.log_softmax(self.logits, axis=-1)
        return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


class ActorCritic(nn.Module):
    """``obs [..., F] -> (pi, value [...])``: two separate 2 x 64 MLPs."""

    action_dim: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[Categorical, jax.Array]:
        activation = nn.relu if self.activation == "relu" else nn.tanh
        actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
        actor_mean = activation(actor_mean)
        actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(
            actor_mean
        )
        actor_mean = activation(actor_mean)
        actor_mean = nn.Dense(
            self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0)
        )(actor_mean)
        pi = Categorical(logits=actor_mean)

        critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
        critic = activation(critic)
        critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(critic)
        critic = activation(critic)
        critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
        return pi, jnp.squeeze(critic, axis=-1)


class LogEnvState(NamedTuple):
    """PureJaxRL ``wrappers.LogEnvState``."""

    env_state: Any
    episode_returns: jax.Array
    episode_lengths: jax.Array
    returned_episode_returns: jax.Array
    returned_episode_lengths: jax.Array
    timestep: jax.Array


class LogWrapper:
    """PureJaxRL ``FlattenObservationWrapper`` + ``LogWrapper`` around a gymnax env."""

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, LogEnvState]:
        obs, env_state = self._env.reset(key, params)
        obs = jnp.reshape(obs, (-1,))
        state = LogEnvState(env_state, 0.0, 0, 0.0, 0, 0)
        return obs, state

    def step(
        self, key: jax.Array, state: LogEnvState, action: jax.Array, params: Any
    ) -> tuple[jax.Array, LogEnvState, jax.Array, jax.Array, dict[str, jax.Array]]:
        # gymnax >= 1.0 returns terminated and truncated apart; ppo.py's gymnax returned done.
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        done = jnp.logical_or(terminated, truncated)
        obs = jnp.reshape(obs, (-1,))
        new_episode_return = state.episode_returns + reward
        new_episode_length = state.episode_lengths + 1
        state = LogEnvState(
            env_state=env_state,
            episode_returns=new_episode_return * (1 - done),
            episode_lengths=new_episode_length * (1 - done),
            returned_episode_returns=state.returned_episode_returns * (1 - done)
            + new_episode_return * done,
            returned_episode_lengths=state.returned_episode_lengths * (1 - done)
            + new_episode_length * done,
            timestep=state.timestep + 1,
        )
        info["returned_episode_returns"] = state.returned_episode_returns
        info["returned_episode_lengths"] = state.returned_episode_lengths
        info["timestep"] = state.timestep
        info["returned_episode"] = done
        return obs, state, reward, done, info


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    info: Any


def make_optimizer(config: dict) -> optax.GradientTransformation:
    """PureJaxRL's optimiser (shared with ``purejaxrl_ppo_rnn.py``): global-norm clipping, then
    Adam (eps 1e-5) with, if ``ANNEAL_LR``, the learning rate decayed linearly per update
    (``LR * (1 - (count // (NUM_MINIBATCHES * UPDATE_EPOCHS)) / NUM_UPDATES)``)."""

    def linear_schedule(count: jax.Array) -> jax.Array:
        frac = (
            1.0
            - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"]))
            / config["NUM_UPDATES"]
        )
        return config["LR"] * frac

    lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
    return optax.chain(
        optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.adam(learning_rate=lr, eps=1e-5)
    )


def calculate_gae(
    traj_batch: Transition, last_val: jax.Array, config: dict
) -> tuple[jax.Array, jax.Array]:
    """PureJaxRL's ``_calculate_gae`` (shared with ``purejaxrl_ppo_rnn.py``): a reverse scan
    (``unroll=16``) of ``delta = r + gamma * V' * (1 - done) - V``, ``gae = delta + gamma *
    lambda * (1 - done) * gae`` over ``[T, N]``; returns ``(advantages, advantages + values)``."""

    def _get_advantages(gae_and_next_value: tuple, transition: Transition):
        gae, next_value = gae_and_next_value
        done, value, reward = transition.done, transition.value, transition.reward
        delta = reward + config["GAMMA"] * next_value * (1 - done) - value
        gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
        return (gae, value), gae

    _, advantages = jax.lax.scan(
        _get_advantages,
        (jnp.zeros_like(last_val), last_val),
        traj_batch,
        reverse=True,
        unroll=16,
    )
    return advantages, advantages + traj_batch.value


def ppo_loss(
    pi: Categorical,
    value: jax.Array,
    traj_batch: Transition,
    gae: jax.Array,
    targets: jax.Array,
    config: dict,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """PureJaxRL's ``_loss_fn`` after its network call (shared with ``purejaxrl_ppo_rnn.py``):
    value loss clipped around the old value by ``CLIP_EPS`` (half the larger squared error),
    per-minibatch normalised advantages, clipped surrogate, entropy bonus. Returns ``(total,
    (value_loss, actor_loss, entropy))``."""
    log_prob = pi.log_prob(traj_batch.action)

    # CALCULATE VALUE LOSS
    value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
        -config["CLIP_EPS"], config["CLIP_EPS"]
    )
    value_losses = jnp.square(value - targets)
    value_losses_clipped = jnp.square(value_pred_clipped - targets)
    value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()

    # CALCULATE ACTOR LOSS
    ratio = jnp.exp(log_prob - traj_batch.log_prob)
    gae = (gae - gae.mean()) / (gae.std() + 1e-8)
    loss_actor1 = ratio * gae
    loss_actor2 = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
    loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
    entropy = pi.entropy().mean()

    total_loss = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
    return total_loss, (value_loss, loss_actor, entropy)


def make_setup(config: dict[str, Any]) -> tuple[dict[str, Any], LogWrapper, Any]:
    """The start of PureJaxRL's ``make_train`` (shared with ``purejaxrl_ppo_rnn.py``): a copy of
    ``config`` with ``NUM_UPDATES`` and ``MINIBATCH_SIZE`` derived, and the logged gymnax env
    ``(env, env_params)``."""
    config = dict(config)
    config["NUM_UPDATES"] = int(
        config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    )
    config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    env, env_params = gymnax.make(config["ENV_NAME"])
    return config, LogWrapper(env), env_params


def make_runner(init: Callable, update_step: Callable, config: dict[str, Any]) -> tuple:
    """The end of PureJaxRL's ``make_train`` (shared with ``purejaxrl_ppo_rnn.py``):
    ``(train, init, run_updates)`` with ``run_updates(runner_state, n)`` a ``lax.scan`` of ``n``
    update steps and ``train(rng)`` the whole run of ``NUM_UPDATES`` updates."""

    def run_updates(runner_state: tuple, num_updates: int) -> tuple[tuple, Any]:
        return jax.lax.scan(update_step, runner_state, None, num_updates)

    def train(rng: jax.Array) -> dict[str, Any]:
        runner_state, metric = run_updates(init(rng), config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metric}

    return train, init, run_updates


def make_train(config: dict[str, Any]):
    """PureJaxRL's ``make_train``; returns ``train(rng)`` plus the pieces to run chunks.

    Returns ``(train, init, run_updates)``: ``train(rng)`` is ppo.py's whole run;
    ``init(rng) -> runner_state`` and ``run_updates(runner_state, n) -> (runner_state, metric)``
    split it so a benchmark can time ``n`` updates at a time (same code, same arithmetic).
    """
    config, env, env_params = make_setup(config)
    network = ActorCritic(env.action_space(env_params).n, activation=config["ACTIVATION"])

    def init(rng: jax.Array) -> tuple:
        rng, _rng = jax.random.split(rng)
        init_x = jnp.zeros(env.observation_space(env_params).shape)
        network_params = network.init(_rng, init_x)
        train_state = TrainState.create(
            apply_fn=network.apply, params=network_params, tx=make_optimizer(config)
        )
        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)
        rng, _rng = jax.random.split(rng)
        return (train_state, env_state, obsv, _rng)

    def _update_step(runner_state: tuple, unused: None) -> tuple[tuple, Any]:
        # COLLECT TRAJECTORIES
        def _env_step(runner_state: tuple, unused: None) -> tuple[tuple, Transition]:
            train_state, env_state, last_obs, rng = runner_state
            rng, _rng = jax.random.split(rng)
            pi, value = network.apply(train_state.params, last_obs)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)
            rng, _rng = jax.random.split(rng)
            rng_step = jax.random.split(_rng, config["NUM_ENVS"])
            obsv, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                rng_step, env_state, action, env_params
            )
            transition = Transition(done, action, value, reward, log_prob, last_obs, info)
            runner_state = (train_state, env_state, obsv, rng)
            return runner_state, transition

        runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])

        # CALCULATE ADVANTAGE
        train_state, env_state, last_obs, rng = runner_state
        _, last_val = network.apply(train_state.params, last_obs)

        advantages, targets = calculate_gae(traj_batch, last_val, config)

        # UPDATE NETWORK
        def _update_epoch(update_state: tuple, unused: None) -> tuple[tuple, Any]:
            def _update_minbatch(train_state: TrainState, batch_info: tuple):
                traj_batch, advantages, targets = batch_info

                def _loss_fn(params, traj_batch, gae, targets):
                    # RERUN NETWORK
                    pi, value = network.apply(params, traj_batch.obs)
                    return ppo_loss(pi, value, traj_batch, gae, targets, config)

                grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                total_loss, grads = grad_fn(train_state.params, traj_batch, advantages, targets)
                train_state = train_state.apply_gradients(grads=grads)
                return train_state, total_loss

            train_state, traj_batch, advantages, targets, rng = update_state
            rng, _rng = jax.random.split(rng)
            batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
            assert batch_size == config["NUM_STEPS"] * config["NUM_ENVS"], (
                "batch size must be equal to number of steps * number of envs"
            )
            permutation = jax.random.permutation(_rng, batch_size)
            batch = (traj_batch, advantages, targets)
            batch = jax.tree_util.tree_map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
            shuffled_batch = jax.tree_util.tree_map(
                lambda x: jnp.take(x, permutation, axis=0), batch
            )
            minibatches = jax.tree_util.tree_map(
                lambda x: jnp.reshape(x, [config["NUM_MINIBATCHES"], -1] + list(x.shape[1:])),
                shuffled_batch,
            )
            train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
            update_state = (train_state, traj_batch, advantages, targets, rng)
            return update_state, total_loss

        update_state = (train_state, traj_batch, advantages, targets, rng)
        update_state, loss_info = jax.lax.scan(
            _update_epoch, update_state, None, config["UPDATE_EPOCHS"]
        )
        train_state = update_state[0]
        metric = traj_batch.info
        rng = update_state[-1]
        runner_state = (train_state, env_state, last_obs, rng)
        return runner_state, metric

    return make_runner(init, _update_step, config)


def mean_final_return(metric: dict[str, jax.Array], last_updates: int = 5) -> float:
    """Mean return of the episodes that ended in the last ``last_updates`` updates."""
    done = np.asarray(metric["returned_episode"][-last_updates:])
    returns = np.asarray(metric["returned_episode_returns"][-last_updates:])
    return float(returns[done].mean()) if done.any() else float("nan")


def run_cli(description: str, default_config: dict[str, Any], make_train, name: str) -> None:
    """The command line of this script and of ``purejaxrl_ppo_rnn.py``: train once with
    ``--num-envs`` and ``--timesteps``, print SPS (compile excluded) and the final return."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--num-envs", type=int, default=default_config["NUM_ENVS"])
    parser.add_argument("--timesteps", type=float, default=default_config["TOTAL_TIMESTEPS"])
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    config = {**default_config, "NUM_ENVS": args.num_envs, "TOTAL_TIMESTEPS": args.timesteps}
    train, _, _ = make_train(config)
    rng = jax.random.PRNGKey(args.seed)
    tic = time.perf_counter()
    compiled = jax.jit(train).lower(rng).compile()
    compile_s = time.perf_counter() - tic
    tic = time.perf_counter()
    out = jax.block_until_ready(compiled(rng))
    seconds = time.perf_counter() - tic
    steps = int(args.timesteps // (config["NUM_STEPS"] * args.num_envs)) * config["NUM_STEPS"]
    steps *= args.num_envs
    print(
        f"{name} {args.num_envs} envs: {steps / seconds:,.0f} steps/s (compile {compile_s:.1f} s), "
        f"final return {mean_final_return(out['metrics']):.1f}"
    )


if __name__ == "__main__":
    run_cli(__doc__.splitlines()[0], DEFAULT_CONFIG, make_train, "ppo.py")
