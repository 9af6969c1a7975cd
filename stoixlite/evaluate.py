"""Evaluate a saved checkpoint: ``python -m stoixlite.evaluate <run dir> [options]``.

Loads ``<run dir>/config.yaml`` (the resolved config the run was trained with) and a checkpoint
from ``<run dir>/checkpoints`` (``--checkpoint latest`` by default, or ``best`` or a step), then
plays ``--episodes`` episodes (one per eval env) with greedy actions, or sampled ones with
``--sampled``. With several seeds trained together (``arch.num_seeds``) every seed is evaluated.

``--reference`` (POPGym envs only) also plays the trained JAX policy on the original ``popgym``
(numpy) environment, stepped from Python: observations are encoded exactly like the port
(``encode_obs`` of the port module), augmented like the training wrappers when ``env.obs_augment``
is on (previous action one-hot + is-first flag), and the memory is reset at each episode start.
Both returns are printed side by side: a policy learned on the port should score the same on the
reference.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import sys
from pathlib import Path
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from omegaconf import DictConfig

from stoixlite.checkpointing import Checkpointer, checkpoint_dir, config_fingerprint
from stoixlite.envs.actions import find_invalid_action_error
from stoixlite.envs.types import Discrete
from stoixlite.evaluation import make_evaluator
from stoixlite.experiment import Experiment, make_env_stack


def load_run(
    run_dir: str | Path, checkpoint: str | int = "latest"
) -> tuple[DictConfig, Experiment, Any, int]:
    """``(cfg, experiment, learner state, step)`` of a run directory's checkpoint.

    The run directory, its config and the checkpoint are checked before anything is built
    (:func:`find_checkpoint`); the latest checkpoint falls back to the newest intact one.
    """
    from stoixlite.trainer import checkpoint_tree, experiment_and_programs, init_learner

    cfg, step = find_checkpoint(run_dir, checkpoint)
    exp, _ = experiment_and_programs(cfg)
    template = checkpoint_tree(*init_learner(exp, cfg))
    with Checkpointer(checkpoint_dir(run_dir), config_fingerprint(cfg), read_only=True) as ckpt:
        tree, _, step = ckpt.restore(template, step)
    return cfg, exp, tree["learner"], step


def find_checkpoint(run_dir: str | Path, checkpoint: str | int = "latest") -> tuple[Any, int]:
    """``(cfg, step)`` of ``--checkpoint`` in ``run_dir``, checked without building anything.

    Raises :class:`FileNotFoundError` or :class:`ValueError` with one line in the user's terms:
    no such directory, not a run directory, no (intact) checkpoint, no such step.
    """
    from stoixlite.checkpointing import check_resumable
    from stoixlite.trainer import load_run_config

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} not found: is {run_dir} a stoixlite run directory?")
    cfg = load_run_config(config_path)
    latest = check_resumable(cfg, run_dir)  # some checkpoint is there and intact
    if checkpoint == "latest":
        return cfg, latest
    with Checkpointer(checkpoint_dir(run_dir), config_fingerprint(cfg), read_only=True) as ckpt:
        steps = ckpt.all_steps()
        step = (ckpt.best_step() or latest) if checkpoint == "best" else int(checkpoint)
    if step not in steps:
        raise FileNotFoundError(f"--checkpoint {checkpoint}: no such checkpoint (have {steps})")
    return cfg, step


def seed_params(cfg: DictConfig, params: Any) -> list[Any]:
    """Per-seed parameter pytrees (the leading seed axis removed when ``arch.num_seeds > 1``)."""
    num_seeds = int(cfg.arch.get("num_seeds", 1) or 1)
    if num_seeds == 1:
        return [params]
    return [jax.tree.map(lambda x, k=k: x[k], params) for k in range(num_seeds)]


def evaluate_port(
    cfg: DictConfig, exp: Experiment, params: Any, episodes: int, greedy: bool, seed: int
) -> np.ndarray:
    """Returns ``[episodes]`` of the policy on the JAX env (one episode per eval env), in checked
    mode: an out-of-range action raises ``InvalidActionError`` (docs/envs.md)."""
    env = make_env_stack(cfg.env, episodes, check_actions=True)
    max_steps = int((env.max_episode_steps or cfg.arch.eval_max_steps) + 1)
    evaluate = make_evaluator(
        exp.network.apply, exp.network.initialize_carry, env, episodes, greedy, max_steps
    )
    out = jax.device_get(evaluate(params, jax.random.PRNGKey(seed)))
    return np.asarray(out["return"], np.float64)


# --------------------------------------------------------------------------------------------
# Reference (popgym numpy) evaluation
# --------------------------------------------------------------------------------------------


def popgym_reference_class(env_name: str, difficulty: str | None) -> type:
    """The ``popgym`` class of a port, e.g. ``popgym/repeat_previous`` + easy ->
    ``popgym.envs.repeat_previous.RepeatPreviousEasy`` (matched case-insensitively)."""
    suite, _, name = env_name.partition("/")
    if suite != "popgym":
        raise ValueError(f"--reference needs a popgym env, got {env_name!r}")
    module = importlib.import_module(f"popgym.envs.{name}")
    wanted = (name.replace("_", "") + (difficulty or "")).lower()
    for attr in dir(module):
        obj = getattr(module, attr)
        if isinstance(obj, type) and attr.lower() == wanted:
            return obj
    raise ValueError(f"no popgym class for {env_name!r} at difficulty {difficulty!r}")


def port_obs_encoder(port_env: Any) -> Any:
    """``encode(popgym_obs) -> float32 [D]`` of the port module; extra parameters of its
    ``encode_obs`` (e.g. ``num_categories``) are taken from the port env's attributes."""
    module = importlib.import_module(type(port_env).__module__)
    encode = module.encode_obs
    params = list(inspect.signature(encode).parameters)[1:]
    kwargs = {p: getattr(port_env, p) for p in params if hasattr(port_env, p)}
    return lambda obs: np.asarray(encode(obs, **kwargs), np.float32).reshape(-1)


def evaluate_reference(
    cfg: DictConfig, exp: Experiment, params: Any, episodes: int, greedy: bool, seed: int
) -> np.ndarray:
    """Returns ``[episodes]`` of the JAX policy on the original popgym env (episode i reset with
    ``seed + i``), all episodes stepped in lockstep with one batched policy call per step."""
    cls = popgym_reference_class(cfg.env.name, cfg.env.difficulty)
    port = exp.env.unwrapped
    encode = port_obs_encoder(port)
    space = exp.env.action_space
    augment = bool(cfg.env.get("obs_augment", False))
    prev_reward = bool(cfg.env.get("obs_prev_reward", False))
    envs = [cls() for _ in range(episodes)]
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]

    @jax.jit
    def act(params, carry, x, start, key):
        carry, (dist, _) = exp.network.apply(params, carry, x[None], start[None])
        action = dist.mode()[0] if greedy else dist.sample(key)[0]
        return carry, action

    def encode_action(a: np.ndarray) -> np.ndarray:
        if isinstance(space, Discrete):
            return np.eye(int(space.n), dtype=np.float32)[int(a)]
        return np.asarray(a, np.float32).reshape(-1)

    act_width = int(space.n) if isinstance(space, Discrete) else int(np.prod(space.shape))
    prev_action = np.zeros((episodes, act_width), np.float32)
    last_reward = np.zeros((episodes, 1 if prev_reward else 0), np.float32)
    carry = exp.network.initialize_carry(episodes)
    returns = np.zeros(episodes, np.float64)
    done = np.zeros(episodes, bool)
    key = jax.random.PRNGKey(seed)
    max_steps = int(port.max_episode_steps or cfg.arch.eval_max_steps)
    for t in range(max_steps):
        x = np.stack([encode(o) for o in obs])
        if augment:
            first = np.full((episodes, 1), 1.0 if t == 0 else 0.0, np.float32)
            x = np.concatenate([x, prev_action, last_reward, first], axis=1)
        key, act_key = jax.random.split(key)
        start = jnp.full((episodes,), t == 0)
        carry, action = act(params, carry, jnp.asarray(x), start, act_key)
        action = np.asarray(action)
        for i, env in enumerate(envs):
            if done[i]:
                continue
            a = int(action[i]) if isinstance(space, Discrete) else action[i]
            obs[i], reward, terminated, truncated, _ = env.step(a)
            returns[i] += float(reward)
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
    cfg, exp, state, step = load_run(run_dir, checkpoint)
    seeds = [int(cfg.arch.seed) + k for k in range(int(cfg.arch.get("num_seeds", 1) or 1))]
    results = []
    for train_seed, params in zip(seeds, seed_params(cfg, state.params), strict=True):
        row: dict[str, Any] = {"checkpoint": step, "train_seed": train_seed}
        row["port"] = evaluate_port(cfg, exp, params, episodes, not sampled, seed)
        if reference:
            row["reference"] = evaluate_reference(cfg, exp, params, episodes, not sampled, seed)
        results.append(row)
    return results


def _fmt(x: np.ndarray) -> str:
    return f"{x.mean():.4f} ± {x.std():.4f}"


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line on stderr (exit 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see python -m stoixlite.evaluate --help)\n")


def _checkpoint_arg(value: str) -> str | int:
    if value in ("latest", "best"):
        return value
    if value.isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"{value!r} is not latest, best or a step number")


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax's read-only notices
    parser = _OneLineParser(prog="python -m stoixlite.evaluate", description=__doc__.split("\n")[0])
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
    parser.add_argument("--seed", type=int, default=12345, help="evaluation seed")
    args = parser.parse_args(argv)
    try:
        cfg, _ = find_checkpoint(args.run_dir, args.checkpoint)  # before anything is built
        if args.reference and not str(cfg.env.name).startswith("popgym/"):
            raise ValueError(f"--reference needs a popgym env; this run's env is {cfg.env.name}")
        results = evaluate_run(
            args.run_dir, args.episodes, args.sampled, args.reference, args.checkpoint, args.seed
        )
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        message = find_invalid_action_error(err) or str(err).strip().splitlines()[0]
        print(f"error: {message}", file=sys.stderr)
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
    sys.exit(main())
