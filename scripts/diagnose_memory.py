#!/usr/bin/env python
"""Measure what a memory agent can hold: the diagnostics behind docs/learning.md.

For an env with an ``oracle_action(state)`` (the POPGym card tasks), whole episodes are generated
with uniformly random actions through the training observation stack (``obs_augment``), and the
actor-critic of a config is measured on them:

* ``reach``: for every step t, the norm of the gradient of the policy logits at t with respect to
  the first observation of the episode, ``||d logits_t / d obs_0||`` (mean over episodes), at
  initialisation or for a trained run (``--run``). It is the gradient that can teach the memory to
  keep the first observation until step t.
* ``hold``: for every step t, how much the policy at t depends on the first observation: the
  first observation is replaced by each possible first card (the other steps kept) and the mean
  total-variation distance between the resulting policies is reported (0: the first observation
  is forgotten; 1: the policy is a function of it).
* ``copy`` (with ``env.obs_augment``, whose input holds the previous action): at the steps t >= 1
  where the random previous action differs from the oracle action, the fraction of greedy actions
  that copy the previous action, and the fraction that give the oracle. An agent that keeps the
  first card in its memory recalls (oracle 1, copy 0); an agent that learnt the shortcut "repeat
  my previous action" (right only while its own previous actions were right) copies (copy 1).
* ``intervene`` (with the previous action in the input): greedy on-policy episodes; at step
  ``L // 4`` the previous action in the input is replaced by another action. Over the episodes
  whose agent was right until then: the fraction whose action at that step follows the injected
  action (``copy``) or stays with the first card (``recall``), and over the rest of the episode
  the fraction of steps that repeat the injected action (``chain``) or recall the first card.
* ``probe``: the same network trained by supervised learning (cross-entropy to the oracle action at
  every step, whole episodes, the PPO optimiser) for ``--probe-steps`` gradient steps; reports the
  oracle accuracy by episode position. It separates "the memory cannot learn to hold" from "the
  RL signal does not teach it". ``--probe-signal reward|return`` trains it by a policy gradient
  instead (the advantage each sampled action's own reward, or the discounted return-to-go), and
  ``--probe-window W`` cuts the gradient every W steps as PPO's sequences from stored carries do
  (docs/learning.md, section 5).
* ``repeats`` (with ``--run``; any env with discrete actions, including those without an oracle,
  e.g. battleship): on-policy episodes of the trained agent, acting as its evaluation does
  (greedy, or sampled with ``arch.eval_greedy: false``). For every step t: the fraction of actions
  that repeat an action taken earlier in the same episode (``repeat``), that repeat the previous
  action (``again``), and what uniformly random actions would give, ``1 - (1 - 1/A)^t``
  (``repeat_random``); plus the mean episode return. An agent that remembers what it did keeps
  ``repeat`` far below ``repeat_random`` where repeating is useless (battleship, concentration).

    python scripts/diagnose_memory.py network=gru env=popgym/repeat_first
    python scripts/diagnose_memory.py --probe-steps 2000 network=memoroid env=popgym/repeat_first
    python scripts/diagnose_memory.py --run outputs/<date>/<run>   # a trained agent's reach/hold

Output: one JSON object per measurement on stdout (``--out FILE`` also writes them to FILE).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = Path(__file__).resolve().parent.parent
from stoixlite.cli.args import OneLineArgumentParser, fail, output_file_error  # noqa: E402
from stoixlite.cli.args import checked_run_config as _checked_run_config  # noqa: E402
from stoixlite.config.plan import plan_run  # noqa: E402
from stoixlite.config.schema import RunConfig  # noqa: E402
from stoixlite.config.strict import ConfigError  # noqa: E402
from stoixlite.envs.registry import make  # noqa: E402
from stoixlite.envs.wrappers import ObsAugmentWrapper  # noqa: E402
from stoixlite.ppo.learner import make_optimizer  # noqa: E402
from stoixlite.run.build import make_network  # noqa: E402

MEASURES = ("reach", "hold", "copy", "intervene", "repeats", "probe")


def measure_list(text: str) -> list[str]:
    """``--only``'s value: comma-separated names of :data:`MEASURES`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MEASURES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown measure {', '.join(unknown) or repr(text)}; allowed: {', '.join(MEASURES)}"
        )
    return names


def load_config(overrides: list[str]) -> RunConfig:
    """The run config of Hydra ``overrides``, checked as ``rec_ppo`` checks it: a
    :class:`ConfigError` of one line for the first mistake (an unknown group option or key, a
    malformed override, an invalid value)."""
    cfg, error = _checked_run_config(overrides)
    if error is not None:
        raise ConfigError([error])
    return cfg


class NoOracleError(ValueError):
    """The measures asked for need an env with ``oracle_action``."""


def raw_env(cfg: RunConfig, oracle_optional: bool = False) -> Any:
    """The env of ``cfg`` with the training observation augmentation, not auto-reset."""
    kwargs = {} if cfg.env.difficulty is None else {"difficulty": cfg.env.difficulty}
    env = make(cfg.env.name, **kwargs)
    if not hasattr(env, "oracle_action") and not oracle_optional:
        raise NoOracleError(
            f"env {cfg.env.name} has no oracle_action; pick a card task "
            "(or measure a trained run's repeats: --run <dir> --only repeats)"
        )
    if not cfg.env.obs_augment:
        return env
    return ObsAugmentWrapper(
        env, prev_reward=cfg.env.obs_prev_reward, prev_action=cfg.env.obs_prev_action
    )


def episodes(env: Any, key: jax.Array, batch: int, length: int) -> dict[str, jax.Array]:
    """``batch`` episodes of ``length`` steps with uniform random actions.

    Returns ``obs [L, B, F]``, ``start [L, B]`` (true at t = 0), ``oracle [L, B]`` (the oracle
    action for the observation at t; -1 for an env without one) and ``action [L, B]`` (the random
    action taken at t).
    """
    inner = env.unwrapped
    n = env.action_space.n
    has_oracle = hasattr(inner, "oracle_action")

    def one(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        key, reset_key = jax.random.split(key)
        state, ts = env.reset(reset_key)

        def step(carry, k):
            state, ts = carry
            raw = state.env_state if hasattr(state, "env_state") else state
            oracle = inner.oracle_action(raw) if has_oracle else jnp.int32(-1)
            action = jax.random.randint(k, (), 0, n)
            state, next_ts = env.step(state, action)
            return (state, next_ts), (ts.observation, oracle, action)

        _, out = jax.lax.scan(step, (state, ts), jax.random.split(key, length))
        return out

    obs, oracle, action = jax.vmap(one, out_axes=1)(jax.random.split(key, batch))
    start = jnp.zeros(oracle.shape, bool).at[0].set(True)
    return {"obs": obs, "start": start, "oracle": oracle, "action": action}


def policy_logits(
    network: Any, params: Any, obs: jax.Array, start: jax.Array, window: int = 0
) -> jax.Array:
    """Logits ``[L, B, A]`` of whole episodes. ``window = W > 0`` cuts the episode into W-step
    windows and stops the gradient at each window's incoming carry (the memory state is the same;
    the gradient of a step reaches back to the start of its window only), as PPO's training
    sequences do: each starts from the carry stored by the rollout."""
    carry = network.initialize_carry(obs.shape[1])
    if window <= 0:
        _, (dist, _) = network.apply(params, carry, obs, start)
        return dist.logits
    logits = []
    for t0 in range(0, obs.shape[0], window):
        carry, (dist, _) = network.apply(
            params,
            jax.lax.stop_gradient(carry),
            obs[t0 : t0 + window],
            start[t0 : t0 + window],
        )
        logits.append(dist.logits)
    return jnp.concatenate(logits, axis=0)


def reach(network: Any, params: Any, data: dict[str, jax.Array]) -> np.ndarray:
    """``[L]``: mean over episodes of ``||d logits_t / d obs_0||_F`` (NaN off the probed steps).

    Reverse mode (the RNN kernels define custom VJPs), one backward pass per probed step and
    action, at the positions :func:`positions` picks.
    """
    obs, start = data["obs"], data["start"]
    length = obs.shape[0]

    def logits_of_first(first: jax.Array) -> jax.Array:
        return policy_logits(network, params, obs.at[0].set(first), start)

    logits, vjp = jax.vjp(logits_of_first, obs[0])
    out = np.full(length, np.nan)
    for t in positions(length):
        sq = 0.0
        for a in range(logits.shape[-1]):
            cot = jnp.zeros_like(logits).at[t, :, a].set(1.0)
            (g,) = vjp(cot)  # [B, F]: episodes are independent, so row b is episode b's gradient
            sq = sq + jnp.square(g).sum(-1)
        out[t] = float(jnp.sqrt(sq).mean())
    return out


def positions(length: int) -> list[int]:
    """The episode positions reported: a log-spaced set and the last step."""
    picks = {0, 1, 2, 5, 10, 25, 50, 100, 200, 400, 800, length - 1}
    return sorted(picks & set(range(length)))


def hold(network: Any, params: Any, data: dict[str, jax.Array], env: Any) -> np.ndarray:
    """``[L]``: mean pairwise total variation between the policies for different first cards.

    The first observation's card part (the leading ``n`` one-hot features, the task's suits) is
    replaced by each of the ``n`` possible values in turn.
    """
    obs, start = data["obs"], data["start"]
    n = env.action_space.n
    probs = []
    for v in range(n):
        first = obs[0].at[:, :n].set(jax.nn.one_hot(v, n))
        logits = policy_logits(network, params, obs.at[0].set(first), start)
        probs.append(jax.nn.softmax(logits, -1))
    tv = [
        0.5 * jnp.abs(probs[i] - probs[j]).sum(-1).mean(-1)
        for i in range(n)
        for j in range(i + 1, n)
    ]
    return np.asarray(sum(tv) / len(tv))


def copy_and_recall(network: Any, params: Any, data: dict[str, jax.Array]) -> dict[str, np.ndarray]:
    """``copy [L]`` and ``recall [L]``: at the steps t >= 1 whose previous action (in the input)
    differs from the oracle action, the fraction of greedy actions equal to the previous action
    and to the oracle action (NaN at t = 0)."""
    greedy = policy_logits(network, params, data["obs"], data["start"]).argmax(-1)  # [L, B]
    prev = jnp.concatenate([data["action"][:1], data["action"][:-1]])
    differs = (prev != data["oracle"]).at[0].set(False)
    count = differs.sum(-1)

    def rate(hit: jax.Array) -> np.ndarray:
        frac = (hit & differs).sum(-1) / jnp.maximum(count, 1)
        return np.where(np.asarray(count) > 0, np.asarray(frac), np.nan)

    return {"copy": rate(greedy == prev), "recall": rate(greedy == data["oracle"])}


def intervene(
    network: Any, params: Any, env: Any, key: jax.Array, batch: int, length: int
) -> dict[str, float]:
    """On-policy greedy episodes with one injected previous action at step ``length // 4``."""
    inner = env.unwrapped
    n = env.action_space.n
    obs_width = int(np.prod(inner.observation_space.shape))
    at = length // 4

    def one(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        key, reset_key = jax.random.split(key)
        state, ts = env.reset(reset_key)

        def step(carry, inputs):
            state, obs, memory = carry
            t, k = inputs
            raw = state.env_state if hasattr(state, "env_state") else state
            taken = obs[obs_width : obs_width + n].argmax()
            injected = (taken + jax.random.randint(k, (), 1, n)) % n
            obs = jnp.where(
                t == at, obs.at[obs_width : obs_width + n].set(jax.nn.one_hot(injected, n)), obs
            )
            memory, (dist, _) = network.apply(params, memory, obs[None, None], (t == 0)[None, None])
            action = dist.logits[0, 0].argmax()
            state, next_ts = env.step(state, action)
            return (state, next_ts.observation, memory), (
                action,
                inner.oracle_action(raw),
                injected,
            )

        init = (state, ts.observation, network.initialize_carry(1))
        steps = (jnp.arange(length), jax.random.split(key, length))
        _, out = jax.lax.scan(step, init, steps)
        return out

    action, oracle, injected = jax.jit(jax.vmap(one))(jax.random.split(key, batch))
    action, oracle, injected = (np.asarray(x) for x in (action, oracle, injected))
    right = (action[:, :at] == oracle[:, :at]).all(1)
    inj = injected[:, at : at + 1]
    after = slice(at + 1, length)
    sel = right if right.any() else np.ones_like(right)
    return {
        "step": at,
        "episodes_right_until_step": float(f"{right.mean():.3g}"),
        "copy": float(f"{(action[sel, at] == inj[sel, 0]).mean():.3g}"),
        "recall": float(f"{(action[sel, at] == oracle[sel, at]).mean():.3g}"),
        "chain_after": float(f"{(action[sel, after] == inj[sel]).mean():.3g}"),
        "recall_after": float(f"{(action[sel, after] == oracle[sel, after]).mean():.3g}"),
    }


def repeats(
    network: Any, params: Any, env: Any, key: jax.Array, batch: int, length: int, greedy: bool
) -> dict[str, Any]:
    """On-policy episodes (``batch`` of at most ``length`` steps): how often the agent repeats its
    own earlier actions, by episode position (see the module docstring)."""
    n = env.action_space.n

    def one(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        key, reset_key = jax.random.split(key)
        state, ts = env.reset(reset_key)

        def step(carry, inputs):
            state, obs, memory, done, ret = carry
            t, k = inputs
            memory, (dist, _) = network.apply(params, memory, obs[None, None], (t == 0)[None, None])
            logits = dist.logits[0, 0]
            action = jnp.where(greedy, logits.argmax(), jax.random.categorical(k, logits))
            state, next_ts = env.step(state, action)
            ret = ret + jnp.where(done, 0.0, next_ts.reward)
            return (state, next_ts.observation, memory, done | next_ts.last(), ret), (action, done)

        init = (state, ts.observation, network.initialize_carry(1), jnp.bool_(False), 0.0)
        steps = (jnp.arange(length), jax.random.split(key, length))
        (*_, ret), (action, done) = jax.lax.scan(step, init, steps)
        return action, done, ret

    action, done, ret = jax.jit(jax.vmap(one))(jax.random.split(key, batch))
    action, live, ret = np.asarray(action), ~np.asarray(done), np.asarray(ret)
    earlier = np.triu(np.ones((length, length), bool), 1)  # earlier[s, t]: s < t
    seen = (action[:, :, None] == action[:, None, :]) & earlier  # [B, s, t]
    repeat = seen.any(1)
    again = np.zeros_like(repeat)
    again[:, 1:] = action[:, 1:] == action[:, :-1]
    count = live.sum(0)

    def rate(hit: np.ndarray) -> np.ndarray:
        return np.where(count > 0, (hit & live).sum(0) / np.maximum(count, 1), np.nan)

    random = 1.0 - (1.0 - 1.0 / n) ** np.arange(length)
    return {
        "greedy": bool(greedy),
        "return": float(f"{ret.mean():.4g}"),
        "repeat_all_steps": float(f"{(repeat & live).sum() / live.sum():.3g}"),
        "repeat_random_all_steps": float(f"{(random[None] * live).sum() / live.sum():.3g}"),
        **position_summary(rate(repeat), "repeat"),
        **position_summary(rate(again), "again"),
        **position_summary(np.where(count > 0, random, np.nan), "repeat_random"),
    }


def probe(
    cfg: RunConfig,
    network: Any,
    params: Any,
    env: Any,
    key: jax.Array,
    steps: int,
    batch: int,
    length: int,
    report_every: int,
    window: int = 0,
    signal: str = "supervised",
    target: str = "oracle",
) -> list[dict[str, Any]]:
    """Training of the policy towards the oracle action; accuracy by position.

    ``target`` is what counts as right (:data:`PROBE_TARGETS`): ``oracle``, the oracle action; or
    ``untaken``, any action not taken earlier in the episode (the supervised loss is the
    cross-entropy to the uniform distribution over them): the memory of the agent's own actions
    that battleship and concentration need, learnable by any env with discrete actions.

    ``signal`` is what teaches it (:data:`PROBE_SIGNALS`):

    * ``supervised``: cross-entropy to the oracle action at every step;
    * ``reward``: the policy gradient of actions sampled from the policy itself, with the
      advantage of each action its own reward (+1 right, -1 wrong) normalised over the batch:
      exact credit assignment, no critic, no other step's reward (the task's actions do not change
      its observations, so sampled actions and the random-action episodes agree);
    * ``return``: the same with the advantage the normalised discounted return-to-go
      ``sum_k gamma^k r_{t+k}`` (``system.gamma``) of the episode: what a policy gradient without
      a useful critic sees, each step's reward among the ~1/(1-gamma) later ones;

    plus the ``system.ent_coef`` entropy bonus for the two policy-gradient signals.
    ``window = W > 0`` trains with the gradient cut every W steps (see :func:`policy_logits`),
    like PPO's ``rollout_length`` / ``bptt_length`` sequences from stored carries."""
    ppo = plan_run(cfg).ppo
    tx = make_optimizer(dataclasses.replace(ppo, anneal_lr=False))
    opt_state = tx.init(params)
    gamma, ent_coef = ppo.gamma, ppo.ent_coef

    def right(data: dict[str, jax.Array]) -> jax.Array:
        """``[L, B, A]``: the actions that count as right at each step."""
        n = env.action_space.n
        if target == "oracle":
            return jax.nn.one_hot(data["oracle"], n) > 0
        taken = jnp.cumsum(jax.nn.one_hot(data["action"], n), axis=0)
        return jnp.concatenate([jnp.zeros_like(taken[:1]), taken[:-1]]) == 0

    def is_right(action: jax.Array, data: dict[str, jax.Array]) -> jax.Array:
        return jnp.take_along_axis(right(data), action[..., None], axis=-1)[..., 0]

    def loss_fn(p, data, k):
        logits = policy_logits(network, p, data["obs"], data["start"], window)
        if signal == "supervised":
            labels = right(data).astype(logits.dtype)
            labels = labels / labels.sum(-1, keepdims=True)
            return optax.softmax_cross_entropy(logits, labels).mean()
        action = jax.random.categorical(k, jax.lax.stop_gradient(logits))  # [L, B]
        reward = jnp.where(is_right(action, data), 1.0, -1.0)
        if signal == "return":
            reward = jax.lax.scan(
                lambda g, r: (r + gamma * g, r + gamma * g),
                jnp.zeros_like(reward[0]),
                reward,
                reverse=True,
            )[1]
        adv = (reward - reward.mean()) / (reward.std() + 1e-8)
        log_probs = jax.nn.log_softmax(logits)
        taken = jnp.take_along_axis(log_probs, action[..., None], axis=-1)[..., 0]
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1)
        return -(adv * taken).mean() - ent_coef * entropy.mean()

    @jax.jit
    def train_step(p, o, k):
        data_key, sample_key = jax.random.split(k)
        data = episodes(env, data_key, batch, length)
        grads = jax.grad(loss_fn)(p, data, sample_key)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), o

    @jax.jit
    def accuracy(p, k):
        data = episodes(env, k, 256, length)
        pred = policy_logits(network, p, data["obs"], data["start"]).argmax(-1)
        return is_right(pred, data).mean(-1)  # [L]

    out = []
    for i in range(steps + 1):
        if i % report_every == 0:
            acc = np.asarray(accuracy(params, jax.random.fold_in(key, 2**31 - 1)))
            out.append({"step": i, **position_summary(acc, "probe_accuracy")})
            print(json.dumps(out[-1]), flush=True)
        if i < steps:
            params, opt_state = train_step(params, opt_state, jax.random.fold_in(key, i))
    return out


PROBE_SIGNALS = ("supervised", "reward", "return")
PROBE_TARGETS = ("oracle", "untaken")


def position_summary(values: np.ndarray, name: str) -> dict[str, Any]:
    """Values at a few positions plus means over the first and last tenth of the episode."""
    length = len(values)
    tenth = max(1, length // 10)
    return {
        name: {str(t): float(f"{values[t]:.3g}") for t in positions(length)},
        f"{name}_first_tenth": float(f"{np.nanmean(values[:tenth]):.3g}"),
        f"{name}_last_tenth": float(f"{np.nanmean(values[-tenth:]):.3g}"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="a run directory: measure its latest checkpoint")
    parser.add_argument(
        "--run-seed",
        type=int,
        default=None,
        help="with --run: which of its seeds (0-based index; default 0)",
    )
    parser.add_argument("--episodes", type=int, default=64, help="episodes per measurement")
    parser.add_argument("--probe-steps", type=int, default=0, help="supervised probe steps")
    parser.add_argument("--probe-batch", type=int, default=16, help="episodes per probe step")
    parser.add_argument(
        "--probe-window",
        type=int,
        default=0,
        help="cut the probe's gradient every W steps, like PPO's training sequences (0: never)",
    )
    parser.add_argument(
        "--probe-signal",
        choices=PROBE_SIGNALS,
        default="supervised",
        help="what trains the probe: the oracle action, or a policy gradient whose advantage is "
        "each action's own reward or the discounted return-to-go",
    )
    parser.add_argument(
        "--probe-target",
        choices=PROBE_TARGETS,
        default="oracle",
        help="what the probe counts as right: the oracle action, or any action not taken earlier "
        "in the episode (the memory of its own actions)",
    )
    parser.add_argument(
        "--only",
        type=measure_list,
        help=f"comma-separated measures among {', '.join(MEASURES)} (default: every one that "
        "applies; repeats needs --run, probe --probe-steps)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the JSON records to this file")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides (network=..., env=...), anywhere on the line; not with --run",
    )
    args = parser.parse_intermixed_args(argv)
    least_values = {"probe_steps": 0, "probe_window": 0, "probe_batch": 1, "episodes": 1}
    for key, least in least_values.items():
        if getattr(args, key) < least:
            parser.error(f"--{key.replace('_', '-')} must be at least {least}")
    wanted = set(args.only or MEASURES)
    if "repeats" in wanted and args.only and not args.run:
        parser.error("--only repeats measures a trained agent: give --run <run dir>")
    if "probe" in wanted and args.only and not args.probe_steps:
        parser.error("--only probe trains a probe: give --probe-steps (at least 1)")
    if args.run and args.overrides:
        parser.error(
            f"overrides {' '.join(args.overrides)} with --run: a run is measured with its saved "
            "config (drop them, or drop --run to measure a new network)"
        )
    if args.run_seed is not None and not args.run:
        parser.error("--run-seed picks a seed of a trained run: give --run <run dir>")
    if args.run_seed is not None and args.run_seed < 0:
        parser.error(f"--run-seed {args.run_seed} must be at least 0 (a 0-based seed index)")
    run_seed = args.run_seed or 0
    if args.out and (error := output_file_error(args.out)):
        parser.error(error)
    probing = "probe" in wanted and args.probe_steps > 0
    oracle_measures = wanted - {"repeats", "probe"}
    needs_oracle = oracle_measures or (probing and args.probe_target == "oracle")

    # Everything checked before anything is built: the run directory, its checkpoint and seed
    # (or the config of the overrides) and the env.
    if args.run:
        from stoixlite.run.resume import find_checkpoint

        try:
            cfg, _ = find_checkpoint(args.run)
        except (FileNotFoundError, ConfigError, RuntimeError) as err:
            parser.error(f"--run {args.run}: {str(err).splitlines()[0]}")
        seeds = cfg.arch.seeds
        if run_seed >= len(seeds):
            parser.error(
                f"--run-seed {run_seed} is out of range: the run trained {len(seeds)} seed(s) "
                f"({', '.join(map(str, seeds))}): give 0..{len(seeds) - 1}"
            )
    else:
        try:
            cfg = load_config(args.overrides)
        except ConfigError as err:
            parser.error(str(err))
    try:
        env = raw_env(cfg, oracle_optional=not needs_oracle)
    except NoOracleError as err:
        parser.error(str(err))

    if args.run:
        from stoixlite.run.resume import load_run

        run, learner, _ = load_run(args.run)
        cfg, network, params = (
            run.config,
            run.network,
            run.seed_params(learner.params)[run_seed],
        )
    else:
        network = make_network(cfg.network, env)
        init_obs = env.reset(jax.random.PRNGKey(0))[1].observation
        params = network.init(
            jax.random.PRNGKey(args.seed),
            network.initialize_carry(1),
            init_obs[None, None],
            jnp.ones((1, 1), bool),
        )
    length = int(env.max_episode_steps or 0) or int(cfg.arch.eval_max_steps)
    label = {"network": cfg.network.name, "env": cfg.env.name, "difficulty": cfg.env.difficulty}
    if args.run:
        label["run_seed"] = cfg.arch.seed + run_seed
    records = []
    if oracle_measures:
        data = episodes(env, jax.random.PRNGKey(args.seed + 1000), args.episodes, length)
    if "reach" in wanted:
        reached = position_summary(reach(network, params, data), "reach")
        records.append({**label, "measure": "reach", **reached})
    if "hold" in wanted:
        held = position_summary(hold(network, params, data, env), "hold")
        records.append({**label, "measure": "hold", **held})
    with_prev_action = cfg.env.obs_augment and cfg.env.obs_prev_action
    if "copy" in wanted and with_prev_action:
        rates = copy_and_recall(network, params, data)
        records.append(
            {
                **label,
                "measure": "copy",
                **position_summary(rates["copy"], "copy"),
                **position_summary(rates["recall"], "recall"),
            }
        )
    if "intervene" in wanted and with_prev_action:
        intervened = intervene(
            network, params, env, jax.random.PRNGKey(args.seed + 3000), args.episodes, length
        )
        records.append({**label, "measure": "intervene", **intervened})
    if "repeats" in wanted and args.run:
        repeated = repeats(
            network,
            params,
            env,
            jax.random.PRNGKey(args.seed + 4000),
            args.episodes,
            length,
            cfg.arch.eval_greedy,
        )
        records.append({**label, "measure": "repeats", **repeated})
    for r in records:
        print(json.dumps(r), flush=True)
    if probing:
        records += [
            {**label, "measure": "probe", **r}
            for r in probe(
                cfg,
                network,
                params,
                env,
                jax.random.PRNGKey(args.seed + 2000),
                args.probe_steps,
                args.probe_batch,
                length,
                max(1, args.probe_steps // 10),
                args.probe_window,
                args.probe_signal,
                args.probe_target,
            )
        ]
    if args.out:
        try:
            Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in records))
        except OSError as err:
            fail(f"the records (printed above) could not be written to {args.out}: {err}", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
