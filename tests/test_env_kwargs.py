"""Env kwargs typed, and env names that lack a part, each one line before anything starts
(docs/reliability.md): a Gymnasium env's ``env.kwargs`` checked against its constructor's
parameters (``stoixlite.envs.host.kwargs``); ``render_mode`` on a machine without a display; an
``env.name`` whose id or name is missing names what is missing, not every env."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from conftest import TINY, run_config

from stoixlite.config.strict import ConfigError
from stoixlite.envs.host.sources import host_source


class Tuned(gym.Env):
    """A tiny env whose constructor declares one parameter of each kind (registered with a
    default overridden by its spec), so that the checks are seen on annotations and defaults
    other than Gymnasium's own envs'."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    metadata = {"render_modes": ["rgb_array", "ansi"]}

    def __init__(
        self,
        speed: float = 1,
        steps: int = 3,
        label: str = "a",
        noisy: bool = False,
        weights=(1.0, 2.0),
        table: dict | None = None,
        anything=None,
        render_mode: str | None = None,
    ):
        self.given = dict(speed=speed, steps=steps, label=label, noisy=noisy, weights=weights)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


class Open(Tuned):
    """Takes any keyword argument besides its own."""

    def __init__(self, steps: int = 3, **kwargs):
        super().__init__(steps=steps)


if "StoixliteTuned-v0" not in gym.registry:
    gym.register("StoixliteTuned-v0", entry_point=Tuned, kwargs={"speed": 2.5})
    gym.register("StoixliteOpen-v0", entry_point=Open)

TUNED = ["env=gymnasium/CartPole-v1", "env.name=gymnasium/StoixliteTuned-v0"]


def one_line(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        run_config(TINY + overrides)
    (line,) = str(err.value).splitlines()
    return line


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # the case: Gymnasium stored the string and trained
        (
            [
                "env=gymnasium/CartPole-v1",
                "env.name=gymnasium/MountainCar-v0",
                "+env.kwargs.goal_velocity=abc",
            ],
            "env.kwargs.goal_velocity='abc' is invalid: must be a finite number; default 0",
        ),
        (
            [
                "env=gymnasium/CartPole-v1",
                "env.name=gymnasium/MountainCar-v0",
                "+env.kwargs.goal_velocity=nan",
            ],
            "env.kwargs.goal_velocity=nan is invalid: must be a finite number",
        ),
        (
            ["env=gymnasium/CartPole-v1", "+env.kwargs.sutton_barto_reward=1"],
            "env.kwargs.sutton_barto_reward=1 is invalid: must be true or false; default False",
        ),
        (
            ["env=gymnasium/CartPole-v1", "+env.kwargs.max_episode_steps=many"],
            "env.kwargs.max_episode_steps='many' is invalid: must be an integer",
        ),
        (
            [
                "env=gymnasium/CartPole-v1",
                "env.name=gymnasium/FrozenLake-v1",
                "+env.kwargs.map_name=8",
            ],
            "env.kwargs.map_name=8 is invalid: must be a string; default '4x4'",
        ),
        (
            ["env=gymnasium/CartPole-v1", "+env.kwargs.nope=1"],
            "env.kwargs.nope=1 is invalid: not a parameter of CartPole-v1 (it takes "
            "['render_mode', 'sutton_barto_reward']",
        ),
        # annotations and a spec's registered default, on an env of the test's own
        ([*TUNED, "+env.kwargs.speed=fast"], "must be a finite number; default 2.5"),
        ([*TUNED, "+env.kwargs.steps=2.5"], "env.kwargs.steps=2.5 is invalid: must be an integer"),
        ([*TUNED, "+env.kwargs.label=7"], "env.kwargs.label=7 is invalid: must be a string"),
        ([*TUNED, "+env.kwargs.noisy=yes"], "env.kwargs.noisy='yes' is invalid: must be true or"),
        ([*TUNED, "+env.kwargs.weights=3"], "env.kwargs.weights=3 is invalid: must be a list"),
        ([*TUNED, "+env.kwargs.table=[1]"], "env.kwargs.table=[1] is invalid: must be a mapping"),
        ([*TUNED, "+env.kwargs.speeed=1"], "not a parameter of StoixliteTuned-v0"),
        ([*TUNED, "+env.kwargs.render_mode=human"], "choose null or rgb_array"),
    ],
)
def test_a_kwarg_of_the_wrong_kind_is_one_line(overrides, expected, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    line = one_line(overrides)
    assert expected in line, line


def test_kwargs_of_the_right_kind_reach_the_env(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    cfg = run_config(
        TINY
        + TUNED
        + [
            "+env.kwargs.speed=3",  # an integer where the default is a float: a number
            "+env.kwargs.steps=4",
            "+env.kwargs.label=b",
            "+env.kwargs.noisy=true",
            "+env.kwargs.weights=[0.5,1.5]",
            "+env.kwargs.table={a: 1}",
            "+env.kwargs.anything=[x]",  # no default, no annotation: anything
            "+env.kwargs.render_mode=rgb_array",
            "+env.kwargs.max_episode_steps=7",
        ]
    )
    source = host_source(cfg.env.name, None, dict(cfg.env.kwargs))
    env = source.make()
    given = env.unwrapped.given
    assert given["speed"] == 3 and given["steps"] == 4 and given["label"] == "b"
    assert given["noisy"] is True and list(given["weights"]) == [0.5, 1.5]
    assert source.max_episode_steps == 7
    # an env with **kwargs takes any other name; a None default takes null
    run_config(
        TINY
        + ["env=gymnasium/CartPole-v1", "env.name=gymnasium/StoixliteOpen-v0"]
        + ["+env.kwargs.whatever=1", "+env.kwargs.steps=2"]
    )
    run_config(TINY + TUNED + ["+env.kwargs.table=null"])
    # MountainCar's goal_velocity defaults to the integer 0 and takes any number
    run_config(
        TINY
        + [
            "env=gymnasium/CartPole-v1",
            "env.name=gymnasium/MountainCar-v0",
            "+env.kwargs.goal_velocity=0.01",
        ]
    )
    assert math.isclose(
        host_source("gymnasium/MountainCar-v0", None, {"goal_velocity": 0.01})
        .make()
        .unwrapped.goal_velocity,
        0.01,
    )


def test_render_modes_need_a_display_except_rgb_array(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    line = one_line(["env=gymnasium/CartPole-v1", "+env.kwargs.render_mode=human"])
    assert line == (
        "env.kwargs.render_mode='human' is invalid: this machine has no display "
        "(no DISPLAY or WAYLAND_DISPLAY) and training renders nothing: choose null or rgb_array"
    )
    assert "no display" in one_line([*TUNED, "+env.kwargs.render_mode=ansi"])
    run_config(TINY + ["env=gymnasium/CartPole-v1", "+env.kwargs.render_mode=rgb_array"])
    run_config(TINY + ["env=gymnasium/CartPole-v1", "+env.kwargs.render_mode=null"])
    # With a display, the env's own render modes (CartPole's window opens only when it renders)
    monkeypatch.setenv("DISPLAY", ":0")
    run_config(TINY + ["env=gymnasium/CartPole-v1", "+env.kwargs.render_mode=human"])
    run_config(TINY + [*TUNED, "+env.kwargs.render_mode=ansi"])
    assert "choose null or one of the env's render modes ['rgb_array', 'ansi']" in one_line(
        [*TUNED, "+env.kwargs.render_mode=human"]
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gymnasium/", "the Gymnasium id is missing: gymnasium/<id>"),
        ("gymnasium", "the Gymnasium id is missing: gymnasium/<id>"),
        ("popgym_ref/", "the name is missing: choose popgym_ref/<one of ['autoencode',"),
        ("popgym/", "the name is missing: choose one of ['popgym/autoencode',"),
        ("gymnax/", "the name is missing: choose one of ['gymnax/"),
        ("gymnasium/:CartPole-v1", "the module before ':' is missing"),
        ("gymnasium/host_env_fixtures:", "the id after ':' is missing"),
        ("nofamily/x", "no env family 'nofamily': choose <family>/<name> with a family of ["),
        ("", "empty: choose <family>/<name>"),
    ],
)
def test_a_missing_part_of_an_env_name_is_named(name, expected):
    line = one_line(["env=gymnasium/CartPole-v1", f"env.name={name}"])
    assert expected in line, line
    family = name.split("/", 1)[0]
    others = [f for f in ("popgym/", "gymnax/", "arcade/", "craftax/") if f != f"{family}/"]
    assert not any(f"'{other}" in line for other in others), line  # not every env
