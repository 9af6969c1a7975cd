"""Action distributions returned by the policy heads.

Distributions are flax struct dataclasses, so they can cross ``jit``/``scan`` boundaries. All
methods broadcast over any leading axes (typically ``[T, B]``).

* :class:`Categorical`: discrete actions, parameterised by unnormalised ``logits [..., A]``.

A Gaussian head for continuous actions (``Box`` action spaces) plugs in here: implement the same
four methods (``sample``, ``log_prob``, ``entropy``, ``mode``) and return it from a head in
``networks/heads.py``; the PPO loss only uses this interface.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Categorical:
    """Categorical distribution over ``A`` actions; ``logits`` has shape ``[..., A]``."""

    logits: jax.Array

    @property
    def log_probs(self) -> jax.Array:
        """Normalised log-probabilities ``[..., A]``."""
        return jax.nn.log_softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Integer actions of shape ``logits.shape[:-1]`` (Gumbel-max sampling)."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``log p(action)`` for integer ``action`` of shape ``[...]``."""
        log_probs = self.log_probs
        return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """Shannon entropy in nats, shape ``[...]``."""
        log_probs = self.log_probs
        return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)

    def mode(self) -> jax.Array:
        """The greedy action ``argmax logits``."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)
