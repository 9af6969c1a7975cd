"""Evaluate a saved checkpoint: ``python -m stoixlite.evaluate <run dir> [options]``.

Loads ``<run dir>/config.yaml`` (the resolved config the run was trained with) and a checkpoint
from ``<run dir>/checkpoints`` (``--checkpoint latest`` by default, or ``best`` or a step), then
plays ``--episodes`` episodes (one per eval env) with greedy actions, or sampled ones with
``--sampled``. With several seeds trained together (``arch.num_seeds``) every seed is evaluated.

``--reference`` (envs whose registration declares a reference: every POPGym port) also plays the
trained JAX policy on the original (numpy) environment, stepped from Python: observations are
encoded exactly like the port (the declared :class:`~stoixlite.envs.popgym.reference.
PopgymReference`), augmented like the training wrappers when ``env.obs_augment`` is on (previous
action one-hot, previous reward with ``env.obs_prev_reward``, is-first flag), and the memory is
reset at each episode start.
Both returns are printed side by side: a policy learned on the port should score the same on the
reference.

Ctrl-C at any moment (importing, building, compiling, playing) ends it with one line and exit 130
(SIGTERM: 143); it writes nothing.
"""

from __future__ import annotations

from stoixlite.run.signals import (
    ctrl_c_raises,
    exit_now,
    hold_ctrl_c,
    interrupted_exit_code,
    raise_if_ctrl_c,
)

if __name__ == "__main__":  # before anything slow is imported: Ctrl-C is held from the start
    hold_ctrl_c()

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.cli.args import OneLineArgumentParser
from stoixlite.cli.process import setup_process
from stoixlite.config.strict import ConfigError
from stoixlite.envs.actions import find_invalid_action_error
from stoixlite.envs.registry import env_spec
from stoixlite.envs.types import FIRST, MID, TimeStep
from stoixlite.ppo.evaluate import make_evaluator
from stoixlite.ppo.rollout import act
from stoixlite.rules import INT_LIMIT
from stoixlite.run.host import HostRun
from stoixlite.run.parts import Run, make_env_stack
from stoixlite.run.resume import find_checkpoint, load_run
from stoixlite.specs import Discrete


def evaluate_port(run: Run, params: Any, episodes: int, greedy: bool, seed: int) -> np.ndarray:
    """Returns ``[episodes]`` of the policy on the JAX env (one episode per eval env), in checked
    mode: an out-of-range action raises ``InvalidActionError`` (docs/envs.md)."""
    cfg = run.config
    if isinstance(run, HostRun):  # a host env: the same episodes, stepped on the host
        vector = run.new_vector(episodes)
        try:
            ret, _, _ = run.play(vector, params, jax.random.PRNGKey(seed), greedy)
        finally:
            vector.close()
        return np.asarray(ret, np.float64)
    env = make_env_stack(cfg.env, episodes, check_actions=True)
    max_steps = int((env.max_episode_steps or cfg.arch.eval_max_steps) + 1)
    evaluate = make_evaluator(
        run.network.apply, run.network.initialize_carry, env, episodes, greedy, max_steps
    )
    out = jax.device_get(jax.jit(evaluate)(params, run.hyper, jax.random.PRNGKey(seed)))
    return np.asarray(out["return"], np.float64)


# --------------------------------------------------------------------------------------------
# Reference (popgym numpy) evaluation
# --------------------------------------------------------------------------------------------


def evaluate_reference(run: Run, params: Any, episodes: int, greedy: bool, seed: int) -> np.ndarray:
    """Returns ``[episodes]`` of the JAX policy on the original env the port reproduces, as its
    registration declares it (episode i reset with ``seed + i``), all episodes stepped in lockstep
    with one batched policy call per step."""
    cfg = run.config
    reference = env_spec(cfg.env.name).reference
    if reference is None:
        raise ValueError(f"--reference: {cfg.env.name} declares no reference implementation")
    port = run.env.unwrapped
    space = run.env.action_space
    envs = [reference.make(cfg.env.difficulty) for _ in range(episodes)]
    encode = reference.encoder(port, envs[0])
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]

    def act_with(params: Any, carry: Any, timestep: TimeStep, key: jax.Array, greedy: bool):
        return act(run.network.apply, params, carry, timestep, key, greedy)[:3]

    policy = jax.jit(act_with, static_argnames="greedy")

    def encode_action(a: np.ndarray) -> np.ndarray:
        if isinstance(space, Discrete):
            return np.eye(int(space.n), dtype=np.float32)[int(a)]
        return np.asarray(a, np.float32).reshape(-1)

    act_width = int(space.n) if isinstance(space, Discrete) else int(np.prod(space.shape))
    prev_action = np.zeros((episodes, act_width if cfg.env.obs_prev_action else 0), np.float32)
    last_reward = np.zeros((episodes, 1 if cfg.env.obs_prev_reward else 0), np.float32)
    carry = run.network.initialize_carry(episodes)
    returns = np.zeros(episodes, np.float64)
    no_reward = jnp.zeros((episodes,), jnp.float32)
    done = np.zeros(episodes, bool)
    key = jax.random.PRNGKey(seed)
    max_steps = int(port.max_episode_steps or cfg.arch.eval_max_steps)
    for t in range(max_steps):
        x = np.stack([encode(o) for o in obs])
        if cfg.env.obs_augment:
            first = np.full((episodes, 1), 1.0 if t == 0 else 0.0, np.float32)
            x = np.concatenate([x, prev_action, last_reward, first], axis=1)
        key, act_key = jax.random.split(key)
        step_type = jnp.full((episodes,), FIRST if t == 0 else MID, jnp.int32)
        timestep = TimeStep(step_type, no_reward, no_reward + 1.0, jnp.asarray(x))
        carry, action, _ = policy(params, carry, timestep, act_key, greedy=greedy)
        action = np.asarray(action)
        for i, env in enumerate(envs):
            if done[i]:
                continue
            obs[i], reward, terminated, truncated, _ = env.step(reference.action(port, action[i]))
            returns[i] += float(reward)
            if cfg.env.obs_prev_action:
                prev_action[i] = encode_action(action[i])
            last_reward[i] = float(reward)
            done[i] = terminated or truncated
        if done.all():
            break
    return returns


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def evaluate_run(
    run_dir: str | Path,
    episodes: int = 64,
    sampled: bool = False,
    reference: bool = False,
    checkpoint: str | int = "latest",
    seed: int = 12345,
) -> list[dict[str, Any]]:
    """Evaluate every seed of a run's checkpoint; one result dict per seed (returns arrays)."""
    run, state, step = load_run(run_dir, checkpoint)
    if reference and isinstance(run, HostRun):
        raise ValueError(
            f"--reference: {run.config.env.name} is a host env, not a JAX port (the popgym_ref "
            "envs are popgym's originals already)"
        )
    results = []
    for train_seed, params in zip(
        run.config.arch.seeds, run.seed_params(state.params), strict=True
    ):
        row: dict[str, Any] = {"checkpoint": step, "train_seed": train_seed}
        row["port"] = evaluate_port(run, params, episodes, not sampled, seed)
        if reference:
            row["reference"] = evaluate_reference(run, params, episodes, not sampled, seed)
        results.append(row)
    return results


def _fmt(x: np.ndarray) -> str:
    return f"{x.mean():.4f} ± {x.std():.4f}"


def _checkpoint_arg(value: str) -> str | int:
    if value in ("latest", "best"):
        return value
    if value.isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"{value!r} is not latest, best or a step number")


def _seed(value: str) -> int:
    """An evaluation seed: an integer in ``[0, INT_LIMIT]``, the range of ``arch.seed``."""
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if not 0 <= seed <= INT_LIMIT:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer in [0, {INT_LIMIT}]")
    return seed


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    setup_process(absl_level=logging.ERROR)  # orbax's read-only notices
    parser = OneLineArgumentParser(
        prog="python -m stoixlite.evaluate", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "run_dir", type=Path, help="a run directory (has config.yaml, checkpoints/)"
    )
    parser.add_argument(
        "--episodes", type=_positive, default=64, help="episodes per seed (default 64)"
    )
    parser.add_argument("--sampled", action="store_true", help="sample actions (default: greedy)")
    parser.add_argument("--reference", action="store_true", help="also evaluate on original popgym")
    parser.add_argument(
        "--checkpoint",
        type=_checkpoint_arg,
        default="latest",
        help="latest (default), best, or a step",
    )
    parser.add_argument(
        "--seed", type=_seed, default=12345, help=f"evaluation seed in [0, {INT_LIMIT}]"
    )
    args = parser.parse_args(argv)
    try:
        with ctrl_c_raises():  # a Ctrl-C held so far raises here; from now on at once
            cfg, _ = find_checkpoint(args.run_dir, args.checkpoint)  # before anything is built
            if args.reference and env_spec(cfg.env.name).reference is None:
                raise ValueError(
                    f"--reference needs an env with a reference implementation (the popgym "
                    f"ports); this run's env is {cfg.env.name}"
                )
            results = evaluate_run(
                args.run_dir,
                args.episodes,
                args.sampled,
                args.reference,
                args.checkpoint,
                args.seed,
            )
            # a Ctrl-C whose KeyboardInterrupt Python dropped (raised in a garbage collector
            # callback, e.g. JAX's) is still pending: it stops here, before any result
            raise_if_ctrl_c()
    except KeyboardInterrupt:
        hold_ctrl_c()  # a second Ctrl-C while this ends is recorded only
        print("interrupted: the evaluation stopped, nothing was written", file=sys.stderr)
        return interrupted_exit_code()
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        invalid = find_invalid_action_error(err)
        if invalid is not None:
            lines = [invalid]
        elif isinstance(err, ConfigError):  # one line per mistake of the saved config
            lines = str(err).splitlines()
        else:
            lines = str(err).strip().splitlines()[:1]
        for line in lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    mode = "sampled" if args.sampled else "greedy"
    print(
        f"{args.run_dir}: checkpoint {results[0]['checkpoint']}, {args.episodes} episodes, {mode}"
    )
    header = "| seed | port (JAX) return |" + (
        " popgym reference return |" if args.reference else ""
    )
    print(header)
    print("|---|---|" + ("---|" if args.reference else ""))
    for row in results:
        line = f"| {row['train_seed']} | {_fmt(row['port'])} |"
        if args.reference:
            line += f" {_fmt(row['reference'])} |"
        print(line)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:  # a Ctrl-C while the arguments were parsed or results printed
        code = interrupted_exit_code()
    exit_now(code)  # no interpreter teardown after an interrupted compile (see rec_ppo.Abandoned)
