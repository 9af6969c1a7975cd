"""``pixel/colour_cue``, the tiny pixel memory task (the generic env contract, auto-reset and
invalid actions are checked for it by test_env_contract.py and test_invalid_actions.py).

Frames are decoded in numpy, independently of the env's code: the cue frame holds one square of
PATCH x PATCH pixels in a palette colour on black, the delay frames one grey square, the query
frame a white border; an agent that answers the colour decoded from the first frame earns 1 in
every episode, one that answers anything else 0, and every episode lasts delay + 2 steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.envs.pixel.colour_cue import DIFFICULTY_PARAMS, GREY, PALETTE, PATCH
from stoixlite.envs.registry import make
from stoixlite.envs.types import LAST, MID
from stoixlite.envs.wrappers import wrap_env


def coloured_pixels(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows and columns [K, 2], colours [K, 3])`` of the pixels that are not black."""
    where = np.argwhere(frame.any(axis=-1))
    return where, frame[where[:, 0], where[:, 1]]


def square_colour(frame: np.ndarray) -> np.ndarray:
    """The colour of the frame's one PATCH x PATCH square (asserting that it is one)."""
    where, colours = coloured_pixels(frame)
    assert len(where) == PATCH * PATCH, len(where)
    top, left = where.min(axis=0)
    assert (where.max(axis=0) - (top, left) == PATCH - 1).all()
    assert (colours == colours[0]).all()
    return colours[0]


def is_query(frame: np.ndarray) -> bool:
    where, colours = coloured_pixels(frame)
    size = frame.shape[0]
    border = (where == 0).any(axis=1) | (where == size - 1).any(axis=1)
    return bool(border.all() and len(where) == 4 * (size - 1) and (colours == 255).all())


def play(env, policy: str, steps: int, key: int = 0):
    """Frames, rewards, step types and discounts of ``steps`` auto-reset steps answering the
    colour decoded from the episode's first frame (``oracle``) or any other colour (``wrong``)."""
    stack = wrap_env(env, obs_augment=False)
    step = jax.jit(stack.step)
    state, ts = jax.jit(stack.reset)(jax.random.PRNGKey(key))
    frames, rewards, types, discounts = [], [], [], []
    cue = None
    rng = np.random.default_rng(key)
    for _ in range(steps):
        frame = np.asarray(ts.observation)
        assert frame.dtype == np.uint8 and frame.shape == env.observation_space.shape
        if cue is None:  # the first frame of an episode
            colour = square_colour(frame)
            cue = int(np.flatnonzero((PALETTE[: env.num_colours] == colour).all(axis=1))[0])
        if policy == "oracle":
            action = cue
        else:
            action = (cue + 1 + rng.integers(env.num_colours - 1)) % env.num_colours
        state, ts = step(state, jnp.asarray(action, jnp.int32))
        frames.append(frame)
        rewards.append(float(ts.reward))
        types.append(int(ts.step_type))
        discounts.append(float(ts.discount))
        if types[-1] == LAST:
            cue = None
    return np.stack(frames), np.asarray(rewards), np.asarray(types), np.asarray(discounts)


@pytest.mark.parametrize(("policy", "answer_reward"), [("oracle", 1.0), ("wrong", 0.0)])
def test_frames_rewards_and_episode_lengths(policy, answer_reward):
    env = make("pixel/colour_cue", difficulty="easy")
    length = env.delay + 2
    frames, rewards, types, discounts = play(env, policy, steps=5 * length)
    for episode in range(5):
        at = slice(episode * length, (episode + 1) * length)
        f, r, t, d = frames[at], rewards[at], types[at], discounts[at]
        assert (t[:-1] == MID).all() and t[-1] == LAST and d[-1] == 0.0 and (d[:-1] == 1.0).all()
        assert (r[:-1] == 0.0).all() and r[-1] == answer_reward
        assert tuple(square_colour(f[0])) in {tuple(c) for c in PALETTE[: env.num_colours]}
        for grey in f[1:-1]:
            assert (square_colour(grey) == GREY).all()
        assert is_query(f[-1])


def test_cues_and_positions_vary():
    env = make("pixel/colour_cue", difficulty="easy", num_colours=3)
    reset = jax.jit(jax.vmap(env.reset))
    _, ts = reset(jax.random.split(jax.random.PRNGKey(0), 200))
    frames = np.asarray(ts.observation)
    colours = {tuple(square_colour(f)) for f in frames}
    assert colours == {tuple(c) for c in PALETTE[:3]}
    corners = {tuple(coloured_pixels(f)[0].min(axis=0)) for f in frames}
    assert len(corners) > 50  # of (16 - 4 + 1)^2 = 169 positions


@pytest.mark.parametrize("difficulty", list(DIFFICULTY_PARAMS))
def test_difficulties_set_the_delay(difficulty):
    env = make("pixel/colour_cue", difficulty=difficulty)
    delay = DIFFICULTY_PARAMS[difficulty]["delay"]
    assert env.max_episode_steps == delay + 2
    _, _, types, _ = play(env, "oracle", steps=delay + 2)
    assert types[-1] == LAST and (types[:-1] == MID).all()


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="size >= 6"):
        make("pixel/colour_cue", size=5)
    with pytest.raises(ValueError, match="num_colours"):
        make("pixel/colour_cue", num_colours=7)
    with pytest.raises(ValueError, match="unknown difficulty"):
        make("pixel/colour_cue", difficulty="impossible")
