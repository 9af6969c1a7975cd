"""The reduction of a learn chunk's per-update metrics (``stoixlite.tracking.metrics``) against
plain numpy: episode-weighted means and the best per-update return (the per-chunk part of MMER)."""

import math

import numpy as np

from stoixlite.tracking.metrics import BEST_UPDATE_KEY, summarize, summarize_chunk


def _chunk(returns, episodes):
    return {
        "train/episode_return": np.asarray(returns, np.float32),
        "train/episode_length": np.ones(len(returns), np.float32),
        "train/episodes": np.asarray(episodes, np.int32),
        "loss/total": np.arange(len(returns), dtype=np.float32),
    }


def test_best_update_skips_updates_without_episodes():
    # update 2 finished no episode (its mean is 0 by construction and must not count)
    out = summarize_chunk(_chunk([-0.5, -0.2, 0.0, -0.4], [4, 2, 0, 6]))
    assert out[BEST_UPDATE_KEY] == np.float32(-0.2)
    weighted = (-0.5 * 4 + -0.2 * 2 + -0.4 * 6) / 12
    assert math.isclose(out["train/episode_return"], weighted, rel_tol=1e-6)
    assert out["train/episodes"] == 12
    assert out["loss/total"] == 1.5


def test_best_update_nan_when_no_episode_finished():
    out = summarize_chunk(_chunk([0.0, 0.0], [0, 0]))
    assert math.isnan(out[BEST_UPDATE_KEY])
    assert math.isnan(out["train/episode_return"])


def test_best_update_per_seed():
    rng = np.random.default_rng(0)
    returns = rng.uniform(-1, 1, (3, 5)).astype(np.float32)
    episodes = rng.integers(0, 3, (3, 5)).astype(np.int32)
    chunk = {
        "train/episode_return": returns,
        "train/episode_length": np.ones_like(returns),
        "train/episodes": episodes,
    }
    evals = {"return": rng.normal(size=(3, 4)), "length": np.ones((3, 4))}
    record, per_seed = summarize(chunk, evals, seeds=3)
    for k in range(3):
        finished = returns[k][episodes[k] > 0]
        expect = finished.max() if finished.size else math.nan
        got = per_seed[k][BEST_UPDATE_KEY]
        assert (math.isnan(expect) and math.isnan(got)) or got == expect
