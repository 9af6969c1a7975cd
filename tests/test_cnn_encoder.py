"""Image observations through the cnn encoder (``network.encoder=cnn``).

* ``CNNEncoder``: output shapes for time-major and flat batches, equal to the sizes that
  ``conv_sizes`` predicts (and to an independent numpy convolution); the CPU's hand-written
  gradients of ``conv2d`` equal JAX's, also inside a ``lax.scan``, and of uint8 frames those of
  the frames scaled beforehand (bit for bit); the encoder in slices of frames
  (``network.cnn_slice_frames``) gives the same outputs bit for bit and the same gradients up to
  float rounding, and keeps one slice's intermediates; the compiled learn chunk's memory grows by
  a few bytes per byte of uint8 frames, not by a float32 copy of all of them, and slices cut it
  below 60 % of the unsliced encoder's; the actor-critic
  maps ``[T, B, H, W, C]`` uint8 frames to ``[T, B]`` values with finite, non-zero gradients for
  every parameter, reads uint8 frames as float frames / 255, and accepts the mlp encoder on images
  (flattened frames).
* Config: the cnn keys parse as lists, are written back as lists and left out of the checkpoint
  fingerprint unless the cnn encoder is chosen (``cnn_slice_frames`` always); settings that do
  not fit are one line each (more rows in test_config_validation.py and test_bad_inputs.py).
* End to end: ``python -m stoixlite.rec_ppo env=pixel/colour_cue network=gru
  network.encoder=cnn`` trains two chunks, resumes from its checkpoint, and
  ``python -m stoixlite.evaluate`` plays the saved policy (the entry points in this process).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY, compose_config, run_cli, run_plan

from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.parse import parse
from stoixlite.config.strict import ConfigError
from stoixlite.networks.actor_critic import ActorCritic
from stoixlite.networks.cnn import (
    CNNEncoder,
    conv2d,
    conv_layout_error,
    conv_sizes,
    in_slices,
    network_input,
)
from stoixlite.specs import Discrete, image_shape
from stoixlite.tracking.jsonl import read_jsonl

PIXEL = ["env=pixel/colour_cue"]


@pytest.mark.parametrize(
    ("image", "channels", "kernels", "strides"),
    [((16, 16, 3), (16, 32), (3, 3), (2, 2)), ((12, 9, 1), (4, 5, 6), (5, 3, 1), (1, 2, 1))],
)
def test_encoder_output_shape_is_what_conv_sizes_predicts(image, channels, kernels, strides):
    enc = CNNEncoder(channels, kernels, strides)
    frames = jax.random.uniform(jax.random.key(0), (3, 2, *image))
    params = enc.init(jax.random.key(1), frames)
    h, w = conv_sizes(image[0], image[1], kernels, strides)[-1]
    y = enc.apply(params, frames)
    assert y.shape == (3, 2, h * w * channels[-1])
    assert enc.apply(params, frames[0]).shape == (2, h * w * channels[-1])  # any leading axes
    np.testing.assert_allclose(enc.apply(params, frames[0]), y[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [0, 1, 4, 7, 35, 64])
def test_encoder_in_slices_equals_the_whole_batch(size):
    """``slice_frames``: the same parameters; outputs equal bit for bit (each frame is convolved
    on its own), gradients up to float rounding (a kernel's sums over frames, slice by slice),
    with whole slices only (35 = 7 x 5), a remainder (35 = 4 x 8 + 3) and, under ``vmap`` over
    seeds, as training runs it; 0 and sizes of at least the batch do not slice."""
    frames = jax.random.randint(jax.random.key(0), (2, 5, 7, 16, 16, 3), 0, 256).astype(jnp.uint8)
    whole = CNNEncoder((4, 8), (3, 3), (2, 2))
    sliced = CNNEncoder((4, 8), (3, 3), (2, 2), slice_frames=size)
    keys = jax.random.split(jax.random.key(1), 2)
    params = jax.vmap(whole.init)(keys, frames)
    assert jax.tree.map(jnp.shape, jax.vmap(sliced.init)(keys, frames)) == jax.tree.map(
        jnp.shape, params
    )

    def output_and_grad(enc):
        loss = lambda p, x: jnp.sum(jnp.tanh(enc.apply(p, x)) * jnp.arange(72.0))
        grad = jax.jit(jax.vmap(jax.grad(loss)))(params, frames)
        return jax.jit(jax.vmap(enc.apply))(params, frames), grad

    (want, want_grad), (got, got_grad) = output_and_grad(whole), output_and_grad(sliced)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for a, b in zip(jax.tree.leaves(got_grad), jax.tree.leaves(want_grad), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_in_slices_keeps_one_slice_of_intermediates():
    """The gradient of a function applied in slices keeps the input, not its intermediates: the
    compiled program of a 64-times larger intermediate needs a fraction of the memory."""
    x = jnp.ones((512, 64))
    w = jnp.ones((64, 64 * 64))
    fn = lambda w, x: jnp.tanh(x @ w)  # [512, 4096]: 8 MiB of intermediates

    def temp(size: int) -> int:
        loss = lambda w: jnp.sum(in_slices(lambda rows: fn(w, rows), x, size))
        return jax.jit(jax.grad(loss)).lower(w).compile().memory_analysis().temp_size_in_bytes

    assert temp(32) < 0.25 * temp(0), (temp(32), temp(0))


def test_one_convolution_equals_a_numpy_convolution():
    """VALID padding, stride s: output pixel (i, j) sums kernel * the window at (s i, s j)."""
    enc = CNNEncoder((2,), (3,), (2,), activation=lambda x: x)
    frames = jax.random.normal(jax.random.key(0), (1, 7, 8, 3))
    params = enc.init(jax.random.key(1), frames)
    kernel = np.asarray(params["params"]["Conv2D_0"]["kernel"])  # [3, 3, 3, 2]
    bias = np.asarray(params["params"]["Conv2D_0"]["bias"])
    out = np.asarray(enc.apply(params, frames)).reshape(3, 3, 2)
    x = np.asarray(frames[0])
    for i in range(3):
        for j in range(3):
            window = x[2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
            want = np.einsum("hwc,hwco->o", window, kernel) + bias
            np.testing.assert_allclose(out[i, j], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("image", "kernel", "stride"),
    [((9, 9, 3), 3, 1), ((16, 16, 3), 3, 2), ((12, 11, 4), 5, 2), ((13, 13, 2), 4, 3)],
)
def test_conv2d_gradients_equal_jax_autodiff_also_inside_a_scan(image, kernel, stride):
    """The hand-written VJP (the CPU's) against JAX's gradient of the plain convolution, for
    strides that skip the image's last rows (12 - 5 = 7 is odd) and not; the same inside a
    ``lax.scan``, where training takes the gradients."""
    x = jax.random.normal(jax.random.key(0), (2, 5, *image))  # a scan over 2 batches of 5
    w = jax.random.normal(jax.random.key(1), (kernel, kernel, image[-1], 3))
    h, v = conv_sizes(image[0], image[1], [kernel], [stride])[0]
    weights = jax.random.normal(jax.random.key(2), (5, h, v, 3))

    def loss(conv):
        return lambda x, w: jnp.sum(weights * jnp.tanh(conv(x, w)))

    layout = ("NHWC", "HWIO", "NHWC")
    plain = loss(
        lambda x, w: jax.lax.conv_general_dilated(
            x, w, (stride, stride), "VALID", dimension_numbers=layout
        )
    )
    ours = loss(lambda x, w: conv2d(x, w, stride))
    want = jax.jit(jax.grad(plain, argnums=(0, 1)))(x[0], w)
    got = jax.jit(jax.grad(ours, argnums=(0, 1)))(x[0], w)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

    def scanned(f):
        step = jax.grad(f, argnums=(0, 1))
        return jax.jit(lambda xs, w: jax.lax.scan(lambda c, x: (c, step(x, w)), 0, xs)[1])

    for a, b in zip(scanned(ours)(x, w), scanned(plain)(x, w), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_conv2d_of_uint8_frames_equals_that_of_the_scaled_frames():
    """``conv2d`` scales uint8 frames itself (keeping the frames, not a float32 copy, for the
    gradient): output and kernel gradient equal those of the frames scaled beforehand, bit for
    bit, also inside a ``lax.scan``; the frames get no gradient."""
    frames = jax.random.randint(jax.random.key(0), (2, 5, 12, 11, 3), 0, 256).astype(jnp.uint8)
    w = jax.random.normal(jax.random.key(1), (5, 5, 3, 4))
    weights = jax.random.normal(jax.random.key(2), (5, 4, 4, 4))

    def loss(x, w):
        return jnp.sum(weights * jnp.tanh(conv2d(x, w, 2)))

    def both(x, w):
        value, grad = jax.value_and_grad(loss, argnums=1)(x, w)
        scaled_value, scaled_grad = jax.value_and_grad(loss, argnums=1)(network_input(x), w)
        return (value, grad), (scaled_value, scaled_grad)

    (got, want) = jax.jit(both)(frames[0], w)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    scanned = jax.jit(lambda xs, w: jax.lax.scan(lambda c, x: (c, both(x, w)), 0, xs)[1])
    got, want = scanned(frames, w)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert jax.grad(loss, allow_int=True)(frames[0], w).dtype == jax.dtypes.float0


def pixel_learn_temp(envs: int, slice_frames: int) -> tuple[int, int]:
    """``(XLA's temporary bytes of the compiled learn chunk, bytes of the rollout's uint8
    frames)`` of a small gru run on 48 x 48 frames: 32 steps, 4 minibatches of ``envs / 4`` envs
    (``8 envs`` frames each: 128 at 16 envs), a small network whose activations are small beside
    the frames, the cnn encoder convolving ``slice_frames`` frames at a time (0: a minibatch at
    once)."""
    from stoixlite.run.build import build_run

    side, length = 48, 32
    overrides = [
        *PIXEL,
        f"env.kwargs.size={side}",
        "network=gru",
        f"system.rollout_length={length}",
        "system.num_minibatches=4",
        "arch.total_timesteps=512",
        "arch.num_evaluations=1",
        "arch.num_eval_envs=2",
        "network.hidden_size=8",
        "network.embed_size=8",
        "network.head_size=8",
        "network.cnn_channels=[4,8]",
        "network.cnn_kernels=[8,4]",
        "network.cnn_strides=[4,2]",
        f"network.cnn_slice_frames={slice_frames}",
        f"arch.num_envs={envs}",
    ]
    exp = build_run(run_plan(overrides))
    state, _ = exp.init()
    temp = exp.learn.lower(state).compile().memory_analysis().temp_size_in_bytes
    return temp, length * envs * side * side * 3


# Under `pytest -m slow`: it compiles two learn programs of 48 x 48 pixel runs (23 s of CPU) to
# measure their memory; the default run keeps test_encoder_slices_cut_the_learn_programs_memory
# (the memory regression guard) and checks the uint8 buffers
# (test_ppo_update_with_cnn_on_pixels_keeps_uint8_in_the_buffers).
@pytest.mark.slow
def test_learn_program_memory_per_frame_is_a_few_uint8_frames():
    """The compiled learn chunk of a pixel run needs a few bytes of temporary memory per byte of
    the rollout's uint8 frames, not a float32 copy of all of them (4 bytes per byte, on top).

    Measured as the growth of XLA's temporary memory (``memory_analysis``) from 8 to 16 envs over
    the growth of the frames, with the encoder convolving 16 frames at a time: the frames once
    (1), a minibatch of them gathered (1 / num_minibatches) and the activations, one slice at a
    time. It was 6.3 when the bootstrap values converted every next observation (a second uint8
    copy of the frames) to float32 at once and each epoch held a shuffled copy of all frames,
    and 3.3 with a minibatch's frames as float32 in the forward and the backward pass (no
    slices)."""
    (small, small_frames), (large, large_frames) = (pixel_learn_temp(n, 16) for n in (8, 16))
    per_frame_byte = (large - small) / (large_frames - small_frames)
    assert 1.0 < per_frame_byte < 2.0, per_frame_byte


# Under `pytest -m slow` (CI runs it: .ci/run-slow): two pixel learners
# compiled for their memory, about 10 s of CPU. The default run checks that slices give the same
# update as the whole minibatch (above) and that the buffers keep uint8 frames.
@pytest.mark.slow
def test_encoder_slices_cut_the_learn_programs_memory():
    """``network.cnn_slice_frames``: the learn chunk of the run above with the encoder convolving
    16 of a minibatch's 128 frames at a time needs at most 60 % of the temporary memory it needs
    convolving them all at once (0.47 measured: the float32 frames and activations of a whole
    minibatch are gone, the rollout's uint8 frames remain)."""
    sliced, _ = pixel_learn_temp(16, 16)
    whole, _ = pixel_learn_temp(16, 0)
    assert sliced < 0.6 * whole, (sliced, whole)


def test_conv_sizes_and_layout_errors():
    assert conv_sizes(16, 16, (3, 3), (2, 2)) == [(7, 7), (3, 3)]
    assert conv_sizes(84, 84, (8, 4, 3), (4, 2, 1)) == [(20, 20), (9, 9), (7, 7)]  # Nature DQN
    assert conv_layout_error((16, 16, 3), (16, 32), (3, 3), (2, 2)) is None
    key, why = conv_layout_error((16, 16, 3), (8, 8, 8, 8), (3, 3, 3, 3), (2, 2, 2, 2))
    assert key == "cnn_kernels" and "convolution 4's 3x3 kernel" in why and "1x1" in why
    assert conv_layout_error((16, 16, 3), (8,), (3, 3), (1,))[0] == "cnn_kernels"
    assert conv_layout_error((16, 16, 3), (8,), (3,), (1, 1))[0] == "cnn_strides"


def test_uint8_frames_are_scaled_on_device():
    pixels = jnp.asarray([[0, 51, 255]], jnp.uint8)
    np.testing.assert_allclose(network_input(pixels), [[0.0, 0.2, 1.0]], rtol=1e-6)
    assert network_input(pixels).dtype == jnp.float32
    vector = jnp.asarray([[-3.0, 7.5]], jnp.float32)
    np.testing.assert_array_equal(network_input(vector), vector)  # floats as given


def _actor_critic(encoder: str = "cnn", memory: str = "gru") -> ActorCritic:
    return ActorCritic(
        action_space=Discrete(4),
        memory_name=memory,
        memory_kwargs={"hidden_size": 8},
        embed_size=8,
        head_size=8,
        encoder_type=encoder,
        cnn_channels=(4, 8),
    )


def test_actor_critic_on_uint8_frames_has_finite_nonzero_gradients():
    t, b = 5, 3
    net = _actor_critic()
    frames = jax.random.randint(jax.random.key(0), (t, b, 16, 16, 3), 0, 256).astype(jnp.uint8)
    start = jnp.zeros((t, b), bool).at[0].set(True).at[3, 1].set(True)
    carry = net.initialize_carry(b)
    params = jax.jit(net.init)(jax.random.key(1), carry, frames, start)  # compiled: one program
    assert "convolutions" in params["params"]["actor_tower"]
    apply = jax.jit(net.apply)
    _, (dist, value) = apply(params, carry, frames, start)
    assert value.shape == (t, b) and dist.logits.shape == (t, b, 4)
    # uint8 frames are read as float frames / 255
    as_float = frames.astype(jnp.float32) / 255.0
    np.testing.assert_allclose(apply(params, carry, as_float, start)[1][1], value, rtol=1e-6)

    def loss(p):
        _, (d, v) = net.apply(p, carry, frames, start)
        return jnp.sum(v**2) + jnp.sum(d.logits * jnp.arange(4.0))

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
        name = jax.tree_util.keystr(path)
        assert np.all(np.isfinite(np.asarray(g))), name
        assert float(jnp.abs(g).max()) > 0, name


def test_mlp_encoder_reads_images_flattened():
    net = _actor_critic(encoder="mlp", memory="mlp")
    frames = jnp.ones((2, 3, 6, 6, 1), jnp.uint8)
    carry = net.initialize_carry(3)
    params = net.init(jax.random.key(0), carry, frames, jnp.zeros((2, 3), bool))
    assert params["params"]["actor_tower"]["encoder"]["Dense_0"]["kernel"].shape == (36, 8)
    assert net.apply(params, carry, frames, jnp.zeros((2, 3), bool))[1][1].shape == (2, 3)


def test_image_shape_of_spaces():
    from stoixlite.envs.registry import make

    assert image_shape(make("pixel/colour_cue").observation_space) == (16, 16, 3)
    assert image_shape(make("popgym/repeat_first").observation_space) is None
    assert image_shape(Discrete(3)) is None


def test_cnn_keys_parse_round_trip_and_stay_out_of_other_fingerprints():
    cfg = parse(compose_config(PIXEL + ["network.cnn_channels=[8,16,16]", *_three_layers()]))
    assert cfg.network.encoder == "cnn"  # the env's config chooses it
    assert cfg.network.cnn_channels == (8, 16, 16)
    saved = cfg.to_dict()
    assert saved["network"]["cnn_channels"] == [8, 16, 16]  # plain lists in config.yaml
    assert parse(saved) == cfg
    assert config_fingerprint(cfg.to_dict())["network"]["cnn_kernels"] == [3, 3, 3]
    other = parse(compose_config(PIXEL + ["network.cnn_channels=[4,4]"]))
    assert (
        config_fingerprint(other.to_dict())["hash"]
        != config_fingerprint(parse(compose_config(PIXEL)).to_dict())["hash"]
    )
    # Not read by the mlp encoder: not in its fingerprint, which is what it was before the keys
    plain = [parse(compose_config(o)) for o in ([], ["network.cnn_channels=[4]"])]
    fingerprints = [config_fingerprint(c.to_dict()) for c in plain]
    assert "cnn_channels" not in fingerprints[0]["network"]
    assert fingerprints[0]["hash"] == fingerprints[1]["hash"]
    # How many frames the encoder convolves at a time changes no result beyond float rounding:
    # a run resumes with another value, and older checkpoints (before the key) still restore.
    sliced = parse(compose_config(PIXEL + ["network.cnn_slice_frames=0"]))
    assert sliced.network.cnn_slice_frames == 0
    assert "cnn_slice_frames" not in config_fingerprint(sliced.to_dict())["network"]
    assert config_fingerprint(sliced.to_dict()) == config_fingerprint(
        parse(compose_config(PIXEL)).to_dict()
    )


def _three_layers() -> list[str]:
    return ["network.cnn_kernels=[3,3,3]", "network.cnn_strides=[1,2,2]"]


@pytest.mark.parametrize(
    ("overrides", "start", "words"),
    [
        (["network.encoder=cnn"], "network.encoder='cnn' is invalid", "no image observation"),
        (PIXEL + ["network.cnn_kernels=[3]"], "network.cnn_kernels=[3] is invalid", "one entry"),
        (
            PIXEL
            + ["network.cnn_channels=[8,8,8,8]", "network.cnn_kernels=[3,3,3,3]"]
            + ["network.cnn_strides=[2,2,2,2]"],
            "network.cnn_kernels=[3, 3, 3, 3] is invalid",
            "convolution 4's 3x3 kernel is larger than the 1x1 left",
        ),
        (PIXEL + ["network.cnn_kernels=[17,1]"], "network.cnn_kernels=[17, 1]", "16x16 frames"),
        (PIXEL + ["network.cnn_strides=[0,1]"], "network.cnn_strides=[0, 1]", "positive"),
        (PIXEL + ["network.cnn_channels=[]"], "network.cnn_channels=[]", "non-empty"),
        (PIXEL + ["env.obs_augment=true"], "env.obs_augment=True is invalid", "image"),
        (PIXEL + ["network.encoder=set"], "network.encoder='set' is invalid", "no set"),
    ],
)
def test_settings_that_do_not_fit_are_one_line(overrides, start, words):
    with pytest.raises(ConfigError) as err:
        parse(compose_config(overrides))
    message = str(err.value)
    assert "\n" not in message and message.startswith(start) and words in message, message


def test_obs_augment_wrapper_refuses_images():
    from stoixlite.envs.registry import make
    from stoixlite.envs.wrappers import ObsAugmentWrapper

    with pytest.raises(ValueError, match="image observations"):
        ObsAugmentWrapper(make("pixel/colour_cue"))


@pytest.mark.slow(
    reason="a pixel run through the command line, resumed and evaluated; the cnn's "
    "rollout/replay identity runs by default"
)
def test_cli_trains_gru_cnn_on_pixels_resumes_and_evaluates(tmp_path, capsys, monkeypatch):
    """The command of docs/envs.md, tiny: two chunks, a resume that continues, and the
    evaluator on the saved checkpoint; the CLI entry points run in this process (``run_cli``,
    ``stoixlite.evaluate.main``; tests/test_cli.py runs the command in a fresh process)."""
    from stoixlite.evaluate import main as evaluate

    run_dir = tmp_path / "run"
    small = [o for o in TINY if not o.startswith("arch.total_timesteps")]
    command = [*PIXEL, "network=gru"]
    tiny = ["network.encoder=cnn", *small, "network.cnn_channels=[4,8]", "logger.plot=false"]
    first = command + tiny + ["arch.total_timesteps=256", f"hydra.run.dir={run_dir}"]
    code, out, err = run_cli(first, capsys, monkeypatch)
    assert code == 0, err[-2000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [128, 256]
    for r in records:
        assert r["loss/first_ratio_max_dev"] < 1e-5
        assert math.isfinite(r["loss/total"]) and r["train/episode_length"] == 6.0
        assert 0.0 <= r["eval/episode_return"] <= 1.0
    resume = [f"resume={run_dir}", "arch.total_timesteps=384", "arch.num_evaluations=3"]
    code, out, err = run_cli(resume, capsys, monkeypatch)
    assert code == 0, err[-2000:]
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [128, 256, 384]
    assert evaluate([str(run_dir), "--episodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint 3, 4 episodes, greedy" in out, out  # after chunk 3
    mean = float(out.strip().splitlines()[-1].split("|")[2].split("±")[0])
    assert 0.0 <= mean <= 1.0, out


def test_ppo_update_with_cnn_on_pixels_keeps_uint8_in_the_buffers():
    from stoixlite.ppo.rollout import rollout

    exp = build_pixel_run(["network=gru"])
    state = jax.jit(exp.init_state)(jax.random.PRNGKey(0), exp.hyper)
    assert state.timestep.observation.dtype == jnp.uint8
    _, traj, _, ends = jax.jit(
        lambda s: rollout(exp.network.apply, exp.env, s, 4, record_next_obs=True)
    )(state)
    assert traj.obs.dtype == jnp.uint8 and traj.obs.shape == (4, 4, 16, 16, 3)
    assert traj.next_obs.dtype == jnp.uint8
    assert ends.first_obs.dtype == ends.final_obs.dtype == jnp.uint8
    assert ends.first_obs.shape == ends.final_obs.shape == (4, 16, 16, 3)


def build_pixel_run(overrides: list[str]):
    from stoixlite.run.build import build_run

    return build_run(run_plan(TINY + PIXEL + ["network.cnn_channels=[4,8]", *overrides]))
