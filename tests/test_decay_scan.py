"""``decay_scan``: the time-invariant diagonal recurrence with resets and its hand-written gradient.

* its states equal an explicit numpy loop (resets drop the carry or the previous state), for
  complex and real decays and multi-axis states;
* its gradients with respect to the decay, the elements and the carry equal ``jax.grad`` of the
  plain ``lax.scan`` recurrence (JAX's complex convention included), also with a start at step 0
  and with no start at all;
* elements given once per state row (``[T, B, *S[:-1]]``, real with a complex decay: FFM's
  ``x~_t 1_c^T``) act as if repeated along the last state axis, gradient included;
* ``steps_since_start`` counts like FFM's step counter.

FFM, LRU and S5 run it for ``scan=sequential``; ``tests/test_memoroid_scan.py`` checks their
outputs, carries and parameter gradients against the associative scan of their monoids.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.memory.decay_scan import decay_scan, steps_since_start

T, B = 11, 3


def _random(key, shape, dtype):
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, shape)
    if dtype == jnp.complex64:
        return (x + 1j * jax.random.normal(k2, shape)).astype(dtype)
    return x.astype(dtype)


def _case(seed, dtype, state_shape, start_prob):
    keys = jax.random.split(jax.random.key(seed), 5)
    decay = 0.9 * _random(keys[0], state_shape, dtype)
    elems = _random(keys[1], (T, B, *state_shape), dtype)
    carry = _random(keys[2], (B, *state_shape), dtype)
    start = jax.random.bernoulli(keys[3], start_prob, (T, B))
    weights = _random(keys[4], (T, B, *state_shape), dtype)
    return decay, elems, start, carry, weights


def _plain_scan(decay, elems, start, carry):
    """The recurrence as written, differentiated by JAX."""

    def body(s, inp):
        e, f = inp
        s = jnp.where(f.reshape(f.shape + (1,) * (s.ndim - 1)), e, decay * s + e)
        return s, s

    return jax.lax.scan(body, carry, (elems, start))[1]


def _loss(scan, weights):
    def loss(decay, elems, carry, start):
        states = scan(decay, elems, start, carry)
        return jnp.sum(jnp.real(weights) * jnp.real(states) + jnp.imag(weights) * jnp.imag(states))

    return loss


CASES = [
    (jnp.complex64, (4, 2), 0.25),
    (jnp.complex64, (5,), 0.0),  # no episode start: the carry flows through every step
    (jnp.float32, (3, 2), 0.4),
    (jnp.float32, (6,), 1.0),  # a start at every step: no state ever carries over
]


@pytest.mark.parametrize("dtype,state_shape,start_prob", CASES)
def test_states_equal_a_numpy_loop(dtype, state_shape, start_prob):
    decay, elems, start, carry, _ = _case(0, dtype, state_shape, start_prob)
    got = np.asarray(jax.jit(decay_scan)(decay, elems, start, carry))
    d, e, s, h = (np.asarray(a) for a in (decay, elems, start, carry))
    expected = []
    for t in range(T):
        keep = ~s[t].reshape((B,) + (1,) * len(state_shape))
        h = np.where(keep, d * h, 0.0) + e[t]
        expected.append(h)
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,state_shape,start_prob", CASES)
def test_gradients_equal_autodiff_of_the_plain_recurrence(dtype, state_shape, start_prob):
    decay, elems, start, carry, weights = _case(1, dtype, state_shape, start_prob)
    start = start.at[0, 0].set(True)  # one row restarts at step 0: its carry gets no gradient
    grads = {
        name: jax.jit(jax.grad(_loss(scan, weights), argnums=(0, 1, 2)))(decay, elems, carry, start)
        for name, scan in (("custom", decay_scan), ("autodiff", _plain_scan))
    }
    names = ("decay", "elems", "carry")
    for got, want, what in zip(grads["custom"], grads["autodiff"], names, strict=True):
        assert got.dtype == want.dtype, what
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)
    assert np.all(np.asarray(grads["custom"][2])[0] == 0.0)  # the restarted row's carry
    if start_prob < 1.0:
        assert np.any(np.asarray(grads["custom"][0]) != 0.0)  # the decay does get a gradient


def test_elements_repeated_along_the_last_state_axis():
    """Real ``[T, B, m]`` elements with a complex ``[m, c]`` decay: the same states and
    gradients as the full complex elements ``x 1_c^T``."""
    m, c = 4, 3
    decay, _, start, carry, weights = _case(2, jnp.complex64, (m, c), 0.25)
    x = jax.random.normal(jax.random.key(5), (T, B, m))

    def full(x):
        return jnp.broadcast_to(x[..., None], (T, B, m, c)).astype(jnp.complex64)

    def repeated(decay, x, start, carry):
        return decay_scan(decay, x, start, carry)

    def broadcast_first(decay, x, start, carry):
        return _plain_scan(decay, full(x), start, carry)

    np.testing.assert_allclose(
        repeated(decay, x, start, carry), broadcast_first(decay, x, start, carry), rtol=1e-5
    )
    got = jax.grad(_loss(repeated, weights), argnums=(0, 1, 2))(decay, x, carry, start)
    want = jax.grad(_loss(broadcast_first, weights), argnums=(0, 1, 2))(decay, x, carry, start)
    for a, b, what in zip(got, want, ("decay", "elems", "carry"), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=what)
    with pytest.raises(ValueError, match="do not fit the state"):
        decay_scan(decay, x[..., :2], start, carry)


def test_steps_since_start_counts_like_ffm():
    start = jax.random.bernoulli(jax.random.key(3), 0.2, (T, 6)).at[:, 0].set(False)
    start = start.at[T - 1, 1].set(True)
    steps = jnp.arange(6, dtype=jnp.int32) * 7
    got = np.asarray(steps_since_start(steps, start))
    count, s = np.asarray(steps), np.asarray(start)
    for t in range(T):
        count = np.where(s[t], 1, count + 1)
    np.testing.assert_array_equal(got, count)
    assert got[0] == 0 + T and got[1] == 1
