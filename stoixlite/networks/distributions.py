"""Action distributions returned by the policy heads.

Distributions are flax struct dataclasses, so they can cross ``jit``/``scan`` boundaries. All
methods broadcast over any leading axes (typically ``[T, B]``).

* :class:`Categorical`: discrete actions, parameterised by unnormalised ``logits [..., A]``.
* :class:`Gaussian`: continuous actions (``Box`` action spaces), a diagonal normal over
  ``A`` action dimensions. Samples are *unbounded*: the environment clips them to its bounds
  (as gymnasium's Pendulum and popgym's pendulums do), and the log-prob is that of the unclipped
  sample, which is what the rollout stores and PPO replays. (Clipped-in-env rather than
  tanh-squashed: no Jacobian correction, exact entropy, and the greedy ``mode`` is the mean.)

Every distribution implements the same four methods (``sample``, ``log_prob``, ``entropy``,
``mode``); the PPO loss only uses this interface. A distribution whose actions are integers in
``0..A-1`` by construction says so with a static ``support_size = A`` (:class:`Categorical`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class Categorical:
    """Categorical distribution over ``A`` actions; ``logits`` has shape ``[..., A]``."""

    logits: jax.Array

    @property
    def support_size(self) -> int:
        """Static ``A``: every sample and the mode are integers in ``0..A-1`` (the rollout then
        tells the env its actions are valid: :func:`stoixlite.envs.types.actions_in_range`)."""
        return self.logits.shape[-1]

    @property
    def log_probs(self) -> jax.Array:
        """Normalised log-probabilities ``[..., A]``."""
        return jax.nn.log_softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Integer actions of shape ``logits.shape[:-1]`` (Gumbel-max sampling)."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``log p(action)`` for integer ``action`` of shape ``[...]``."""
        # One-hot contraction rather than a gather: its gradient is a multiply, not a scatter
        # (scatters are slow on XLA:CPU).
        one_hot = jax.nn.one_hot(action, self.logits.shape[-1], dtype=self.logits.dtype)
        return jnp.sum(self.log_probs * one_hot, axis=-1)

    def entropy(self) -> jax.Array:
        """Shannon entropy in nats, shape ``[...]``."""
        log_probs = self.log_probs
        return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)

    def mode(self) -> jax.Array:
        """The greedy action ``argmax logits``."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)


@struct.dataclass
class Gaussian:
    """Diagonal normal over ``A`` action dimensions: ``mean [..., A]``, ``log_std [..., A]``.

    Samples, log-probs and entropies treat the ``A`` dimensions as independent (summed over the
    last axis). Actions are unbounded floats ``[..., A]``; the env clips them (module docstring).
    """

    mean: jax.Array
    log_std: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        """Float actions ``[..., A]``: ``mean + exp(log_std) * N(0, 1)``."""
        noise = jax.random.normal(key, jnp.shape(self.mean), jnp.result_type(self.mean))
        return self.mean + jnp.exp(self.log_std) * noise

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``log p(action)`` summed over the action dimensions, shape ``[...]``."""
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * jnp.square(z) - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        """Differential entropy in nats, ``sum(log_std + 0.5 log(2 pi e))``, shape ``[...]``."""
        log_std = jnp.broadcast_to(self.log_std, jnp.shape(self.mean))
        return jnp.sum(log_std + 0.5 * (_LOG_2PI + 1.0), axis=-1)

    def mode(self) -> jax.Array:
        """The most likely action: the mean ``[..., A]``."""
        return self.mean
