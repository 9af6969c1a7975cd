"""The window of the last 100 finished episodes (RLlib's ``episode_reward_mean``) against a plain
Python ``deque(maxlen=100)`` fed in the same order, its reading points against integer
arithmetic, and the chunk summary that turns it into the paper's MMER."""

from __future__ import annotations

import math
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.metric_keys import LAST100_COUNT_KEY, LAST100_KEY, LAST100_READS_KEY
from stoixlite.ppo.episode_window import (
    READ_EVERY,
    WINDOW,
    empty_window,
    push_finished,
    reads_at,
    window_mean,
)
from stoixlite.tracking.metrics import LAST100_READ_KEY, summarize_chunk


@pytest.mark.parametrize(
    ("steps", "envs", "p_last"), [(7, 3, 0.3), (64, 8, 0.5), (5, 2, 0.05), (200, 4, 0.9)]
)
def test_window_holds_the_last_100_in_finishing_order(steps, envs, p_last):
    rng = np.random.default_rng(steps * envs)
    push = jax.jit(push_finished)
    window, reference = empty_window(), deque(maxlen=WINDOW)
    for _ in range(6):
        returns = rng.normal(size=(steps, envs)).astype(np.float32)
        last = rng.random((steps, envs)) < p_last
        window = push(window, jnp.asarray(returns), jnp.asarray(last))
        for t in range(steps):  # time-major, then env index
            for n in range(envs):
                if last[t, n]:
                    reference.append(returns[t, n])
        count = int(window.count)
        assert count == len(reference)
        np.testing.assert_array_equal(np.asarray(window.returns)[WINDOW - count :], reference)
        mean = float(window_mean(window))
        expected = float(np.mean(np.asarray(reference, np.float64))) if reference else 0.0
        assert mean == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_an_empty_rollout_leaves_the_window_unchanged():
    window = push_finished(empty_window(), jnp.ones((4, 2)), jnp.zeros((4, 2), bool))
    assert int(window.count) == 0 and float(window_mean(window)) == 0.0
    full = push_finished(window, jnp.arange(300.0).reshape(150, 2), jnp.ones((150, 2), bool))
    again = push_finished(full, jnp.zeros((3, 2)), jnp.zeros((3, 2), bool))
    np.testing.assert_array_equal(again.returns, full.returns)
    np.testing.assert_array_equal(full.returns, np.arange(200.0, 300.0))


@pytest.mark.parametrize("steps_per_update", [8192, 6400, 512, 65_536, 131_072, 100_000, 1])
def test_reading_points_are_the_updates_that_reach_a_multiple_of_65536_steps(steps_per_update):
    updates = jnp.arange(3000, dtype=jnp.int32)
    got = np.asarray(jax.vmap(lambda u: reads_at(u, steps_per_update))(updates))
    before = np.arange(3000, dtype=np.int64) * steps_per_update
    expected = (before + steps_per_update) // READ_EVERY > before // READ_EVERY
    np.testing.assert_array_equal(got, expected)
    # far into a long run the modular arithmetic still holds (no int32 overflow)
    late = 2_000_000_000 // steps_per_update
    u = np.int64(late)
    assert bool(reads_at(jnp.int32(late), steps_per_update)) == bool(
        (u + 1) * steps_per_update // READ_EVERY > u * steps_per_update // READ_EVERY
    )


def test_chunk_summary_keeps_the_end_window_and_the_best_reading():
    chunk = {
        LAST100_KEY: np.array([0.0, 0.5, 0.9, 0.2, 0.4], np.float32),
        LAST100_COUNT_KEY: np.array([0, 3, 40, 100, 100], np.int32),
        LAST100_READS_KEY: np.array([1, 0, 0, 1, 1], np.int32),
    }
    out = summarize_chunk(chunk)
    assert out[LAST100_KEY] == np.float32(0.4)
    assert out[LAST100_READ_KEY] == np.float32(0.4)  # 0.9 was not a reading; update 0 empty
    assert LAST100_COUNT_KEY not in out and LAST100_READS_KEY not in out
    none = summarize_chunk({**chunk, LAST100_READS_KEY: np.zeros(5, np.int32)})
    assert math.isnan(none[LAST100_READ_KEY]) and none[LAST100_KEY] == np.float32(0.4)
    empty = summarize_chunk({**chunk, LAST100_COUNT_KEY: np.zeros(5, np.int32)})
    assert math.isnan(empty[LAST100_KEY]) and math.isnan(empty[LAST100_READ_KEY])
