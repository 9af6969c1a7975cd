"""scripts/diagnose_memory.py's copy/recall and intervention measures tell an agent that holds the
first card in its memory from one that repeats its previous action (hand-built agents on
popgym/repeat_first with the previous action in the input)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from stoixlite.envs.registry import make
from stoixlite.envs.wrappers import ObsAugmentWrapper

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "diagnose_memory.py"
CARDS = 4  # repeat_first: observation = one-hot suit [4], then the previous action one-hot [4]


def _script():
    spec = importlib.util.spec_from_file_location("diagnose_memory", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    dm = _script()
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
