"""The host loop of a training run: compiled learn chunks, evaluation, logging, checkpoints.

``train(cfg, run_dir)`` runs ``arch.num_evaluations`` chunks (fewer with an early stop: once the
mean greedy eval return reaches ``arch.target_return``, when set, the run saves its checkpoint and
ends). After each chunk it evaluates,
writes one JSON-lines record (``metrics.jsonl``), logs to W&B (``logger=wandb``), updates the
progress bar and saves a checkpoint every ``checkpoint.every`` chunks (and after the last one).

Several seeds (``arch.num_seeds = S > 1``) train in one compiled program: the whole learner
state gets a leading ``[S]`` axis and the learn chunk and evaluator are ``vmap``-ped. Seed k uses
``arch.seed + k`` and derives its keys exactly like a single-seed run with that seed
(``key, init_key = split(PRNGKey(seed))``, one ``split`` of the host key per evaluation), so seed
k of a multi-seed run reproduces the single-seed run. ``metrics.jsonl`` then holds the mean over
seeds (plus ``*_seed_std`` for the returns) and ``metrics_per_seed.jsonl`` one record per seed.

Resume: ``train(cfg, run_dir, resume=True)`` restores the latest checkpoint of ``run_dir``
(learner state, host PRNG key, chunk index, logger step), truncates the metrics files to the
records written up to that checkpoint and continues: the final state and metrics are
bit-identical (on CPU) to those of an uninterrupted run. SIGINT or SIGTERM during training
requests a stop: the current chunk finishes, a checkpoint is saved and
:class:`TrainingInterrupted` (a ``SystemExit`` with code 128 + signal) ends the process cleanly;
a second signal aborts at once.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from omegaconf import DictConfig, OmegaConf

from stoixlite.checkpointing import Checkpointer, checkpoint_dir, config_fingerprint
from stoixlite.experiment import Experiment, build_experiment
from stoixlite.metrics import JsonlWriter, summarize_chunk, summarize_eval

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
PER_SEED_FILE = "metrics_per_seed.jsonl"
SEED_STD_KEYS = ("eval/episode_return", "train/episode_return")
CHECKPOINT_DEFAULTS = {"enabled": True, "every": 1, "keep_last": 2, "keep_best": True}


class TrainingInterrupted(SystemExit):
    """Raised after SIGINT/SIGTERM once the checkpoint of the current chunk is saved."""

    def __init__(self, signum: int, run_dir: Path, chunk: int):
        super().__init__(128 + signum)
        self.signum, self.run_dir, self.chunk = signum, run_dir, chunk

    def __str__(self) -> str:
        return (
            f"stopped by {signal.Signals(self.signum).name} after chunk {self.chunk}; resume with "
            f"`python -m stoixlite.rec_ppo resume={self.run_dir}`"
        )


# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------


def num_seeds(cfg: DictConfig) -> int:
    return int(OmegaConf.select(cfg, "arch.num_seeds", default=1) or 1)


def train_seeds(cfg: DictConfig) -> list[int]:
    """The seeds trained by this run: ``arch.seed + k`` for ``k < arch.num_seeds``."""
    return [int(cfg.arch.seed) + k for k in range(num_seeds(cfg))]


def init_learner(exp: Experiment, cfg: DictConfig) -> tuple[Any, jax.Array]:
    """Initial learner state and host PRNG key (with a leading seed axis when S > 1)."""
    pairs = [jax.random.split(jax.random.PRNGKey(seed)) for seed in train_seeds(cfg)]
    if len(pairs) == 1:
        key, init_key = pairs[0]
        return exp.init_state(init_key), key
    keys = jnp.stack([p[0] for p in pairs])
    state = jax.vmap(exp.init_state)(jnp.stack([p[1] for p in pairs]))
    return jax.tree.map(lambda x: jnp.array(x, copy=True), state), keys


def checkpoint_tree(state: Any, key: jax.Array) -> dict[str, Any]:
    """What a checkpoint's ``state`` item holds: the learner state and the host PRNG key."""
    return {"learner": state, "host_key": key}


@dataclass
class Programs:
    """The compiled-per-run functions of the host loop (single seed or vmapped over seeds)."""

    learn: Callable[[Any], tuple[Any, dict[str, jax.Array]]]
    evaluate: Callable[[Any, jax.Array], dict[str, jax.Array]]
    split: Callable[[jax.Array], tuple[jax.Array, jax.Array]]
    compiled_learn: Any = None  # the AOT-compiled ``learn`` (set on first use)


def make_programs(exp: Experiment, seeds: int) -> Programs:
    if seeds == 1:
        return Programs(exp.learn_chunk, exp.evaluate, lambda k: tuple(jax.random.split(k)))
    length = exp.ppo.updates_per_chunk

    def learn_one(state: Any) -> tuple[Any, dict[str, jax.Array]]:
        return jax.lax.scan(lambda s, _: exp.update(s), state, None, length=length)

    def split(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
        both = jax.vmap(jax.random.split)(keys)  # [S, 2, 2]
        return both[:, 0], both[:, 1]

    return Programs(
        learn=jax.jit(jax.vmap(learn_one), donate_argnums=0),
        evaluate=jax.jit(jax.vmap(exp.evaluate)),
        split=jax.jit(split),
    )


# Experiments and compiled programs of recent configs, keyed by everything that affects the
# compiled code (not the seed, loggers or checkpoint settings): the jobs of a seed sweep in one
# multirun process, and a resumed run in the same process, reuse one compilation.
_PROGRAM_CACHE: OrderedDict[str, tuple[Experiment, Programs]] = OrderedDict()
_PROGRAM_CACHE_SIZE = 2


def _compile_key(cfg: DictConfig) -> str:
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in ("logger", "checkpoint", "resume", "hydra"):
        container.pop(key, None)
    container.get("arch", {}).pop("seed", None)
    container.get("arch", {}).pop("target_return", None)  # host-side only
    return json.dumps(container, sort_keys=True, default=str)


def experiment_and_programs(cfg: DictConfig) -> tuple[Experiment, Programs]:
    """``build_experiment(cfg)`` and its host-loop programs, cached for recent configs."""
    key = _compile_key(cfg)
    if key in _PROGRAM_CACHE:
        _PROGRAM_CACHE.move_to_end(key)
        return _PROGRAM_CACHE[key]
    exp = build_experiment(cfg)
    entry = (exp, make_programs(exp, num_seeds(cfg)))
    _PROGRAM_CACHE[key] = entry
    while len(_PROGRAM_CACHE) > _PROGRAM_CACHE_SIZE:
        _PROGRAM_CACHE.popitem(last=False)
    return entry


def _seed_slice(tree: Any, k: int) -> Any:
    return jax.tree.map(lambda x: x[k], tree)


def _nan_stat(values: list[float], fn: Callable[[np.ndarray], float]) -> float:
    arr = np.asarray(values, np.float64)
    arr = arr[np.isfinite(arr)]
    return float(fn(arr)) if arr.size else math.nan


def summarize(
    chunk_metrics: dict[str, Any], eval_result: dict[str, Any], seeds: int
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """``(record, per_seed_records)``: the chunk's metrics, averaged over seeds when S > 1."""
    if seeds == 1:
        return {**summarize_chunk(chunk_metrics), **summarize_eval(eval_result)}, []
    per_seed = [
        {
            **summarize_chunk(_seed_slice(chunk_metrics, k)),
            **summarize_eval(_seed_slice(eval_result, k)),
        }
        for k in range(seeds)
    ]
    record = {key: _nan_stat([r[key] for r in per_seed], np.mean) for key in per_seed[0]}
    for key in SEED_STD_KEYS:
        record[f"{key}_seed_std"] = _nan_stat([r[key] for r in per_seed], np.std)
    return record, per_seed


# --------------------------------------------------------------------------------------------
# Host state, signals, files
# --------------------------------------------------------------------------------------------


@dataclass
class HostState:
    """Host-loop state saved with every checkpoint."""

    chunk: int = 0  # chunks completed
    logger_step: int = 0  # records written to metrics.jsonl
    best_eval_return: float | None = None
    elapsed_s: float = 0.0  # training wall-clock before this process (for time/elapsed_s)


class StopRequest:
    """Context manager turning SIGINT/SIGTERM into a stop request checked at chunk boundaries.

    The first signal sets :attr:`signum`; a second one restores the default handlers and raises
    ``KeyboardInterrupt`` at once. Outside the main thread (where handlers cannot be installed)
    this does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            self._restore()
            raise KeyboardInterrupt
        self.signum = signum
        log.warning(
            "%s received: finishing this chunk, saving a checkpoint, then stopping "
            "(send it again to abort at once)",
            signal.Signals(signum).name,
        )

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def __exit__(self, *exc: object) -> None:
        self._restore()


def truncate_jsonl(path: Path, keep: int) -> None:
    """Keep the first ``keep`` lines of a JSON-lines file (records written after the checkpoint
    being resumed from are dropped, so the resumed run rewrites them)."""
    if not path.exists():
        return
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_text("".join(line + "\n" for line in lines[:keep]), encoding="utf-8")


def checkpoint_settings(cfg: DictConfig) -> dict[str, Any]:
    section = OmegaConf.select(cfg, "checkpoint", default=None)
    given = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    return {**CHECKPOINT_DEFAULTS, **(given or {})}


def resume_config(composed: DictConfig, run_dir: Path, overrides: list[str]) -> DictConfig:
    """The config of ``resume=<run_dir>``: the run's saved ``config.yaml`` with the values of
    the other command-line ``overrides`` taken from the ``composed`` config (a group override
    such as ``network=lstm`` replaces the whole group)."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"resume={run_dir}: no config.yaml there (not a run directory)")
    cfg = OmegaConf.load(path)
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "resume" or key.startswith("hydra"):
            continue
        value = OmegaConf.select(composed, key, default=None)
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    cfg.resume = str(run_dir)
    return cfg


def run_name(cfg: DictConfig) -> str:
    seeds = train_seeds(cfg)
    seed = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"
    return f"{cfg.env.name}[{cfg.env.difficulty or '-'}] {cfg.network.name} seed={seed}"


def _make_wandb(cfg: DictConfig, run_dir: Path, resume: bool) -> Any:
    section = OmegaConf.select(cfg, "logger.wandb", default=None)
    if section is None:
        return None
    from stoixlite.wandb_logger import from_config

    config = OmegaConf.to_container(cfg, resolve=True)
    return from_config(
        OmegaConf.to_container(section, resolve=True), config, run_dir, run_name(cfg), resume
    )


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def train(
    cfg: DictConfig,
    run_dir: str | Path,
    resume: bool = False,
    on_chunk_end: Callable[[int, dict[str, float]], None] | None = None,
) -> float:
    """Train as configured, writing outputs to ``run_dir``; returns the final mean eval return.

    ``resume``: continue from the latest checkpoint in ``run_dir``. ``on_chunk_end(chunk,
    record)`` is called after each chunk is logged, before the checkpoint decision (a hook for
    tests and tools).
    """
    from stoixlite.plotting import plot_learning_curve
    from stoixlite.progress import TrainingProgress

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    seeds = num_seeds(cfg)
    exp, programs = experiment_and_programs(cfg)
    state, key = init_learner(exp, cfg)
    ck = checkpoint_settings(cfg)
    ckpt = None
    if ck["enabled"] or resume:
        ckpt = Checkpointer(
            checkpoint_dir(run_dir), config_fingerprint(cfg), ck["keep_last"], ck["keep_best"]
        )
    host = HostState()
    if resume:
        assert ckpt is not None
        tree, saved_host, step = ckpt.restore(checkpoint_tree(state, key))
        state, key, host = tree["learner"], tree["host_key"], HostState(**saved_host)
        truncate_jsonl(run_dir / METRICS_FILE, host.logger_step)
        truncate_jsonl(run_dir / PER_SEED_FILE, host.logger_step * seeds)
        print(f"resuming {run_dir} from checkpoint {step} (chunk {host.chunk})")
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    start = time.perf_counter()
    if programs.compiled_learn is None:
        programs.compiled_learn = programs.learn.lower(state).compile()
    learn = programs.compiled_learn
    compile_s = time.perf_counter() - start
    logs = cfg.logger
    writer = JsonlWriter(run_dir / METRICS_FILE) if logs.jsonl else None
    seed_writer = JsonlWriter(run_dir / PER_SEED_FILE) if logs.jsonl and seeds > 1 else None
    wandb = _make_wandb(cfg, run_dir, resume)
    num_chunks = int(cfg.arch.num_evaluations)
    total_steps = exp.steps_per_chunk * num_chunks
    target = OmegaConf.select(cfg, "arch.target_return", default=None)
    record: dict[str, float] = {}
    exit_code = 1
    try:
        with (
            StopRequest() as stop,
            TrainingProgress(total_steps, run_name(cfg), enabled=logs.progress) as progress,
        ):
            progress.update(exp.steps_per_chunk * host.chunk, {})
            for chunk in range(host.chunk, num_chunks):
                tic = time.perf_counter()
                state, chunk_metrics = learn(state)
                chunk_metrics = jax.device_get(chunk_metrics)
                train_s = time.perf_counter() - tic
                key, eval_key = programs.split(key)
                eval_result = jax.device_get(programs.evaluate(state.params, eval_key))
                step = exp.steps_per_chunk * (chunk + 1)
                summary, per_seed = summarize(chunk_metrics, eval_result, seeds)
                record = {
                    "step": step,
                    "update": exp.ppo.updates_per_chunk * (chunk + 1),
                    **summary,
                    "train/sps": exp.steps_per_chunk * seeds / train_s,
                    "time/elapsed_s": host.elapsed_s + time.perf_counter() - start,
                    "time/compile_s": compile_s,
                }
                _log(record, per_seed, step, train_seeds(cfg), writer, seed_writer, wandb, logs)
                progress.update(step, record)
                host.chunk, host.logger_step = chunk + 1, host.logger_step + 1
                ret = record["eval/episode_return"]
                if math.isfinite(ret) and (
                    host.best_eval_return is None or ret > host.best_eval_return
                ):
                    host.best_eval_return = ret
                if on_chunk_end is not None:
                    on_chunk_end(chunk, record)
                reached = target_reached(ret, target)
                last = host.chunk == num_chunks or reached
                if ckpt is not None and (
                    (ck["enabled"] and (host.chunk % ck["every"] == 0 or last))
                    or stop.signum is not None
                ):
                    _save(ckpt, host, state, key, ret, start)
                if stop.signum is not None and not last:
                    raise TrainingInterrupted(stop.signum, run_dir, host.chunk)
                if reached:
                    print(f"eval return {ret:.4f} reached arch.target_return={target}: stopping")
                    break
        exit_code = 0
    finally:
        for w in (writer, seed_writer):
            if w is not None:
                w.close()
        if ckpt is not None:
            ckpt.close()
        if wandb is not None:
            if exit_code == 0 and record:
                wandb.summary(_final_summary(record, host))
            wandb.finish(exit_code)
    if not record:  # resumed a finished run: report its last record
        record = _last_record(run_dir)
    if writer is not None and logs.plot:
        plot_learning_curve(run_dir / METRICS_FILE, run_dir / "learning_curve.png", run_name(cfg))
    final = float(record.get("eval/episode_return", math.nan))
    steps_done = int(record.get("step", total_steps))
    print(
        f"final eval return {final:.4f} after {steps_done} steps "
        f"({time.perf_counter() - start:.1f}s, compile {compile_s:.1f}s); outputs in {run_dir}"
    )
    return final


def target_reached(eval_return: float, target: float | None) -> bool:
    """Whether the early stop applies: ``target`` is set and the eval return is at least it."""
    return target is not None and math.isfinite(eval_return) and eval_return >= target


def _log(
    record: dict[str, float],
    per_seed: list[dict[str, float]],
    step: int,
    seeds: list[int],
    writer: JsonlWriter | None,
    seed_writer: JsonlWriter | None,
    wandb: Any,
    logs: DictConfig,
) -> None:
    if writer is not None:
        writer.log(record)
    if seed_writer is not None:
        for seed, seed_record in zip(seeds, per_seed, strict=True):
            seed_writer.log({"step": step, "seed": seed, **seed_record})
    if wandb is not None:
        data = dict(record)
        if per_seed and OmegaConf.select(logs, "wandb.per_seed", default=True):
            for k, seed_record in enumerate(per_seed):
                data.update({f"seed_{k}/{name}": v for name, v in seed_record.items()})
        wandb.log(data, step)


def _save(
    ckpt: Checkpointer, host: HostState, state: Any, key: Any, ret: float, start: float
) -> None:
    saved = HostState(**asdict(host))
    saved.elapsed_s = host.elapsed_s + time.perf_counter() - start
    ckpt.save(host.chunk, checkpoint_tree(state, key), asdict(saved), eval_return=ret)


def _final_summary(record: dict[str, float], host: HostState) -> dict[str, Any]:
    return {
        "final/eval_return": record.get("eval/episode_return"),
        "best/eval_return": host.best_eval_return,
        "final/step": record.get("step"),
    }


def _last_record(run_dir: Path) -> dict[str, Any]:
    path = run_dir / METRICS_FILE
    if not path.exists():
        return {}
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return (
        {k: (math.nan if v is None else v) for k, v in json.loads(lines[-1]).items()}
        if lines
        else {}
    )
