"""Build everything a run needs from a validated config: envs, network, PPO core, evaluator.

``Experiment`` is the seam between the host loop (``rec_ppo``) and the compiled core. It is also
what tests and ``scripts/benchmark.py`` use, so they exercise exactly the training code path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from omegaconf import DictConfig, OmegaConf

from stoixlite.config import network_kwargs, ppo_config
from stoixlite.envs.registry import make
from stoixlite.envs.types import Environment
from stoixlite.envs.wrappers import make_batched_env
from stoixlite.evaluation import make_evaluator
from stoixlite.networks.actor_critic import ActorCritic
from stoixlite.ppo.learner import make_learn_chunk, make_optimizer, make_update
from stoixlite.ppo.types import LearnerState, PPOConfig


def make_raw_env(env_cfg: DictConfig | dict) -> Environment:
    """The raw (unwrapped, unbatched) env of the ``env`` config group."""
    env_cfg = (
        OmegaConf.to_container(env_cfg, resolve=True)
        if isinstance(env_cfg, DictConfig)
        else env_cfg
    )
    kwargs = dict(env_cfg.get("kwargs") or {})
    if env_cfg.get("difficulty") is not None:
        kwargs["difficulty"] = env_cfg["difficulty"]
    return make(env_cfg["name"], **kwargs)


def make_env_stack(
    env_cfg: DictConfig | dict, num_envs: int, check_actions: bool | None = None
) -> Environment:
    """The vmapped, auto-resetting env stack for ``num_envs`` copies of ``env_cfg.name``.

    ``check_actions`` (default: ``env_cfg.check_actions``, else off) raises on an out-of-range
    action instead of playing it as an invalid move (docs/envs.md, "Invalid actions").
    """
    env = make_raw_env(env_cfg)
    return make_batched_env(
        env,
        num_envs,
        obs_augment=bool(env_cfg.get("obs_augment", False)),
        obs_prev_reward=bool(env_cfg.get("obs_prev_reward", False)),
        check_actions=bool(
            env_cfg.get("check_actions", False) if check_actions is None else check_actions
        ),
    )


def make_network(cfg: DictConfig, env: Environment) -> ActorCritic:
    """The actor-critic for ``env``'s action space from the ``network`` config group."""
    net = cfg.network
    return ActorCritic(
        action_space=env.action_space,
        memory_name=net.name,
        memory_kwargs=network_kwargs(net),
        embed_size=net.embed_size,
        encoder_layers=net.encoder_layers,
        head_size=net.head_size,
        head_layers=net.head_layers,
        activation=net.activation,
        shared_memory=net.shared_memory,
        encoder_type=net.get("encoder", "mlp"),
        set_layout=getattr(env.unwrapped, "set_layout", None),
        set_pooling=net.get("set_pooling", "deepsets"),
    )


@dataclass
class Experiment:
    """Compiled pieces of one training run (one seed)."""

    cfg: DictConfig
    ppo: PPOConfig
    env: Environment
    eval_env: Environment
    network: ActorCritic
    optimizer: optax.GradientTransformation
    learn_chunk: Callable[[LearnerState], tuple[LearnerState, dict[str, jax.Array]]]
    evaluate: Callable[[Any, jax.Array], dict[str, jax.Array]]
    update: Callable[[LearnerState], tuple[LearnerState, dict[str, jax.Array]]]

    @property
    def steps_per_update(self) -> int:
        return self.ppo.num_envs * self.ppo.rollout_length

    @property
    def steps_per_chunk(self) -> int:
        return self.steps_per_update * self.ppo.updates_per_chunk

    def init_state(self, key: jax.Array) -> LearnerState:
        """Fresh learner state: initial params, optimiser, reset envs and initial carries."""
        key, net_key, env_key = jax.random.split(key, 3)
        env_state, timestep = self.env.reset(env_key)
        carry = self.network.initialize_carry(self.ppo.num_envs)
        params = self.network.init(
            net_key, carry, timestep.observation[None], jnp.ones((1, self.ppo.num_envs), bool)
        )
        state = LearnerState(
            params=params,
            opt_state=self.optimizer.init(params),
            env_state=env_state,
            timestep=timestep,
            carry=carry,
            key=key,
            update_step=jnp.asarray(0, jnp.int32),
        )
        # Distinct buffers for every leaf (e.g. reset's next_obs aliases its observation), so the
        # state can be donated to the learn chunk.
        return jax.tree.map(lambda x: jnp.array(x, copy=True), state)


def build_experiment(cfg: DictConfig) -> Experiment:
    """Create envs, network, optimiser, the jitted learn chunk and the evaluator (uncompiled)."""
    ppo = ppo_config(cfg)
    env = make_env_stack(cfg.env, ppo.num_envs)
    eval_env = make_env_stack(cfg.env, cfg.arch.num_eval_envs)
    network = make_network(cfg, env)
    optimizer = make_optimizer(ppo)
    update = make_update(
        network.apply, env, optimizer, ppo, rollout_unroll=cfg.system.rollout_unroll
    )
    max_steps = (env.max_episode_steps or cfg.arch.eval_max_steps) + 1
    evaluate = make_evaluator(
        network.apply,
        network.initialize_carry,
        eval_env,
        cfg.arch.num_eval_envs,
        greedy=cfg.arch.eval_greedy,
        max_steps=int(max_steps),
    )
    return Experiment(
        cfg=cfg,
        ppo=ppo,
        env=env,
        eval_env=eval_env,
        network=network,
        optimizer=optimizer,
        learn_chunk=make_learn_chunk(update, ppo.updates_per_chunk),
        evaluate=evaluate,
        update=update,
    )
