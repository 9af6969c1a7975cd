"""Recurrent PPO entry point: ``python -m stoixlite.rec_ppo [overrides]``.

Composes the Hydra config (``configs/`` next to the package, so it works from any working
directory), validates it before compiling anything, then runs the host loop: compiled learn
chunks, evaluation between chunks, JSON-lines metrics, progress bar, learning-curve plot.
Returns the final mean evaluation return (what Hydra sweepers optimise).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import hydra
import jax
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from stoixlite.config import ConfigError, validate

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
# `${slug:env.name}` in run directory names: "popgym/repeat_previous" -> "popgym-repeat_previous".
if not OmegaConf.has_resolver("slug"):
    OmegaConf.register_new_resolver("slug", lambda value: str(value).replace("/", "-"))


def run_name(cfg: DictConfig) -> str:
    return f"{cfg.env.name}[{cfg.env.difficulty or '-'}] {cfg.network.name} seed={cfg.arch.seed}"


def train(cfg: DictConfig, run_dir: Path) -> float:
    """Train one agent as configured, writing outputs to ``run_dir``; returns the final eval return."""
    from stoixlite.experiment import build_experiment
    from stoixlite.metrics import JsonlWriter, summarize_chunk, summarize_eval
    from stoixlite.plotting import plot_learning_curve
    from stoixlite.progress import TrainingProgress

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    exp = build_experiment(cfg)
    key = jax.random.PRNGKey(cfg.arch.seed)
    key, init_key = jax.random.split(key)
    state = exp.init_state(init_key)

    start = time.perf_counter()
    learn_chunk = exp.learn_chunk.lower(state).compile()
    compile_s = time.perf_counter() - start
    writer = JsonlWriter(run_dir / "metrics.jsonl") if cfg.logger.jsonl else None
    num_chunks = cfg.arch.num_evaluations
    total_steps = exp.steps_per_chunk * num_chunks
    record: dict[str, float] = {}
    with TrainingProgress(total_steps, run_name(cfg), enabled=cfg.logger.progress) as progress:
        for chunk in range(num_chunks):
            tic = time.perf_counter()
            state, chunk_metrics = learn_chunk(state)
            chunk_metrics = jax.device_get(chunk_metrics)
            train_s = time.perf_counter() - tic
            key, eval_key = jax.random.split(key)
            eval_result = jax.device_get(exp.evaluate(state.params, eval_key))
            step = exp.steps_per_chunk * (chunk + 1)
            record = {
                "step": step,
                "update": exp.ppo.updates_per_chunk * (chunk + 1),
                **summarize_chunk(chunk_metrics),
                "train/sps": exp.steps_per_chunk / train_s,
                **summarize_eval(eval_result),
                "time/elapsed_s": time.perf_counter() - start,
                "time/compile_s": compile_s,
            }
            if writer is not None:
                writer.log(record)
            progress.update(step, record)
    if writer is not None:
        writer.close()
        if cfg.logger.plot:
            plot_learning_curve(run_dir / "metrics.jsonl", run_dir / "learning_curve.png", run_name(cfg))
    final = record["eval/episode_return"]
    print(
        f"final eval return {final:.4f} after {total_steps} steps "
        f"({time.perf_counter() - start:.1f}s, compile {compile_s:.1f}s); outputs in {run_dir}"
    )
    return final


@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    logging.getLogger("jax").setLevel(logging.WARNING)
    try:
        validate(cfg)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    return train(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
