"""Envs named the way their own library names them (``stoixlite/cli/env_names.py``):
``env=gymnasium/<id>`` for any registered Gymnasium id, ``env=gymnax/<id>`` for every gymnax env
that runs offline, with the family's defaults, in single runs, sweeps and resumes;
``env.kwargs.<key>=<value>`` without ``+``. The one-line refusals of wrong ids are in
test_bad_inputs.py's table."""

from __future__ import annotations

import gymnax
import pytest
import yaml
from conftest import TINY, run_cli
from hydra import compose, initialize_config_dir

from stoixlite.cli.configs import CONFIG_DIR
from stoixlite.cli.env_names import add_env_options, env_option_error
from stoixlite.cli.overrides import composed_or_error
from stoixlite.config.parse import parse
from stoixlite.envs.gymnax_adapter import GYMNAX_ENVS, GYMNAX_REFUSED
from stoixlite.envs.registry import available_envs, make, refusal
from stoixlite.tracking.jsonl import read_jsonl

RUN = [*TINY, "logger.plot=false"]
ROOT_ENV_KEYS = {"check_actions": False, "vector": "sync"}  # configs/config.yaml's env keys


def composed(argv: list[str]):
    cfg, error = composed_or_error(argv, CONFIG_DIR)
    assert error is None, error
    return cfg


def test_every_gymnax_env_is_selectable_or_refused_with_a_reason():
    """Every id gymnax registers is either an env of stoixlite that ``env=gymnax/<id>`` selects
    (its file, or the family's defaults; the env contract of each is test_env_contract.py's), or
    refused with its reason, in one line."""
    registered = set(gymnax.registered_envs)
    assert set(GYMNAX_ENVS) | set(GYMNAX_REFUSED) == registered
    assert not set(GYMNAX_ENVS) & set(GYMNAX_REFUSED)
    refused = [f"gymnax/{i}" for i in sorted(GYMNAX_REFUSED)]
    for name in refused:
        assert name not in available_envs() and refusal(name) == GYMNAX_REFUSED[name[7:]]
        line = env_option_error(name, CONFIG_DIR)
        assert line == f"env={name} is invalid: not available: {GYMNAX_REFUSED[name[7:]]}"
    selectable = [f"gymnax/{i}" for i in sorted(GYMNAX_ENVS)]
    assert add_env_options([f"env={','.join(selectable)}"], CONFIG_DIR) is None
    defaults = yaml.safe_load((CONFIG_DIR / "env_defaults" / "gymnax.yaml").read_text())["env"]
    assert set(selectable) <= set(available_envs())
    without_file = [n for n in selectable if not (CONFIG_DIR / "env" / f"{n}.yaml").exists()]
    assert len(without_file) == 16
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        for name in without_file:
            env = compose("config", overrides=[f"env={name}"]).env
            assert {**env, "name": None} == {**defaults, "name": None, **ROOT_ENV_KEYS}, name
            assert env.name == name


def test_a_file_keeps_priority_over_the_family_defaults():
    cfg = composed(["env=gymnasium/CartPole-v1"])
    assert cfg.env.name == "gymnasium/CartPole-v1"
    cfg = composed(["env=popgym_ref/repeat_first"])  # its file: the port's settings
    assert cfg.env.difficulty == "easy" and cfg.system.lr == 0.003


def test_gymnasium_ids_with_a_namespace_or_a_module():
    cfg = composed(["env=gymnasium/phys2d/CartPole-v1", *RUN])
    assert parse(cfg).env.name == "gymnasium/phys2d/CartPole-v1"
    cfg = composed(["env=gymnasium/gymnasium.envs.classic_control:MountainCar-v0", *RUN])
    assert parse(cfg).env.name == "gymnasium/gymnasium.envs.classic_control:MountainCar-v0"


def test_env_kwargs_need_no_plus_on_gymnasium_gymnax_and_files_that_set_some():
    cfg = parse(composed([*RUN, "env=gymnax/Catch-bsuite", "env.kwargs.max_steps_in_episode=7"]))
    assert dict(cfg.env.kwargs) == {"max_steps_in_episode": 7}
    assert make(cfg.env.name, **cfg.env.factory_kwargs).max_episode_steps == 7
    argv = ["env=gymnasium/Acrobot-v1", "env.kwargs.max_episode_steps=9", *RUN]
    cfg = parse(composed(argv))
    assert dict(cfg.env.kwargs) == {"max_episode_steps": 9}
    from stoixlite.envs.host.sources import host_source

    assert host_source(cfg.env.name, None, dict(cfg.env.kwargs)).max_episode_steps == 9
    # a key the env's file sets, with or without +: the command line's value
    for plus in ("", "+", "++"):
        cfg = composed(["env=arcade/cartpole", f"{plus}env.kwargs.partial_obs=false"])
        assert cfg.env.kwargs.partial_obs is False and cfg.env.kwargs.obs_size == 128


def test_cfg_job_shows_the_family_defaults_with_the_id(capsys, monkeypatch):
    code, out, err = run_cli(
        ["env=gymnax/DeepSea-bsuite", "env.kwargs.max_steps_in_episode=4", "--cfg", "job"],
        capsys,
        monkeypatch,
    )
    assert code == 0, err
    shown = yaml.safe_load(out)
    assert shown["env"]["name"] == "gymnax/DeepSea-bsuite"
    assert shown["env"]["kwargs"] == {"max_steps_in_episode": 4}


@pytest.mark.slow(
    reason="a multirun of two families, trained and resumed; how ids compose is tested above"
)
def test_a_sweep_over_ids_of_two_families_trains_each_and_resumes(tmp_path, capsys, monkeypatch):
    """``-m env=gymnasium/Acrobot-v1,gymnax/Catch-bsuite network=lstm``: each job trains its env
    with its family's defaults; ``resume=`` of a job, naming its env the same way, continues it
    (here: nothing left to train)."""
    argv = ["-m", "env=gymnasium/Acrobot-v1,gymnax/Catch-bsuite", "network=lstm", *RUN]
    code, _, err = run_cli([*argv, f"hydra.sweep.dir={tmp_path}"], capsys, monkeypatch)
    assert code == 0, err
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and (p / "config.yaml").exists())
    saved = [yaml.safe_load((j / "config.yaml").read_text()) for j in jobs]
    assert [s["env"]["name"] for s in saved] == ["gymnasium/Acrobot-v1", "gymnax/Catch-bsuite"]
    assert {s["network"]["name"] for s in saved} == {"lstm"}
    for job in jobs:
        assert read_jsonl(job / "metrics.jsonl")[-1]["step"] == 128
    argv = [f"resume={jobs[1]}", "env=gymnax/Catch-bsuite", "network=lstm", *RUN]
    code, _, err = run_cli(argv, capsys, monkeypatch)
    assert code == 0, err
    assert [r["step"] for r in read_jsonl(jobs[1] / "metrics.jsonl")] == [64, 128]


@pytest.mark.slow  # two more compiled trainings (about 30 s of a 2-core CPU); the default run
# trains gymnax/Catch-bsuite and checks MinAtar's env contract (test_env_contract.py)
def test_minatar_trains_through_the_cnn_and_flattened(tmp_path, capsys, monkeypatch):
    """Breakout-MinAtar's ``[10, 10, 4]`` channels train through the cnn encoder, and flattened
    through the mlp encoder (the family's defaults)."""
    cnn = ["network.encoder=cnn", "network.cnn_channels=[8]", "network.cnn_kernels=[3]"]
    for name, extra in (("cnn", [*cnn, "network.cnn_strides=[1]"]), ("mlp", [])):
        run_dir = tmp_path / name
        argv = ["env=gymnax/Breakout-MinAtar", *extra, *RUN, f"hydra.run.dir={run_dir}"]
        code, _, err = run_cli(argv, capsys, monkeypatch)
        assert code == 0, err
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert saved["env"]["name"] == "gymnax/Breakout-MinAtar"
        assert saved["network"]["encoder"] == name
        assert read_jsonl(run_dir / "metrics.jsonl")[-1]["step"] == 128


@pytest.mark.parametrize(
    "option", ["gymnasium/Acrobot-v1", "gymnax/Catch-bsuite", "popgym_ref/repeat_first"]
)
def test_known_options_have_no_error(option):
    assert env_option_error(option, CONFIG_DIR) is None
