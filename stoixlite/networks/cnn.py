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

The encoder convolves at most ``slice_frames`` frames at a time (``network.cnn_slice_frames``,
default :data:`DEFAULT_SLICE_FRAMES`; :func:`in_slices`): a training minibatch's frames (4,096
frames of 128 x 128 x 3 at 128 envs x 128 steps and 4 minibatches: 0.75 GiB as float32 per seed,
the arcade stack's first convolution's output 0.23 GiB) are convolved slice after slice under
``jax.checkpoint``, and the backward pass recomputes each slice's activations from the ``uint8``
frames instead of keeping them: one more forward pass of the convolutions for a bound of one
slice's float32 frames and activations. Outputs are those of the whole batch bit for bit; the
kernels' gradients, summed slice by slice, agree up to float rounding. The rollout's and the
evaluator's steps (one frame per env) are smaller than a slice and run as one batch.

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
DEFAULT_SLICE_FRAMES = 256  # network.cnn_slice_frames: frames convolved at a time (in_slices)


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


Weights = tuple[jax.Array, jax.Array]  # one convolution's kernel [k, k, C, D] and bias [D]


class Conv2D(nn.Module):
    """One convolution of :func:`conv2d` with a bias: ``[N, H, W, in_channels] -> [N, h, w,
    features]``. Parameters ``kernel [size, size, in_channels, features]`` (orthogonal(sqrt 2), as
    the dense layers) and ``bias [features]`` (zeros), named as in ``flax.linen.Conv``; the
    encoder reads them as :data:`Weights` for :func:`convolutions`."""

    features: int
    size: int
    stride: int
    in_channels: int

    def setup(self) -> None:
        shape = (self.size, self.size, self.in_channels, self.features)
        self.kernel = self.param("kernel", nn.initializers.orthogonal(np.sqrt(2)), shape)
        self.bias = self.param("bias", nn.initializers.zeros, (self.features,))

    def __call__(self, x: jax.Array) -> jax.Array:
        return conv2d(x, self.kernel, self.stride) + self.bias


def convolutions(
    weights: Sequence[Weights],
    strides: Sequence[int],
    activation: Callable[[jax.Array], jax.Array],
    images: jax.Array,
) -> jax.Array:
    """The encoder as a pure function: ``images [N, H, W, C]`` (float or ``uint8``) through each
    convolution (:func:`conv2d`, plus its bias, then ``activation``) -> ``[N, h * w * D]``."""
    x = images
    for (kernel, bias), stride in zip(weights, strides, strict=True):
        x = activation(conv2d(x, kernel, stride) + bias)
    return x.reshape(x.shape[0], -1)


def in_slices(fn: Callable[[jax.Array], jax.Array], x: jax.Array, size: int) -> jax.Array:
    """``fn(x)`` for ``x [N, ...]`` and a ``fn`` that maps each row on its own (``[n, ...] ->
    [n, ...]``), computed ``size`` rows at a time, each slice recomputed for the gradient.

    ``size <= 0`` or ``N <= size``: ``fn(x)`` as it is. Otherwise a ``lax.map`` over the
    ``N // size`` whole slices (read from ``x`` in place, ``dynamic_slice``) and one call on the
    rest, each a ``jax.checkpoint`` of ``fn``: what the backward pass keeps is ``x`` itself, and
    ``fn``'s intermediates exist for one slice at a time, in the forward pass and again in the
    backward one (which computes them a second time). Values equal ``fn(x)`` where ``fn``'s rows
    do not depend on the batch's size; gradients summed over rows (a kernel's) are summed slice by
    slice, equal up to float rounding."""
    rows = x.shape[0]
    if size <= 0 or rows <= size:
        return fn(x)
    # The slice is cut inside the checkpoint: a slice cut outside would be a saved input of
    # every step, a copy of all of x stacked by the loop.
    sliced = jax.checkpoint(lambda start: fn(jax.lax.dynamic_slice_in_dim(x, start, size)))
    whole = rows // size
    y = jax.lax.map(sliced, jnp.arange(whole) * size)
    y = y.reshape((whole * size,) + y.shape[2:])
    if whole * size < rows:
        y = jnp.concatenate([y, jax.checkpoint(fn)(x[whole * size :])])
    return y


class CNNEncoder(nn.Module):
    """Convolutions over images: ``[..., H, W, C]`` float or ``uint8`` (scaled by the first
    convolution, :func:`conv2d`) -> ``[..., F]`` with ``F = h * w * channels[-1]``
    (``(h, w)``: the last of :func:`conv_sizes`).

    Any number of leading axes (``[T, B]`` in the actor-critic) is flattened into one batch axis
    of ``N`` images and restored after. Each layer is a :class:`Conv2D`; the layers run as
    :func:`convolutions`, ``slice_frames`` images at a time when ``N`` is larger
    (:func:`in_slices`; 0: all at once): the float32 activations of a training minibatch's
    frames then never exist for more than one slice, at the price of computing the
    convolutions' forward pass a second time for the gradient.
    """

    channels: tuple[int, ...]
    kernels: tuple[int, ...]
    strides: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array] = nn.relu
    slice_frames: int = 0  # the actor-critic passes network.cnn_slice_frames

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        if images.ndim < 3:
            raise ValueError(
                f"the cnn encoder needs image observations [..., H, W, C], got shape {images.shape}"
            )
        lead = images.shape[:-3]
        x = images.reshape((-1,) + images.shape[-3:])
        inputs = (x.shape[-1], *self.channels[:-1])
        layers = [
            Conv2D(*spec)
            for spec in zip(self.channels, self.kernels, self.strides, inputs, strict=True)
        ]
        weights = [(layer.kernel, layer.bias) for layer in layers]
        encode = partial(convolutions, weights, self.strides, self.activation)
        return in_slices(encode, x, self.slice_frames).reshape(lead + (-1,))
