"""The compiled finiteness check run on the learner's parameters after every learn chunk."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def all_finite(tree: Any) -> jax.Array:
    """bool scalar: every element of every floating-point leaf of ``tree`` is finite.

    Integer and boolean leaves are ignored (always finite); an empty tree is finite. Works on any
    leading axes (e.g. the ``[S]`` seed axis of a multi-seed learner state): the result is one
    flag for the whole tree. One fused reduction per leaf, no host round trip.
    """
    flags = [
        jnp.all(jnp.isfinite(leaf))
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(flags)) if flags else jnp.asarray(True)
