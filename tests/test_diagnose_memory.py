"""scripts/diagnose_memory.py's copy/recall and intervention measures tell an agent that holds the
first card in its memory from one that repeats its previous action (hand-built agents on
popgym/repeat_first with the previous action in the input)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from conftest import load_script

from stoixlite.envs.registry import make
from stoixlite.envs.wrappers import ObsAugmentWrapper

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "diagnose_memory.py"
CARDS = 4  # repeat_first: observation = one-hot suit [4], then the previous action one-hot [4]


class HandAgent:
    """``apply(params, carry, obs [T, B, F], start [T, B]) -> (carry, (dist, value))`` of an
    agent that answers the first card it saw (``recall``) or its previous action (``copy``)."""

    def __init__(self, mode: str):
        self.mode = mode

    def initialize_carry(self, batch: int) -> jax.Array:
        return jnp.zeros((batch,), jnp.int32)

    def apply(self, params, carry, obs, start):
        def step(first, inputs):
            x, is_start = inputs
            first = jnp.where(is_start, x[:, :CARDS].argmax(-1), first)
            if self.mode == "recall":
                answer = first
            else:  # the previous action, or the card itself at the first step
                answer = jnp.where(is_start, first, x[:, CARDS : 2 * CARDS].argmax(-1))
            return first, 10.0 * jax.nn.one_hot(answer, CARDS)

        carry, logits = jax.lax.scan(step, carry, (obs, start))
        return carry, (SimpleNamespace(logits=logits), jnp.zeros(logits.shape[:-1]))


@pytest.mark.parametrize("mode", ["recall", "copy"])
def test_copy_recall_and_intervention_tell_memory_from_a_loop(mode):
    dm = load_script("diagnose_memory")
    env = ObsAugmentWrapper(make("popgym/repeat_first", difficulty="easy"))
    length = int(env.max_episode_steps)
    agent = HandAgent(mode)
    data = dm.episodes(env, jax.random.PRNGKey(0), 32, length)
    rates = dm.copy_and_recall(agent, None, data)
    result = dm.intervene(agent, None, env, jax.random.PRNGKey(1), 32, length)
    # both agents are right on-policy until the injection
    assert result["episodes_right_until_step"] == 1.0
    if mode == "recall":
        assert float(rates["recall"][1:].min()) == 1.0 and float(rates["copy"][1:].max()) == 0.0
        assert result["recall"] == result["recall_after"] == 1.0
        assert result["copy"] == result["chain_after"] == 0.0
    else:
        assert float(rates["copy"][1:].min()) == 1.0 and float(rates["recall"][1:].max()) == 0.0
        assert result["copy"] == result["chain_after"] == 1.0
        assert result["recall"] == result["recall_after"] == 0.0


class SumAgent:
    width = 2 * CARDS + 1  # obs width (set per test)

    """A differentiable agent: the carry is the running sum of the observations since the
    episode start, the logits a linear map of it (``params [F, A]``)."""

    def initialize_carry(self, batch: int) -> jax.Array:
        return jnp.zeros((batch, self.width))

    def apply(self, params, carry, obs, start):
        def step(total, inputs):
            x, is_start = inputs
            total = jnp.where(is_start[:, None], 0.0, total) + x
            return total, total @ params

        carry, logits = jax.lax.scan(step, carry, (obs, start))
        return carry, (SimpleNamespace(logits=logits), jnp.zeros(logits.shape[:-1]))


def test_probe_window_keeps_values_and_cuts_the_gradient():
    dm = load_script("diagnose_memory")
    env = ObsAugmentWrapper(make("popgym/repeat_first", difficulty="easy"))
    data = dm.episodes(env, jax.random.PRNGKey(1), 4, int(env.max_episode_steps))
    agent = SumAgent()
    agent.width = data["obs"].shape[-1]
    params = jax.random.normal(jax.random.PRNGKey(2), (agent.width, CARDS))
    whole = dm.policy_logits(agent, params, data["obs"], data["start"])
    cut = dm.policy_logits(agent, params, data["obs"], data["start"], window=16)
    assert jnp.allclose(whole, cut, atol=1e-5)

    def reach(window: int, t: int) -> float:
        def logit(first):
            obs = data["obs"].at[0].set(first)
            return dm.policy_logits(agent, params, obs, data["start"], window)[t].sum()

        return float(jnp.abs(jax.grad(logit)(data["obs"][0])).sum())

    assert reach(16, 15) > 0 and reach(0, 40) > 0
    assert reach(16, 16) == 0.0 and reach(16, 40) == 0.0


@pytest.mark.parametrize("signal", ["supervised", "reward", "return"])
def test_probe_signals_train_the_policy(signal):
    """Each probe signal moves the parameters and reports accuracy by position; a recurrent sum
    of one-hot cards learns the first card at step 0 from any of them."""
    dm = load_script("diagnose_memory")
    cfg = dm.load_config(
        ["network=gru", "env=popgym/repeat_first", "system.lr=0.05", "system.ent_coef=0.0"]
    )
    env = ObsAugmentWrapper(make("popgym/repeat_first", difficulty="easy"), prev_action=False)
    params = jnp.zeros((CARDS + 1, CARDS))
    agent = SumAgent()
    agent.width = CARDS + 1
    out = dm.probe(cfg, agent, params, env, jax.random.PRNGKey(3), 60, 16, 8, 60, 0, signal)
    assert [r["step"] for r in out] == [0, 60]
    assert out[-1]["probe_accuracy"]["0"] == 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--probe-window", "-3"], "--probe-window must be at least 0"),
        (["--probe-steps", "-1"], "--probe-steps must be at least 0"),
        (["--probe-batch", "0"], "--probe-batch must be at least 1"),
        (["--probe-window", "abc"], "invalid int value: 'abc'"),
        (["--probe-signal", "rewrd"], "invalid choice: 'rewrd'"),
        (["--probe-target", "untakn"], "invalid choice: 'untakn'"),
        (["--only", "reach,repeat"], "unknown measure repeat; allowed: reach, hold"),
        (["--only", ","], "unknown measure ','"),
        (["--only", "repeats"], "--only repeats measures a trained agent: give --run"),
        (["--only", "probe"], "--only probe trains a probe: give --probe-steps"),
    ],
)
def test_bad_options_are_a_one_line_error(args, message):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "env=popgym/repeat_first"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr


class BattleshipHandAgent:
    """An agent on battleship easy (64 cells) with the previous action in the input: ``sweep``
    fires at the cell after its previous one (never repeats within an episode); ``same`` fires at
    cell 0 every step (repeats from step 1 on)."""

    def __init__(self, mode: str, cells: int = 64):
        self.mode, self.cells = mode, cells

    def initialize_carry(self, batch: int) -> jax.Array:
        return jnp.zeros((batch,), jnp.int32)

    def apply(self, params, carry, obs, start):
        prev = obs[..., 2 : 2 + self.cells].argmax(-1)  # after the hit one-hot [2]
        if self.mode == "sweep":
            cell = jnp.where(start, 0, (prev + 1) % self.cells)
        else:
            cell = jnp.zeros_like(prev)
        logits = 100.0 * jax.nn.one_hot(cell, self.cells)  # sampling = greedy
        return carry, (SimpleNamespace(logits=logits), jnp.zeros(logits.shape[:-1]))


@pytest.mark.parametrize("mode", ["sweep", "same"])
def test_repeats_tells_an_agent_that_remembers_its_shots(mode):
    dm = load_script("diagnose_memory")
    env = ObsAugmentWrapper(make("popgym/battleship", difficulty="easy"))
    length = int(env.max_episode_steps)
    agent = BattleshipHandAgent(mode)
    for greedy in (True, False):
        out = dm.repeats(agent, None, env, jax.random.PRNGKey(0), 16, length, greedy)
        random = out["repeat_random"]
        assert random["0"] == 0.0 and 0.5 < random["50"] < 0.6  # 1 - (63/64)^50 = 0.545
        if mode == "sweep":  # every ship cell found within the 64 cells: return >= 1 - 52/52
            assert out["repeat_all_steps"] == 0.0 and out["again_last_tenth"] == 0.0
            assert out["return"] >= 0.0
        else:  # one hit at most, then misses until the 64-step limit
            assert out["repeat"]["0"] == 0.0 and out["repeat"]["1"] == 1.0
            assert out["again_last_tenth"] == 1.0
            assert out["return"] < -0.9
