"""POPGym Arcade through the gymnax-style adapter (``stoixlite.envs.arcade_adapter``), checked
against the package's own ``step_env``: the same frames and rewards from the same keys, ``done``
split into terminated and truncated by the game's ``info``, the true final frame kept under the
auto-reset; the gymnax 1.0 shim (``is_terminated`` = the game's ``is_terminal``); the POMDP and MDP
twins; one-line errors for bad kwargs. The env contract and the invalid-action policy are checked
for every registered game by test_env_contract.py and test_invalid_actions.py (``arcade/
count_recall``'s declared specs in the default run, the rest under ``pytest -m slow``:
tests/slow_envs.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip(
    "popgym_arcade", reason="POPGym Arcade is optional: docs/envs.md, 'POPGym Arcade'"
)

from adapter_replay import replay_against_step_env  # noqa: E402

from stoixlite.envs import LAST, make  # noqa: E402
from stoixlite.envs.arcade_adapter import (  # noqa: E402
    ARCADE_GAMES,
    OBS_SIZES,
    ArcadeEnv,
    arcade_class,
)
from stoixlite.envs.registry import available_envs, env_spec  # noqa: E402

COUNT_RECALL = "arcade/count_recall"


def test_every_game_is_registered_with_three_levels():
    names = sorted(n for n in available_envs() if n.startswith("arcade/"))
    assert names == sorted(f"arcade/{g}" for g in ARCADE_GAMES) and len(names) == 10
    for name in names:
        assert env_spec(name).difficulties == ("easy", "medium", "hard")
        assert set(env_spec(name).requires) == {"popgym_arcade", "dm_pix"}


# 256 x 256 frames under `pytest -m slow` (their drawing program compiles in 7 s): the default
# run passes the size through the same kwarg and checks 128 x 128.
@pytest.mark.parametrize(
    "obs_size", [s if s == 128 else pytest.param(s, marks=pytest.mark.slow) for s in OBS_SIZES]
)
def test_frames_are_uint8_images_of_the_chosen_size(obs_size):
    env = make(COUNT_RECALL, difficulty="medium", obs_size=obs_size)
    assert isinstance(env, ArcadeEnv) and env.partial_obs
    assert env.observation_space.shape == (obs_size, obs_size, 3)
    assert env.observation_space.dtype == jnp.uint8 and env.action_space.n == 5
    assert env.max_episode_steps == 100 + 2 * 26  # the game's own limit: 100 + cards
    _, ts = env.reset(jax.random.PRNGKey(0))
    assert ts.observation.dtype == jnp.uint8 and ts.observation.shape == (obs_size, obs_size, 3)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"obs_size": 100}, r"env.kwargs.obs_size=100 is not a frame size .*allowed: \[128, 256\]"),
        ({"obs_size": True}, r"env.kwargs.obs_size=True"),
        ({"partial_obs": "yes"}, r"env.kwargs.partial_obs must be true or false, got 'yes'"),
        ({"difficulty": "extreme"}, r"env.difficulty='extreme' .*\['easy', 'medium', 'hard'\]"),
        ({"bogus": 1}, r"unexpected keyword argument 'bogus'"),
    ],
)
def test_bad_kwargs_raise_one_line(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match) as error:
        make(COUNT_RECALL, **kwargs)
    assert "\n" not in str(error.value)


def _replay(steps: int, seed: int = 0, **kwargs):
    """Random actions through the adapter and through the game's own ``step_env``
    (:func:`adapter_replay.replay_against_step_env`)."""
    raw = make(COUNT_RECALL, **kwargs)
    actions = jax.random.randint(jax.random.PRNGKey(seed + 1), (steps,), 0, 5)
    return raw, replay_against_step_env(raw, actions, seed)[1]


# Under `pytest -m slow` (CI runs it: .ci/run-slow): one program of two
# copies of the game's step, compile-bound (about 10 s of CPU). The default run checks the
# frames here and the arcade env contract and invalid actions (test_env_contract.py,
# test_invalid_actions.py).
@pytest.mark.slow
def test_replays_the_game_and_splits_done_by_its_info():
    # count_recall easy: 26 cards, one card per fire action, time limit 126 moves
    raw, (ts, obs, reward, done, info) = _replay(steps=400)
    last = np.asarray(ts.step_type) == LAST
    np.testing.assert_array_equal(last, np.asarray(done))
    assert last.sum() >= 2
    np.testing.assert_array_equal(ts.reward, np.asarray(reward, np.float32))
    np.testing.assert_array_equal(ts.extras["next_obs"], obs)  # the true final frame survives
    terminated = np.asarray(info["terminated"]) & last
    np.testing.assert_array_equal(np.asarray(ts.discount)[last], (~terminated[last]).astype(float))
    np.testing.assert_array_equal(np.asarray(ts.extras["truncated"]), last & ~terminated)
    lengths = np.asarray(ts.extras["episode_length"])[last]
    assert (lengths <= raw.max_episode_steps).all()
    # random play (1 fire in 5) plays all 26 cards within 126 moves in some episodes, not all
    assert terminated.any() and (last & ~terminated).any()


def test_pomdp_and_mdp_twins_share_the_game_not_the_frames():
    pomdp = make(COUNT_RECALL, partial_obs=True)
    mdp = make(COUNT_RECALL, partial_obs=False)
    assert not make(COUNT_RECALL, partial_obs=False).partial_obs
    key = jax.random.PRNGKey(3)
    s_p, ts_p = pomdp.reset(key)
    s_m, ts_m = mdp.reset(key)
    # the same hidden state (cards drawn from the same key) ...
    jax.tree.map(np.testing.assert_array_equal, s_p.env_state, s_m.env_state)
    step_p, step_m = jax.jit(pomdp.step), jax.jit(mdp.step)
    for _ in range(6):
        s_p, ts_p = step_p(s_p, jnp.int32(4))  # fire: play a card
        s_m, ts_m = step_m(s_m, jnp.int32(4))
        assert float(ts_p.reward) == float(ts_m.reward)
    # ... drawn differently: the MDP's frame shows what the POMDP's hides
    assert not np.array_equal(np.asarray(ts_p.observation), np.asarray(ts_m.observation))


def test_gymnax_1_shim_gives_discount_from_the_games_is_terminal():
    # CartPole defines is_terminal and calls self.discount in step_env (gymnax 0.0.x's hook)
    cls = arcade_class("cartpole", "easy")
    game = cls(partial_obs=True)
    params = game.default_params
    _, state = game.reset_env(jax.random.PRNGKey(0), params)
    fallen = state.replace(x=jnp.float32(10.0))
    for s, ended in ((state, False), (fallen, True)):
        assert bool(game.is_terminated(s, params)) == bool(game.is_terminal(s, params)) == ended
        assert float(game.discount(s, params)) == (0.0 if ended else 1.0)
    # games without their own is_terminal are used as the package defines them
    assert arcade_class("count_recall", "easy").__module__.startswith("popgym_arcade")


def test_cartpole_time_limit_is_a_truncation_and_a_fall_a_termination():
    """CartPole reports its time limit in ``info["terminated"]`` too and tests ``done`` on the
    state before the step: the adapter calls the 201st step of easy a truncation (bootstrapped)
    and the step after a fall a termination."""
    env = make("arcade/cartpole")
    assert env.max_episode_steps == 201  # easy's limit 200, one step late
    state, _ = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    at_limit = state.replace(env_state=state.env_state.replace(time=200))
    fallen = state.replace(env_state=state.env_state.replace(x=jnp.float32(3.0)))
    _, ts = step(at_limit, jnp.int32(0))
    assert int(ts.step_type) == LAST and float(ts.discount) == 1.0
    _, ts = step(fallen, jnp.int32(0))
    assert int(ts.step_type) == LAST and float(ts.discount) == 0.0
    _, ts = step(state, jnp.int32(0))  # upright, early: goes on
    assert int(ts.step_type) != LAST
