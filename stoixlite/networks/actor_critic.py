r"""Recurrent actor-critic assembly.

Data flow for one call, time-major (T steps, B environments)::

    obs [T,B,...] -> encoder -> memory(carry, (x, start)) -+-> actor MLP  -> policy head -> dist
                                 |                         +-> critic MLP -> value head -> V [T,B]
                                 +-> new carry (state after step T-1)

The observation of one step is a vector ``[F]`` or an image ``[H, W, C]``; ``uint8`` pixels are
scaled to [0, 1] (:func:`~stoixlite.networks.cnn.network_input`; by the cnn encoder's first
convolution). The encoder is an MLP
(``encoder_layers`` x ``embed_size``) on the observation flattened to ``[T, B, F]``, the
:class:`SetEncoder` (``network.encoder=set``), or with ``network.encoder=cnn`` convolutions over
the image (:class:`~stoixlite.networks.cnn.CNNEncoder`) followed by that same MLP.

``start [T, B]`` marks the first observation of an episode; the memory resets its state before
consuming that step. The actor and critic MLPs (``head_layers`` x ``head_size``) are always
separate. With ``shared_memory=False`` the actor and the critic also each own an encoder and a
memory, and the carry is the tuple ``(actor_carry, critic_carry)``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.networks.cnn import (
    DEFAULT_CHANNELS,
    DEFAULT_KERNELS,
    DEFAULT_SLICE_FRAMES,
    DEFAULT_STRIDES,
    CNNEncoder,
    network_input,
)
from stoixlite.networks.dense import Dense
from stoixlite.networks.distributions import Categorical, Gaussian
from stoixlite.networks.memory import build_memory
from stoixlite.specs import Box, Discrete, Space

ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu}


def activation_fn(name: str):
    """The activation function called ``name`` (one of relu, tanh, gelu, silu, elu)."""
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """``layers`` Dense layers of width ``size`` with ``activation``, orthogonal(sqrt 2) init."""

    size: int
    layers: int
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        for _ in range(self.layers):
            x = act(Dense(self.size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return x


class SetEncoder(nn.Module):
    """Permutation-invariant encoder of a set observation (``network.encoder=set``).

    ``obs [..., D]`` holds the set block ``[capacity * (item_width + 1)]`` (each slot's features,
    then its validity flag; layout ``set_layout = (capacity, item_width)``, see
    :mod:`stoixlite.envs.sets`) followed by any extra features (e.g. ``obs_augment``'s previous
    action and is-first flag). Each item goes through the MLP ``phi`` (``layers`` x ``size``);
    the valid items are pooled

    * ``deepsets`` (Zaheer et al. 2017, "Deep Sets"): ``sum_i valid_i phi(x_i)``;
    * ``attention`` (attention pooling with a learned query per head, as the pooling by
      multi-head attention of Lee et al. 2019, "Set Transformer"): per head
      ``sum_i softmax_i(q . phi(x_i) / sqrt(d)) phi(x_i)`` over the valid items (zeros for an
      empty set);

    then ``rho``: one Dense + activation on ``[pooled, extra]`` -> ``[..., size]``. The output
    depends neither on the order of the slots nor on the features of invalid slots.
    """

    set_layout: tuple[int, int]
    size: int
    layers: int
    activation: str = "relu"
    pooling: str = "deepsets"
    num_heads: int = 4  # attention pooling (SET_POOLING_HEADS in the actor-critic)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        capacity, width = self.set_layout
        block = capacity * (width + 1)
        slots = obs[..., :block].reshape(*obs.shape[:-1], capacity, width + 1)
        valid = slots[..., -1:] > 0.5  # [..., C, 1]
        phi = MLP(self.size, max(self.layers, 1), self.activation, name="phi")(slots[..., :-1])
        phi = jnp.where(valid, phi, 0.0)
        if self.pooling == "deepsets":
            pooled = jnp.sum(phi, axis=-2)
        elif self.pooling == "attention":
            heads = phi.reshape(*phi.shape[:-1], self.num_heads, self.size // self.num_heads)
            query = self.param("query", nn.initializers.normal(1.0), heads.shape[-2:])
            scores = jnp.einsum("...chd,hd->...ch", heads, query) / jnp.sqrt(heads.shape[-1])
            scores = jnp.where(valid, scores, -jnp.inf)
            any_valid = jnp.any(valid, axis=-2, keepdims=True)  # [..., 1, 1]
            probs = jax.nn.softmax(jnp.where(any_valid, scores, 0.0), axis=-2)
            probs = jnp.where(valid, probs, 0.0)
            pooled = jnp.einsum("...ch,...chd->...hd", probs, heads).reshape(*phi.shape[:-2], -1)
        else:
            raise ValueError(f"unknown set pooling {self.pooling!r}; choose deepsets | attention")
        rest = obs[..., block:]
        return MLP(self.size, 1, self.activation, name="rho")(
            jnp.concatenate([pooled, rest], axis=-1)
        )


ENCODERS = ("mlp", "set", "cnn")
SET_POOLINGS = ("deepsets", "attention")
SET_POOLING_HEADS = 4  # heads of attention pooling; network.embed_size must be a multiple


class CategoricalHead(nn.Module):
    """Linear layer to ``num_actions`` logits (orthogonal 0.01 init, as in PPO implementations)."""

    num_actions: int

    @nn.compact
    def __call__(self, x: jax.Array) -> Categorical:
        logits = Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(x)
        return Categorical(logits=logits)


class GaussianHead(nn.Module):
    """Linear layer to the mean of ``action_dim`` Gaussian actions, plus a learned log-std.

    The log-std is a state-independent parameter ``[action_dim]`` (initialised to
    ``init_log_std``), broadcast over the leading axes. Samples are unbounded; the env clips them
    to its action bounds (see :class:`~stoixlite.networks.distributions.Gaussian`).
    """

    action_dim: int
    init_log_std: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array) -> Gaussian:
        mean = Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(0.01))(x)
        log_std = self.param(
            "log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,)
        )
        return Gaussian(mean=mean, log_std=jnp.broadcast_to(log_std, mean.shape))


def policy_head(action_space: Space) -> nn.Module:
    """The policy head for an action space: Categorical for ``Discrete``, Gaussian for ``Box``.

    For ``Box`` the actions are flat vectors ``[A]`` with ``A = prod(shape)`` (envs with a
    multi-dimensional action shape reshape them).
    """
    if isinstance(action_space, Discrete):
        return CategoricalHead(action_space.n)
    if isinstance(action_space, Box):
        return GaussianHead(int(np.prod(action_space.shape, dtype=np.int64)))
    raise TypeError(f"unsupported action space {action_space!r}")


class MemoryTower(nn.Module):
    """encoder -> memory: ``(carry, obs [T,B,*obs_shape], start [T,B]) -> (carry, y [T,B,H])``.

    The encoder is an MLP on the flattened observation, the :class:`SetEncoder`
    (``encoder_type="set"``, needs ``set_layout``), or the
    :class:`~stoixlite.networks.cnn.CNNEncoder` (``encoder_type="cnn"``: ``cnn_channels``,
    ``cnn_kernels``, ``cnn_strides``, ``cnn_slice_frames``; observations ``[T, B, H, W, C]``)
    followed by the MLP.
    """

    memory_name: str
    memory_kwargs: dict[str, Any]
    embed_size: int
    encoder_layers: int
    activation: str
    encoder_type: str = "mlp"
    set_layout: tuple[int, int] | None = None
    set_pooling: str = "deepsets"
    cnn_channels: tuple[int, ...] = DEFAULT_CHANNELS
    cnn_kernels: tuple[int, ...] = DEFAULT_KERNELS
    cnn_strides: tuple[int, ...] = DEFAULT_STRIDES
    cnn_slice_frames: int = DEFAULT_SLICE_FRAMES

    def setup(self) -> None:
        self.convolutions = None
        if self.encoder_type == "set":
            if self.set_layout is None:
                raise ValueError("encoder='set' needs an environment with a set observation")
            self.encoder = SetEncoder(
                tuple(self.set_layout),
                self.embed_size,
                self.encoder_layers,
                self.activation,
                self.set_pooling,
            )
        elif self.encoder_type in ("mlp", "cnn"):
            self.encoder = MLP(self.embed_size, self.encoder_layers, self.activation)
            if self.encoder_type == "cnn":
                self.convolutions = CNNEncoder(
                    tuple(self.cnn_channels),
                    tuple(self.cnn_kernels),
                    tuple(self.cnn_strides),
                    activation_fn(self.activation),
                    self.cnn_slice_frames,
                )
        else:
            raise ValueError(f"unknown encoder {self.encoder_type!r}; choose one of {ENCODERS}")
        self.memory = build_memory(self.memory_name, **self.memory_kwargs)

    def encode(self, obs: jax.Array) -> jax.Array:
        """``obs [T, B, *obs_shape]`` -> the memory's input ``[T, B, E]``."""
        if self.convolutions is not None:  # scales uint8 frames in its first convolution
            x = self.convolutions(obs)  # [T, B, H, W, C] -> [T, B, F]
        else:
            x = network_input(obs)
        return self.encoder(x.reshape(x.shape[:2] + (-1,)))

    def __call__(self, carry: Any, obs: jax.Array, start: jax.Array) -> tuple[Any, jax.Array]:
        return self.memory(carry, (self.encode(obs), start))

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Any:
        memory = build_memory(self.memory_name, parent=None, **self.memory_kwargs)
        return memory.initialize_carry(batch_size)


class ActorCritic(nn.Module):
    """Recurrent actor-critic.

    ``(carry, obs [T,B,*obs_shape], start [T,B]) -> (carry, (dist, value [T,B]))``: one step's
    observation is a vector ``[F]`` or, for ``encoder_type="cnn"``, an image ``[H, W, C]``.
    """

    action_space: Space
    memory_name: str
    memory_kwargs: dict[str, Any]
    embed_size: int = 128
    encoder_layers: int = 1
    head_size: int = 128
    head_layers: int = 1
    activation: str = "relu"
    shared_memory: bool = True
    encoder_type: str = "mlp"
    set_layout: tuple[int, int] | None = None
    set_pooling: str = "deepsets"
    cnn_channels: tuple[int, ...] = DEFAULT_CHANNELS
    cnn_kernels: tuple[int, ...] = DEFAULT_KERNELS
    cnn_strides: tuple[int, ...] = DEFAULT_STRIDES
    cnn_slice_frames: int = DEFAULT_SLICE_FRAMES

    def _tower(self, **kwargs: Any) -> MemoryTower:
        return MemoryTower(
            self.memory_name,
            dict(self.memory_kwargs),
            self.embed_size,
            self.encoder_layers,
            self.activation,
            self.encoder_type,
            self.set_layout,
            self.set_pooling,
            tuple(self.cnn_channels),
            tuple(self.cnn_kernels),
            tuple(self.cnn_strides),
            self.cnn_slice_frames,
            **kwargs,
        )

    def setup(self) -> None:
        self.actor_tower = self._tower()
        if not self.shared_memory:
            self.critic_tower = self._tower()
        self.actor_mlp = MLP(self.head_size, self.head_layers, self.activation)
        self.critic_mlp = MLP(self.head_size, self.head_layers, self.activation)
        self.pi = policy_head(self.action_space)
        self.v = Dense(1, kernel_init=nn.initializers.orthogonal(1.0))

    def __call__(
        self, carry: Any, obs: jax.Array, start: jax.Array
    ) -> tuple[Any, tuple[Any, jax.Array]]:
        if self.shared_memory:
            carry, z = self.actor_tower(carry, obs, start)
            z_critic = z
        else:
            actor_carry, z = self.actor_tower(carry[0], obs, start)
            critic_carry, z_critic = self.critic_tower(carry[1], obs, start)
            carry = (actor_carry, critic_carry)
        value = self.v(self.critic_mlp(z_critic))[..., 0]
        return carry, (self.pi(self.actor_mlp(z)), value)

    @nn.nowrap
    def initialize_carry(self, batch_size: int) -> Any:
        carry = self._tower(parent=None).initialize_carry(batch_size)
        return carry if self.shared_memory else (carry, carry)
