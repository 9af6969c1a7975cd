"""Categorical and Gaussian distributions vs numpy/scipy references."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from stoixlite.envs.types import Box, Discrete
from stoixlite.networks.actor_critic import CategoricalHead, GaussianHead, policy_head
from stoixlite.networks.distributions import Categorical, Gaussian

RNG = np.random.default_rng(0)


def test_categorical_log_prob_entropy_mode():
    logits = RNG.normal(size=(3, 5, 6)).astype(np.float32) * 2
    dist = Categorical(jnp.asarray(logits))
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    actions = RNG.integers(0, 6, size=(3, 5))
    want = np.log(np.take_along_axis(p, actions[..., None], -1)[..., 0])
    np.testing.assert_allclose(dist.log_prob(jnp.asarray(actions)), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dist.entropy(), stats.entropy(p, axis=-1), rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(), logits.argmax(-1))


def test_categorical_sampling_frequencies():
    logits = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    n = 200_000
    dist = Categorical(jnp.broadcast_to(jnp.asarray(logits), (n, 4)))
    samples = np.asarray(dist.sample(jax.random.PRNGKey(0)))
    assert samples.shape == (n,) and samples.dtype == np.int32
    p = np.exp(logits) / np.exp(logits).sum()
    freq = np.bincount(samples, minlength=4) / n
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(p * (1 - p) / n).max())


def test_gaussian_log_prob_and_entropy_match_scipy():
    mean = RNG.normal(size=(4, 3, 2)).astype(np.float32)
    log_std = RNG.normal(scale=0.5, size=(4, 3, 2)).astype(np.float32)
    actions = RNG.normal(scale=2.0, size=(4, 3, 2)).astype(np.float32)
    dist = Gaussian(jnp.asarray(mean), jnp.asarray(log_std))
    want = stats.norm.logpdf(actions, mean, np.exp(log_std)).sum(-1)
    np.testing.assert_allclose(dist.log_prob(jnp.asarray(actions)), want, rtol=1e-5, atol=1e-5)
    want_h = stats.norm.entropy(mean, np.exp(log_std)).sum(-1)
    np.testing.assert_allclose(dist.entropy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(dist.mode(), mean)
    # A multivariate normal with diagonal covariance agrees too.
    mvn = stats.multivariate_normal(mean[0, 0], np.diag(np.exp(2 * log_std[0, 0])))
    assert float(dist.log_prob(jnp.asarray(actions))[0, 0]) == pytest.approx(
        mvn.logpdf(actions[0, 0]), rel=1e-5
    )


def test_gaussian_sampling_moments():
    n = 200_000
    mean = np.array([1.5, -0.5], np.float32)
    log_std = np.array([np.log(0.3), np.log(2.0)], np.float32)
    dist = Gaussian(
        jnp.broadcast_to(jnp.asarray(mean), (n, 2)), jnp.broadcast_to(jnp.asarray(log_std), (n, 2))
    )
    x = np.asarray(dist.sample(jax.random.PRNGKey(1)))
    assert x.shape == (n, 2) and x.dtype == np.float32
    std = np.exp(log_std)
    assert np.all(np.abs(x.mean(0) - mean) < 5 * std / np.sqrt(n)), x.mean(0)
    np.testing.assert_allclose(x.std(0), std, rtol=0.01)
    # Samples are unbounded (the env clips): independent dims, normal skew/kurtosis.
    assert abs(np.corrcoef(x.T)[0, 1]) < 0.01
    np.testing.assert_allclose(stats.skew(x), 0.0, atol=0.03)
    np.testing.assert_allclose(stats.kurtosis(x), 0.0, atol=0.06)


def test_heads_for_action_spaces():
    x = jnp.ones((5, 3, 8))
    assert isinstance(policy_head(Discrete(4)), CategoricalHead)
    head = policy_head(Box(-2.0, 2.0, (1,)))
    assert isinstance(head, GaussianHead) and head.action_dim == 1
    params = head.init(jax.random.PRNGKey(0), x)
    np.testing.assert_array_equal(params["params"]["log_std"], np.zeros(1))
    dist = head.apply(params, x)
    assert dist.mean.shape == dist.log_std.shape == (5, 3, 1)
    # log-prob and entropy are per step [T, B]; gradients reach the learned log-std.
    a = dist.sample(jax.random.PRNGKey(1))
    assert dist.log_prob(a).shape == dist.entropy().shape == (5, 3)
    grad = jax.grad(lambda p: head.apply(p, x).log_prob(a).sum())(params)
    assert np.all(np.isfinite(grad["params"]["log_std"])) and np.any(grad["params"]["log_std"] != 0)
