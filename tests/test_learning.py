"""Learning regression: GRU PPO solves CartPole-v1 within a small budget (PureJaxRL defaults)."""

from __future__ import annotations

from conftest import compose_config

from stoixlite.metrics import read_jsonl
from stoixlite.rec_ppo import train


def test_gru_ppo_learns_cartpole(tmp_path):
    cfg = compose_config(
        [
            "env=gymnax/CartPole-v1",
            "network=gru",
            "network.activation=tanh",
            "arch.num_envs=4",
            "arch.total_timesteps=250000",
            "arch.num_evaluations=4",
            "arch.num_eval_envs=16",
            "system.lr=0.00025",
            "logger.progress=false",
            "logger.plot=false",
        ]
    )
    train(cfg, tmp_path)
    returns = [r["eval/episode_return"] for r in read_jsonl(tmp_path / "metrics.jsonl")]
    assert max(returns) >= 400, returns
