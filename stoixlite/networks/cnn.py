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
checkpoints: a quarter of float32's memory); :func:`network_input` converts them on device, inside
the first convolution (:func:`conv2d` of ``uint8`` frames): what that convolution keeps for its
gradient is the ``uint8`` frames, and their float32 copy lives only while the forward
convolution, and again the kernel gradient, reads it, so a minibatch of frames is never held as
float32 from the forward pass to the backward one.

The gradients of a convolution inside a loop (PPO's minibatch ``lax.scan``) ran 4-10x slower on
XLA:CPU (JAX 0.10) than the same gradients outside a loop, which compute bit for bit what the
form below computes, as fast: inside a loop body XLA does not arrive at that form by itself. On
the CPU :func:`conv2d` therefore has a hand-written VJP that writes both gradients so, with
the transposed operands materialised (:func:`~stoixlite.networks.contract.materialised`, as the
dense layers' weight gradients): the weight gradient convolves the input (channels as batch,
samples as features) with the output gradient (dilated by the stride), the input gradient
convolves the output gradient (dilated by the stride, padded) with the flipped kernel. Results
equal JAX's own gradients up to float rounding (tests/test_cnn_encoder.py); other backends keep
JAX's (docs/benchmarks.md, "Image observations: the cnn encoder").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.networks.contract import materialised

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


# Layouts of every convolution here: images [N, H, W, C], kernels [kh, kw, C_in, C_out].
_LAYOUT = ("NHWC", "HWIO", "NHWC")


def _convolve(
    x: jax.Array,
    kernel: jax.Array,
    padding: Sequence[tuple[int, int]] = ((0, 0), (0, 0)),
    lhs_dilation: int = 1,
    rhs_dilation: int = 1,
    stride: int = 1,
) -> jax.Array:
    return jax.lax.conv_general_dilated(
        x,
        kernel,
        (stride, stride),
        tuple(padding),
        lhs_dilation=(lhs_dilation, lhs_dilation),
        rhs_dilation=(rhs_dilation, rhs_dilation),
        dimension_numbers=_LAYOUT,
    )


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv2d_cpu(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    return _convolve(network_input(x), kernel, stride=stride)


def _conv2d_cpu_fwd(
    x: jax.Array, kernel: jax.Array, stride: int
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _convolve(network_input(x), kernel, stride=stride), (x, kernel)


def _conv2d_cpu_bwd(
    stride: int, saved: tuple[jax.Array, jax.Array], grad: jax.Array
) -> tuple[jax.Array | None, jax.Array]:
    """Both gradients of :func:`conv2d` as canonical convolutions (module docstring).

    ``x [N, H, W, C]``, ``kernel [k, k, C, D]``, ``grad [N, h, w, D]``. Weight gradient: ``x`` as
    ``[C, H, W, N]`` (transposed as saved, ``uint8`` frames then scaled) convolved with ``grad``
    as a ``[h, w, N, D]`` kernel dilated by the stride gives ``[C, >= k, >= k, D]`` (larger where
    the stride skipped the image's last rows), cut to ``k`` and laid out as ``[k, k, C, D]``.
    Input gradient (``None`` for integer frames, which have none): ``grad`` dilated by the stride
    and padded by ``k - 1`` (plus those skipped rows at the end) convolved with the kernel flipped
    in space, its channel axes swapped (``[k, k, D, C]``)."""
    x, kernel = saved
    k = kernel.shape[0]
    images = network_input(materialised(jnp.transpose(x, (3, 1, 2, 0))))
    grads = materialised(jnp.transpose(grad, (1, 2, 0, 3)))
    d_kernel = _convolve(images, grads, rhs_dilation=stride)[:, :k, :k, :]
    d_kernel = jnp.transpose(d_kernel, (1, 2, 0, 3))
    if jnp.issubdtype(x.dtype, jnp.integer):
        return None, d_kernel
    skipped = [x.shape[i] - ((grad.shape[i] - 1) * stride + k) for i in (1, 2)]
    flipped = materialised(jnp.transpose(jnp.flip(kernel, (0, 1)), (0, 1, 3, 2)))
    padding = [(k - 1, k - 1 + rest) for rest in skipped]
    d_x = _convolve(grad, flipped, padding, lhs_dilation=stride)
    return d_x, d_kernel


_conv2d_cpu.defvjp(_conv2d_cpu_fwd, _conv2d_cpu_bwd)


def conv2d(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """``x [N, H, W, C]`` convolved with ``kernel [k, k, C, D]``, ``VALID`` padding, stride
    ``stride`` -> ``[N, h, w, D]`` (:func:`conv_sizes`); on the CPU differentiated by the
    hand-written VJP of the module docstring, elsewhere by JAX.

    ``x`` may be float or frames of integers (``uint8``): those are converted by
    :func:`network_input` inside, and the gradient keeps ``x`` as given (on the CPU the VJP
    saves it; elsewhere the conversion is recomputed for the gradient, ``jax.checkpoint``), so
    their float32 copy is not held between the forward and the backward pass."""
    if jax.default_backend() == "cpu":
        return _conv2d_cpu(x, kernel, stride)
    if jnp.issubdtype(x.dtype, jnp.integer):
        scaled = jax.checkpoint(lambda f, w: _convolve(network_input(f), w, stride=stride))
        return scaled(x, kernel)
    return _convolve(x, kernel, stride=stride)


class Conv2D(nn.Module):
    """One convolution of :func:`conv2d` with a bias: ``[N, H, W, C] -> [N, h, w, features]``.
    Parameters ``kernel [size, size, C, features]`` (orthogonal(sqrt 2), as the dense layers) and
    ``bias [features]`` (zeros), named as in ``flax.linen.Conv``."""

    features: int
    size: int
    stride: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        shape = (self.size, self.size, x.shape[-1], self.features)
        kernel = self.param("kernel", nn.initializers.orthogonal(np.sqrt(2)), shape)
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        return conv2d(x, kernel, self.stride) + bias


class CNNEncoder(nn.Module):
    """Convolutions over images: ``[..., H, W, C]`` float or ``uint8`` (scaled by the first
    convolution, :func:`conv2d`) -> ``[..., F]`` with ``F = h * w * channels[-1]``
    (``(h, w)``: the last of :func:`conv_sizes`).

    Any number of leading axes (``[T, B]`` in the actor-critic) is flattened into one batch axis
    for the convolutions and restored after. Each layer is a :class:`Conv2D`.
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
        for features, size, stride in zip(self.channels, self.kernels, self.strides, strict=True):
            x = self.activation(Conv2D(features, size, stride)(x))
        return x.reshape(lead + (-1,))
