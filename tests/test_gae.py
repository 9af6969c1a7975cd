"""GAE against a plain numpy reference with terminations and truncations mid-sequence."""

import numpy as np
import pytest

from stoixlite.ppo.gae import gae_advantages


def numpy_gae(reward, discount, last, truncated, value, bootstrap, final_value, gamma, lam):
    """Textbook per-env backward recursion, written independently of the JAX version.

    ``bootstrap[t]`` is V(true final obs) used only where the episode was truncated at t;
    ``final_value`` is V(obs after the rollout) for the last step when it is not LAST.
    """
    t_len, n = reward.shape
    adv = np.zeros((t_len, n))
    for b in range(n):
        running = 0.0
        for t in reversed(range(t_len)):
            if last[t, b]:
                if truncated[t, b]:
                    target_value = bootstrap[t, b]
                else:  # terminated: no bootstrap
                    target_value = 0.0
                running = reward[t, b] + gamma * target_value - value[t, b]
            else:
                next_v = value[t + 1, b] if t + 1 < t_len else final_value[b]
                delta = reward[t, b] + gamma * next_v - value[t, b]
                running = delta + gamma * lam * (running if t + 1 < t_len else 0.0)
            adv[t, b] = running
    return adv, adv + value


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    t_len, n, gamma, lam = 37, 5, 0.97, 0.9
    reward = rng.normal(size=(t_len, n)).astype(np.float32)
    value = rng.normal(size=(t_len, n)).astype(np.float32)
    bootstrap = rng.normal(size=(t_len, n)).astype(np.float32)
    final_value = rng.normal(size=(n,)).astype(np.float32)
    last = rng.random((t_len, n)) < 0.15
    truncated = last & (rng.random((t_len, n)) < 0.5)
    assert truncated.any() and (last & ~truncated).any()
    discount = np.where(last & ~truncated, 0.0, 1.0).astype(np.float32)
    # next_value as the learner builds it: V(true next obs) everywhere.
    next_value = np.concatenate([value[1:], final_value[None]], axis=0)
    next_value = np.where(truncated, bootstrap, next_value)
    next_value = np.where(last & ~truncated, rng.normal(size=(t_len, n)), next_value)  # ignored

    adv, ret = gae_advantages(
        reward, discount, last, value, next_value.astype(np.float32), gamma, lam
    )
    ref_adv, ref_ret = numpy_gae(
        reward, discount, last, truncated, value, bootstrap, final_value, gamma, lam
    )
    np.testing.assert_allclose(np.asarray(adv), ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ret), ref_ret, rtol=1e-5, atol=1e-5)


def test_truncation_differs_from_termination():
    """Same data, one step flagged truncated vs terminated: only the bootstrap term differs."""
    reward = np.ones((3, 1), np.float32)
    value = np.zeros((3, 1), np.float32)
    next_value = np.full((3, 1), 10.0, np.float32)
    last = np.array([[False], [True], [False]])
    trunc_adv, _ = gae_advantages(
        reward, np.ones((3, 1), np.float32), last, value, next_value, 0.5, 1.0
    )
    term_discount = np.array([[1.0], [0.0], [1.0]], np.float32)
    term_adv, _ = gae_advantages(reward, term_discount, last, value, next_value, 0.5, 1.0)
    assert float(trunc_adv[1, 0]) == pytest.approx(1.0 + 0.5 * 10.0)
    assert float(term_adv[1, 0]) == pytest.approx(1.0)
    # The trace is cut after a LAST, not before it: step 0 still adds 0.5 * A[1] in both cases.
    assert float(trunc_adv[0, 0]) == pytest.approx(1.0 + 5.0 + 0.5 * 6.0)
    assert float(term_adv[0, 0]) == pytest.approx(1.0 + 5.0 + 0.5 * 1.0)
