"""PureJaxRL ``ppo_rnn.py`` (recurrent GRU PPO on gymnax), re-implemented as a benchmark reference.

A faithful copy of the default loop of PureJaxRL's single-file ``purejaxrl/ppo_rnn.py`` (Lu et
al., 2022, https://github.com/luchris429/purejaxrl), so that ``scripts/benchmark.py`` can time it
side by side with stoixlite's recurrent networks in one run on one machine. What is kept exactly:

* the network ``ActorCriticRNN``: Dense 128 (orthogonal(sqrt 2)) + relu embedding; a flax
  ``GRUCell`` of 128 features scanned over time with ``nn.scan`` (parameters broadcast), its
  carry reset to zeros before the cell where the step's reset flag is set; actor Dense 128
  (orthogonal(2)) + relu -> Dense ``num_actions`` (orthogonal(0.01)); critic Dense 128
  (orthogonal(2)) + relu -> Dense 1 (orthogonal(1)); zero biases. Input ``(obs [T, N, F],
  dones [T, N])`` and carry ``[N, 128]``, zeros at the start;
* the loop: ``lax.scan`` over updates; per update a ``lax.scan`` rollout of ``NUM_STEPS`` steps
  (one network call on ``(last_obs[None], last_done[None])`` and one vmapped gymnax
  ``env.step``, which auto-resets, per step); the last value from the final carry, zeroed where
  the last step ended an episode; GAE as a reverse scan (``unroll=16``); then ``UPDATE_EPOCHS``
  epochs, each one permutation of the ``NUM_ENVS`` environments split into ``NUM_MINIBATCHES``
  minibatches of whole ``NUM_STEPS``-step sequences, replayed from the carry the rollout started
  from; clipped surrogate, clipped value loss, entropy bonus, per-minibatch advantage
  normalisation; Adam (eps 1e-5) after global-norm clipping (0.5) with the learning rate
  annealed linearly per update;
* the stored reset flags: a transition stores the ``done`` its step returned, and the loss
  replays the GRU with those flags. The rollout resets the carry with the flag of the step
  before (``last_done``), so the replay resets one step earlier than the rollout did at every
  episode boundary; ppo_rnn.py does this, so the reference does too;
* the wrappers: ``FlattenObservationWrapper`` and ``LogWrapper``, imported from
  ``scripts/purejaxrl_ppo.py`` (with its ``Transition`` and distrax-free ``Categorical``).

What differs: ``distrax.Categorical`` is replaced by the same arithmetic written out (see
``scripts/purejaxrl_ppo.py``); the GRU's hidden size is given to ``GRUCell`` (current flax
requires it; ppo_rnn.py's flax inferred it from the 128-wide embedding); and :func:`make_train`
can run a given number of updates from a given runner state (``make_train(config)[0](rng)`` is
PureJaxRL's ``train(rng)``), so the benchmark can time steady-state chunks excluding compilation
like it does for stoixlite.

Usage::

    python scripts/purejaxrl_ppo_rnn.py                  # PureJaxRL defaults: 4 envs, 5e5 steps
    python scripts/purejaxrl_ppo_rnn.py --num-envs 64    # prints SPS (compile excluded) and return
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from purejaxrl_ppo import DEFAULT_CONFIG as FEEDFORWARD_DEFAULT_CONFIG  # noqa: E402
from purejaxrl_ppo import (  # noqa: E402
    Categorical,
    Transition,
    calculate_gae,
    make_optimizer,
    make_runner,
    make_setup,
    ppo_loss,
    run_cli,
)

# ppo_rnn.py's defaults are ppo.py's without the activation (its layers are relu).
DEFAULT_CONFIG: dict[str, Any] = {
    k: v for k, v in FEEDFORWARD_DEFAULT_CONFIG.items() if k != "ACTIVATION"
}
HIDDEN_SIZE = 128


class ScannedRNN(nn.Module):
    """``(carry [N, H], (x [T, N, H], resets [T, N])) -> (carry, y [T, N, H])``: a GRU over time."""

    @functools.partial(
        nn.scan,
        variable_broadcast="params",
        in_axes=0,
        out_axes=0,
        split_rngs={"params": False},
    )
    @nn.compact
    def __call__(self, carry: jax.Array, x: tuple[jax.Array, jax.Array]):
        ins, resets = x
        carry = jnp.where(
            resets[:, np.newaxis], self.initialize_carry(ins.shape[0], ins.shape[1]), carry
        )
        return nn.GRUCell(features=ins.shape[1])(carry, ins)

    @staticmethod
    def initialize_carry(batch_size: int, hidden_size: int) -> jax.Array:
        """``GRUCell.initialize_carry``: zeros (its default ``carry_init``)."""
        return jnp.zeros((batch_size, hidden_size))


class ActorCriticRNN(nn.Module):
    """``(hidden [N, 128], (obs [T, N, F], dones [T, N])) -> (hidden, pi, value [T, N])``."""

    action_dim: int

    @nn.compact
    def __call__(
        self, hidden: jax.Array, x: tuple[jax.Array, jax.Array]
    ) -> tuple[jax.Array, Categorical, jax.Array]:
        obs, dones = x
        embedding = nn.Dense(
            HIDDEN_SIZE, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0)
        )(obs)
        embedding = nn.relu(embedding)
        hidden, embedding = ScannedRNN()(hidden, (embedding, dones))

        actor_mean = nn.Dense(HIDDEN_SIZE, kernel_init=orthogonal(2), bias_init=constant(0.0))(
            embedding
        )
        actor_mean = nn.relu(actor_mean)
        actor_mean = nn.Dense(
            self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0)
        )(actor_mean)
        pi = Categorical(logits=actor_mean)

        critic = nn.Dense(HIDDEN_SIZE, kernel_init=orthogonal(2), bias_init=constant(0.0))(
            embedding
        )
        critic = nn.relu(critic)
        critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
        return hidden, pi, jnp.squeeze(critic, axis=-1)


def make_train(config: dict[str, Any]):
    """PureJaxRL's ``make_train``; returns ``train(rng)`` plus the pieces to run chunks.

    Returns ``(train, init, run_updates)``: ``train(rng)`` is ppo_rnn.py's whole run;
    ``init(rng) -> runner_state`` and ``run_updates(runner_state, n) -> (runner_state, metric)``
    split it so a benchmark can time ``n`` updates at a time (same code, same arithmetic).
    """
    config, env, env_params = make_setup(config)
    network = ActorCriticRNN(env.action_space(env_params).n)

    def init(rng: jax.Array) -> tuple:
        rng, _rng = jax.random.split(rng)
        init_x = (
            jnp.zeros((1, config["NUM_ENVS"], *env.observation_space(env_params).shape)),
            jnp.zeros((1, config["NUM_ENVS"]), dtype=bool),
        )
        init_hstate = ScannedRNN.initialize_carry(config["NUM_ENVS"], HIDDEN_SIZE)
        network_params = network.init(_rng, init_hstate, init_x)
        train_state = TrainState.create(
            apply_fn=network.apply, params=network_params, tx=make_optimizer(config)
        )
        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)
        rng, _rng = jax.random.split(rng)
        last_done = jnp.zeros((config["NUM_ENVS"],), dtype=bool)
        return (train_state, env_state, obsv, last_done, init_hstate, _rng)

    def _update_step(runner_state: tuple, unused: None) -> tuple[tuple, Any]:
        # COLLECT TRAJECTORIES
        def _env_step(runner_state: tuple, unused: None) -> tuple[tuple, Transition]:
            train_state, env_state, last_obs, last_done, hstate, rng = runner_state
            rng, _rng = jax.random.split(rng)
            ac_in = (last_obs[np.newaxis, :], last_done[np.newaxis, :])
            hstate, pi, value = network.apply(train_state.params, hstate, ac_in)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)
            value, action, log_prob = value.squeeze(0), action.squeeze(0), log_prob.squeeze(0)
            rng, _rng = jax.random.split(rng)
            rng_step = jax.random.split(_rng, config["NUM_ENVS"])
            obsv, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                rng_step, env_state, action, env_params
            )
            transition = Transition(done, action, value, reward, log_prob, last_obs, info)
            runner_state = (train_state, env_state, obsv, done, hstate, rng)
            return runner_state, transition

        initial_hstate = runner_state[-2]
        runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])

        # CALCULATE ADVANTAGE
        train_state, env_state, last_obs, last_done, hstate, rng = runner_state
        ac_in = (last_obs[np.newaxis, :], last_done[np.newaxis, :])
        _, _, last_val = network.apply(train_state.params, hstate, ac_in)
        last_val = last_val.squeeze(0)
        last_val = jnp.where(last_done, jnp.zeros_like(last_val), last_val)

        advantages, targets = calculate_gae(traj_batch, last_val, config)

        # UPDATE NETWORK
        def _update_epoch(update_state: tuple, unused: None) -> tuple[tuple, Any]:
            def _update_minbatch(train_state: TrainState, batch_info: tuple):
                init_hstate, traj_batch, advantages, targets = batch_info

                def _loss_fn(params, init_hstate, traj_batch, gae, targets):
                    # RERUN NETWORK (whole sequences, from the carry the rollout started from)
                    _, pi, value = network.apply(
                        params, init_hstate[0], (traj_batch.obs, traj_batch.done)
                    )
                    return ppo_loss(pi, value, traj_batch, gae, targets, config)

                grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                total_loss, grads = grad_fn(
                    train_state.params, init_hstate, traj_batch, advantages, targets
                )
                train_state = train_state.apply_gradients(grads=grads)
                return train_state, total_loss

            train_state, init_hstate, traj_batch, advantages, targets, rng = update_state
            rng, _rng = jax.random.split(rng)
            # minibatches of environments: axis 1 of [T, N, ...] (init_hstate is [1, N, H])
            permutation = jax.random.permutation(_rng, config["NUM_ENVS"])
            batch = (init_hstate, traj_batch, advantages, targets)
            shuffled_batch = jax.tree_util.tree_map(
                lambda x: jnp.take(x, permutation, axis=1), batch
            )
            minibatches = jax.tree_util.tree_map(
                lambda x: jnp.swapaxes(
                    jnp.reshape(x, [x.shape[0], config["NUM_MINIBATCHES"], -1] + list(x.shape[2:])),
                    1,
                    0,
                ),
                shuffled_batch,
            )
            train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
            update_state = (train_state, init_hstate, traj_batch, advantages, targets, rng)
            return update_state, total_loss

        init_hstate = initial_hstate[None, :]  # [1, N, H]
        update_state = (train_state, init_hstate, traj_batch, advantages, targets, rng)
        update_state, loss_info = jax.lax.scan(
            _update_epoch, update_state, None, config["UPDATE_EPOCHS"]
        )
        train_state = update_state[0]
        metric = traj_batch.info
        rng = update_state[-1]
        runner_state = (train_state, env_state, last_obs, last_done, hstate, rng)
        return runner_state, metric

    return make_runner(init, _update_step, config)


if __name__ == "__main__":
    run_cli(__doc__.splitlines()[0], DEFAULT_CONFIG, make_train, "ppo_rnn.py")
