"""A run sized for an accelerator (``preset=gpu``, ``arch.scale_to_envs``; stoixlite/config/
scale.py): thousands of envs, the PPO updates the env's config intends, the rest of PPO's
settings kept; the saved (scaled) config resumes as it ran; host envs refuse it; a run of fewer
than 10 updates says so in its budget note."""

from __future__ import annotations

import pytest
from conftest import compose_config

from stoixlite.config.parse import parse
from stoixlite.config.plan import FEW_UPDATES, plan_run
from stoixlite.config.strict import ConfigError
from stoixlite.envs.registry import missing_modules

# Env configs of every shape the preset meets: the 2M-step default, a longer budget with
# 512-step rollouts, a bptt chunking, Craftax's 64-step rollouts with 8 minibatches and 1024
# GPU envs, a pixel env with 32 envs and 1024 GPU envs.
ENV_CONFIGS = [
    ["env=popgym/repeat_previous"],
    ["env=popgym/repeat_first"],
    ["env=gymnax/CartPole-v1", "system.bptt_length=32"],
    ["env=craftax/classic_symbolic"],
    ["env=arcade/breakout"],
    ["env=sets/card_table", "network=memoroid"],
]


@pytest.mark.parametrize("overrides", ENV_CONFIGS, ids=lambda o: o[0].split("=")[1])
def test_preset_gpu_keeps_the_updates_of_the_env_config(overrides):
    env = overrides[0].split("=")[1]
    for module in missing_modules(env):
        pytest.importorskip(module, reason=f"{env} needs the optional extra '.[{module}]'")
    given = parse(compose_config(overrides))
    run = parse(compose_config([*overrides, "preset=gpu"]))
    cpu, gpu = plan_run(given), plan_run(run)
    k = given.arch.gpu_envs // given.arch.num_envs
    assert k > 1 and run.arch.num_envs == k * given.arch.num_envs
    assert 1024 <= run.arch.num_envs <= run.arch.gpu_envs < 2 * run.arch.num_envs  # thousands
    assert run.arch.total_timesteps == k * given.arch.total_timesteps
    assert gpu.num_updates == cpu.num_updates and gpu.num_chunks == cpu.num_chunks
    assert gpu.ppo.num_updates == cpu.ppo.num_updates
    assert gpu.steps_per_update == k * cpu.steps_per_update
    assert run.system == given.system  # rollout, epochs, minibatches per epoch, lr, ...
    assert run.arch.num_eval_envs == given.arch.num_eval_envs
    assert f"arch.scale_to_envs={run.arch.gpu_envs}" in gpu.budget_note
    assert "fewer than" not in gpu.budget_note


def test_the_scaled_config_parses_to_itself():
    """The run saves the scaled config (RunConfig.to_dict); parsed again (a resume, the
    evaluator) it is the same run: the factor is 1 once scaled."""
    run = parse(compose_config(["preset=gpu", "arch.num_envs=48", "system.num_minibatches=4"]))
    assert (run.arch.num_envs, run.arch.total_timesteps) == (85 * 48, 85 * 2_000_000)
    assert parse(run.to_dict()) == run


def test_scale_to_envs_below_num_envs_changes_nothing():
    given = parse(compose_config(["arch.num_envs=256"]))
    run = parse(compose_config(["arch.num_envs=256", "arch.scale_to_envs=100"]))
    assert (run.arch.num_envs, run.arch.total_timesteps) == (256, given.arch.total_timesteps)


def test_host_envs_refuse_the_preset():
    with pytest.raises(ConfigError, match=r"arch.scale_to_envs=4096 is invalid: host envs"):
        parse(compose_config(["env=gymnasium/CartPole-v1", "preset=gpu"]))


def test_a_run_of_few_updates_says_so():
    """README's old advice, arch.num_envs=4096 on a 2M-step config, is 3 updates: one line."""
    note = plan_run(parse(compose_config(["arch.num_envs=4096"]))).budget_note
    assert note is not None
    few = "3 PPO updates of arch.num_envs=4096 x system.rollout_length=128 steps, fewer than"
    assert f"{few} {FEW_UPDATES}" in note
    assert "preset=gpu" in note
    note = plan_run(parse(compose_config(["arch.total_timesteps=163840"]))).budget_note
    assert note is None  # 20 updates, 20 chunks: nothing to say
