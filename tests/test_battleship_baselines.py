"""scripts/battleship_baselines.py: the scripted policies do what they say, and the repeat signal
is computed from GAE as numpy's direct formula gives it."""

from __future__ import annotations

import jax
import numpy as np
from conftest import load_script

from stoixlite.envs.registry import make


def test_scripted_policies():
    bb = load_script("battleship_baselines")
    env = make("popgym/battleship", difficulty="easy")
    out = {}
    for i, (name, policy) in enumerate(bb.policies(env).items()):
        data = bb.play(env, policy, jax.random.PRNGKey(i), 256)
        ret = (data["reward"] * data["live"]).sum(1)
        repeats = (data["repeat"] & data["live"]).sum()
        out[name] = ret.mean()
        assert data["live"][:, 0].all()
        if name == "random":
            assert repeats > 0
        else:  # no policy but the random one fires twice at a cell, so every episode ends by
            # hitting all 12 ship cells within the 64 shots: return = 1 - misses / 52
            assert repeats == 0
            misses = data["live"].sum(1) - 12
            np.testing.assert_allclose(ret, 1 - misses / 52, atol=1e-5)
    assert out["random"] < -0.3 < 0.0 < out["random_no_repeat"] < out["hunt_target"]


def test_repeat_signal_matches_a_direct_gae():
    bb = load_script("battleship_baselines")
    rng = np.random.default_rng(0)
    n, length, gamma, lam = 40, 16, 0.9, 0.6
    ends = rng.integers(11, length + 1, n)  # episode i lives for steps < ends[i]
    live = np.arange(length)[None] < ends[:, None]
    data = {
        "reward": rng.normal(size=(n, length)) * live,
        "repeat": rng.random((n, length)) < 0.4,
        "live": live,
    }
    got = bb.repeat_signal(data, gamma, lam)
    # direct: returns-to-go, the per-step critic, each advantage as the lambda-weighted sum of
    # the TD errors up to the episode's end
    r = data["reward"]
    ret = np.array(
        [
            [sum(gamma**k * r[i, t + k] for k in range(ends[i] - t)) for t in range(length)]
            for i in range(n)
        ]
    )
    value = np.array([ret[live[:, t], t].mean() for t in range(length)] + [0.0])
    adv = np.zeros((n, length))
    for i in range(n):
        for t in range(ends[i]):
            for k in range(ends[i] - t):
                nxt = value[t + k + 1] if t + k + 1 < ends[i] else 0.0
                adv[i, t] += (gamma * lam) ** k * (r[i, t + k] + gamma * nxt - value[t + k])
    sel = live & (np.arange(length) >= 10)
    gap = adv[sel & ~data["repeat"]].mean() - adv[sel & data["repeat"]].mean()
    np.testing.assert_allclose(got["fresh_minus_repeat"], gap, rtol=1e-4)  # float32 GAE
    np.testing.assert_allclose(got["signal_to_noise"], gap / adv[sel].std(), rtol=1e-4)
