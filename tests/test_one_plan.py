"""The run is planned once: ``python -m stoixlite.rec_ppo`` calls
:func:`stoixlite.config.plan.plan_run` exactly once per run (a run of JAX envs, a run of host
envs, a resume), and everything below the entry point receives that plan."""

from __future__ import annotations

import sys

import pytest
from conftest import TINY, run_cli

from stoixlite.config import plan as plan_module

RUN = TINY + ["arch.total_timesteps=128", "arch.num_evaluations=2", "logger.plot=false"]
CLOCK = "env.name='gymnasium/host_env_fixtures:Clock-v0'"


@pytest.fixture
def plan_calls(monkeypatch) -> list:
    """The configs ``plan_run`` is called with, wherever it is called from: the function is
    replaced in its module and in every module of the package that imported it by name."""
    original = plan_module.plan_run
    calls = []

    def counted(cfg):
        calls.append(cfg)
        return original(cfg)

    for name, module in list(sys.modules.items()):
        if name.startswith("stoixlite") and getattr(module, "plan_run", None) is original:
            monkeypatch.setattr(module, "plan_run", counted)
    return calls


def test_the_counter_sees_a_call_from_anywhere(plan_calls):
    """Negative control: a call through a module that imported ``plan_run`` by name counts."""
    from conftest import run_config

    from stoixlite.run import resume

    resume.plan_run(run_config(RUN))
    plan_module.plan_run(run_config(RUN))
    assert len(plan_calls) == 2


def test_a_run_and_its_resume_are_each_planned_once(tmp_path, capsys, monkeypatch, plan_calls):
    run_dir = tmp_path / "run"
    code, _, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    assert code == 0, err
    assert len(plan_calls) == 1
    plan_calls.clear()
    longer = ["arch.total_timesteps=256", "arch.num_evaluations=4"]  # the same chunk size
    code, out, err = run_cli([f"resume={run_dir}", *longer], capsys, monkeypatch)
    assert code == 0, err
    assert "resuming" in out
    assert len(plan_calls) == 1


def test_a_host_env_run_is_planned_once(tmp_path, capsys, monkeypatch, plan_calls):
    pytest.importorskip("gymnasium")
    import host_env_fixtures  # noqa: F401  (registers Clock-v0)

    argv = [*RUN, CLOCK, "arch.num_envs=2", "system.rollout_length=8", "arch.total_timesteps=32"]
    code, _, err = run_cli([*argv, f"hydra.run.dir={tmp_path / 'run'}"], capsys, monkeypatch)
    assert code == 0, err
    assert len(plan_calls) == 1
