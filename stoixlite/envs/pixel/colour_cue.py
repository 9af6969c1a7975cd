"""ColourCue: remember the colour of the square in the first frame, name it when asked.

A tiny pixel POMDP for tests and quick examples of ``network.encoder=cnn``. Frames are ``uint8``
RGB images ``[size, size, 3]`` on a black background:

* frame 0 (the reset observation), the *cue*: a ``patch x patch`` square in one of
  ``num_colours`` colours (:data:`PALETTE`), at a uniformly random position;
* frames ``1 .. delay``: a grey square of the same size at a random position (no colour);
* frame ``delay + 1``, the *query*: a white border one pixel wide, nothing else.

Action: ``Discrete(num_colours)``, a colour. The actions taken on the cue and grey frames earn 0;
the action taken on the query frame earns 1 if it names the cue's colour (0 otherwise) and ends
the episode (terminated). Every episode lasts exactly ``delay + 2`` steps and its return is 1 or
0: a policy without memory sees nothing of the cue at the query and scores ``1 / num_colours`` in
expectation; a policy that remembers the first frame scores 1. An out-of-range action is never
the cue's colour (a wrong answer, 0).

Difficulties set the delay: easy 4 (6-step episodes), medium 16, hard 64. ``size``
(default 16) and ``num_colours`` (default 4, at most ``len(PALETTE)``) are factory keyword
arguments (``env.kwargs``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from stoixlite.envs.registry import register_env
from stoixlite.envs.types import Box, Discrete, Environment, TimeStep, restart, transition

DIFFICULTY_PARAMS = {"easy": {"delay": 4}, "medium": {"delay": 16}, "hard": {"delay": 64}}
# Cue colours (RGB), in action order: red, green, blue, yellow, magenta, cyan.
PALETTE = np.array(
    [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [255, 0, 255], [0, 255, 255]],
    np.uint8,
)
GREY = np.array([128, 128, 128], np.uint8)
WHITE = np.array([255, 255, 255], np.uint8)
PATCH = 4  # side of the cue and grey squares, in pixels


@struct.dataclass
class ColourCueState:
    key: jax.Array
    t: jax.Array  # int32: steps taken in this episode (the frame shown is frame t)
    cue: jax.Array  # int32: the cue's colour, the answer


class ColourCue(Environment):
    """See the module docstring. ``delay``: grey frames between cue and query; ``size``: frame
    side in pixels; ``num_colours``: cue colours (and actions)."""

    def __init__(self, delay: int = 4, size: int = 16, num_colours: int = 4):
        if delay < 0 or size < PATCH + 2 or not 2 <= num_colours <= len(PALETTE):
            raise ValueError(
                f"need delay >= 0, size >= {PATCH + 2} and 2 <= num_colours <= {len(PALETTE)}, "
                f"got delay={delay}, size={size}, num_colours={num_colours}"
            )
        self.delay, self.size, self.num_colours = delay, size, num_colours
        self.observation_space = Box(low=0.0, high=255.0, shape=(size, size, 3), dtype=jnp.uint8)
        self.action_space = Discrete(num_colours)
        self.max_episode_steps = delay + 2

    def square(self, key: jax.Array, colour: jax.Array) -> jax.Array:
        """A frame ``[size, size, 3]`` uint8 with a ``PATCH x PATCH`` square of ``colour [3]``
        at a uniformly random position on black."""
        top, left = jax.random.randint(key, (2,), 0, self.size - PATCH + 1)
        pixels = jnp.arange(self.size)
        rows = (pixels >= top) & (pixels < top + PATCH)
        cols = (pixels >= left) & (pixels < left + PATCH)
        inside = rows[:, None, None] & cols[None, :, None]
        return jnp.where(inside, jnp.asarray(colour, jnp.uint8), jnp.uint8(0))

    def query(self) -> jax.Array:
        """The query frame: a white border one pixel wide on black, ``[size, size, 3]`` uint8."""
        edge = np.zeros((self.size, self.size, 1), bool)
        edge[[0, -1], :] = edge[:, [0, -1]] = True
        return jnp.asarray(np.where(edge, WHITE, np.uint8(0)).astype(np.uint8))

    def reset(self, key: jax.Array) -> tuple[ColourCueState, TimeStep]:
        key, cue_key, where_key = jax.random.split(key, 3)
        cue = jax.random.randint(cue_key, (), 0, self.num_colours)
        frame = self.square(where_key, jnp.asarray(PALETTE)[cue])
        return ColourCueState(key, jnp.int32(0), cue), restart(frame)

    def step(self, state: ColourCueState, action: jax.Array) -> tuple[ColourCueState, TimeStep]:
        answered = state.t == self.delay + 1  # this action was taken on the query frame
        reward = jnp.where(answered & (action == state.cue), 1.0, 0.0)
        t = state.t + 1
        key, where_key = jax.random.split(state.key)
        frame = jnp.where(t == self.delay + 1, self.query(), self.square(where_key, GREY))
        return ColourCueState(key, t, state.cue), transition(frame, reward, answered, False)


@register_env("pixel/colour_cue", difficulties=DIFFICULTY_PARAMS)
def make_colour_cue(difficulty: str = "easy", size: int = 16, num_colours: int = 4) -> ColourCue:
    """ColourCue at ``difficulty`` (easy | medium | hard: delay 4 | 16 | 64) with frames of
    ``size x size x 3`` and ``num_colours`` cue colours."""
    if difficulty not in DIFFICULTY_PARAMS:
        raise ValueError(
            f"unknown difficulty {difficulty!r}; choose one of {list(DIFFICULTY_PARAMS)}"
        )
    return ColourCue(**DIFFICULTY_PARAMS[difficulty], size=size, num_colours=num_colours)
