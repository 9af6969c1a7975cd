"""Image observations in the network: their scaling and the convolutional encoder.

``network.encoder=cnn`` reads observations ``[T, B, H, W, C]`` (an image observation space,
:func:`stoixlite.specs.image_shape`) with :class:`CNNEncoder`: a Nature-DQN-style stack of
convolutions (Mnih et al. 2015, "Human-level control through deep reinforcement learning"),
``VALID`` padding, the network's activation after each, no pooling, then flattened per step. The
actor-critic then applies its dense embedding (``encoder_layers`` x ``embed_size``) and the memory,
as for vector observations. Layer ``i`` has ``channels[i]`` output channels, a square kernel of
``kernels[i]`` pixels and stride ``strides[i]``; a side of ``n`` pixels becomes
``(n - kernel) // stride + 1`` (:func:`conv_sizes`), which must stay at least 1
(:func:`conv_layout_error`, checked with the config before anything compiles).

The default (``configs/actor_critic/default.yaml``: 16 and 32 channels, 3x3 kernels, stride 2)
is smaller than Nature-DQN's (32/64/64 channels, kernels 8/4/3, strides 4/2/1, made for 84x84
frames), which would not fit the 16x16 frames of ``pixel/colour_cue``.

Observations may stay ``uint8`` everywhere outside the network (env, rollout buffers,
checkpoints: a quarter of float32's memory); :func:`network_input` converts them on device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

PIXEL_MAX = 255.0  # uint8 intensities 0..255 are scaled to [0, 1]
# The default stack (network.cnn_channels, cnn_kernels, cnn_strides; see the module docstring).
DEFAULT_CHANNELS = (16, 32)
DEFAULT_KERNELS = (3, 3)
DEFAULT_STRIDES = (2, 2)


def network_input(obs: jax.Array) -> jax.Array:
    """Observations as the encoders read them: ``uint8`` pixel intensities scaled to float32
    ``[0, 1]``, any other dtype cast to float32 (values unchanged). Same shape as ``obs``."""
    if obs.dtype == jnp.uint8:
        return obs.astype(jnp.float32) / PIXEL_MAX
    return obs.astype(jnp.float32)


def conv_sizes(
    height: int, width: int, kernels: Sequence[int], strides: Sequence[int]
) -> list[tuple[int, int]]:
    """``(height, width)`` of the image after each convolution (``VALID`` padding): a side of
    ``n`` pixels becomes ``(n - kernel) // stride + 1``; 0 or less once a kernel is larger than
    the image it is applied to (and every later size is then 0)."""
    sizes = []
    for kernel, stride in zip(kernels, strides, strict=True):
        height, width = ((n - kernel) // stride + 1 if n >= kernel else 0 for n in (height, width))
        sizes.append((height, width))
    return sizes


def conv_layout_error(
    image: tuple[int, int, int],
    channels: Sequence[int],
    kernels: Sequence[int],
    strides: Sequence[int],
) -> tuple[str, str] | None:
    """``(key, what is allowed)`` when the convolutions do not fit an image ``(H, W, C)``: a
    ``network.cnn_*`` list whose length differs from ``cnn_channels``'s, or a kernel larger
    than the image left by the layers before it; ``None`` when they fit."""
    layers = len(channels)
    for key, values in (("cnn_kernels", kernels), ("cnn_strides", strides)):
        if len(values) != layers:
            return key, (
                f"needs one entry per convolution: network.cnn_channels has {layers} "
                f"({list(channels)})"
            )
    height, width = image[:2]
    sides = [(height, width), *conv_sizes(height, width, kernels, strides)]
    for i, kernel in enumerate(kernels):
        if min(sides[i + 1]) < 1:
            h, w = sides[i]
            image_there = f"the {h}x{w} frames"
            if i > 0:
                image_there = (
                    f"the {h}x{w} left of the {height}x{width} frames after convolution {i}"
                )
            return "cnn_kernels", (
                f"convolution {i + 1}'s {kernel}x{kernel} kernel is larger than {image_there} "
                f"(network.cnn_strides={list(strides)}; each convolution maps a side of n pixels "
                "to (n - kernel) // stride + 1): use smaller kernels or strides, or fewer "
                "convolutions"
            )
    return None


class CNNEncoder(nn.Module):
    """Convolutions over images: ``[..., H, W, C]`` float -> ``[..., F]`` with
    ``F = h * w * channels[-1]`` (``(h, w)``: the last of :func:`conv_sizes`).

    Any number of leading axes (``[T, B]`` in the actor-critic) is flattened into one batch axis
    for the convolutions and restored after. Kernels use orthogonal(sqrt 2) initialisation and
    zero biases, as the dense layers.
    """

    channels: tuple[int, ...]
    kernels: tuple[int, ...]
    strides: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array] = nn.relu

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        if images.ndim < 3:
            raise ValueError(
                f"the cnn encoder needs image observations [..., H, W, C], got shape {images.shape}"
            )
        lead = images.shape[:-3]
        x = images.reshape((-1,) + images.shape[-3:])
        for features, kernel, stride in zip(self.channels, self.kernels, self.strides, strict=True):
            conv = nn.Conv(
                features,
                (kernel, kernel),
                strides=(stride, stride),
                padding="VALID",
                kernel_init=nn.initializers.orthogonal(np.sqrt(2)),
            )
            x = self.activation(conv(x))
        return x.reshape(lead + (-1,))
