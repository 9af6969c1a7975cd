"""W&B logger in offline mode (no network): the written run is read back from its .wandb file."""

from __future__ import annotations

import logging

import pytest
from conftest import compose_config
from omegaconf import OmegaConf
from wandb_reader import read_run

from stoixlite.config.parse import parse
from stoixlite.tracking import wandb_logger
from stoixlite.tracking.wandb_logger import RUN_ID_FILE, WandbLogger, from_config


@pytest.fixture(autouse=True)
def offline_env(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))


def test_offline_run_has_config_metrics_summary(tmp_path):
    cfg = compose_config(["logger=wandb", "logger.wandb.tags=[a,b]", "logger.wandb.group=g"])
    config = OmegaConf.to_container(cfg, resolve=True)
    logger = from_config(parse(cfg).logger.wandb, config, tmp_path / "run", default_name="my run")
    assert logger.mode == "offline" and logger.active
    records = [
        {"step": 256, "update": 1, "eval/episode_return": 0.25, "train/sps": 1e3},
        {"step": 512, "update": 2, "eval/episode_return": 0.5, "loss/approx_kl": float("nan")},
    ]
    for record in records:
        logger.log(record, step=record["step"])
    logger.summary({"final/eval_return": 0.5})
    run_path = logger.run_path
    logger.finish()
    assert (
        run_path.name.startswith("offline-run-") and run_path.parent == tmp_path / "run" / "wandb"
    )

    run = read_run(run_path)
    assert run["run"].project == "stoixlite"
    assert run["run"].run_group == "g"
    assert list(run["run"].tags) == ["a", "b"]
    assert run["run"].display_name == "my run"
    assert run["run"].run_id == (tmp_path / "run" / RUN_ID_FILE).read_text().strip()
    assert run["config"]["network"] == config["network"]
    assert run["config"]["system"]["lr"] == cfg.system.lr
    history = run["history"]
    assert [h["env_step"] for h in history] == [256, 512]
    assert [h["_step"] for h in history] == [256, 512]  # env steps are the x-axis
    assert [h["eval/episode_return"] for h in history] == [0.25, 0.5]
    assert history[0]["update"] == 1 and history[0]["train/sps"] == 1e3
    assert history[1]["loss/approx_kl"] is None and "step" not in history[0]
    assert run["summary"]["final/eval_return"] == 0.5


def test_mode_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE")
    assert wandb_logger.resolve_mode("auto") == "offline"
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert wandb_logger.has_credentials() and wandb_logger.resolve_mode("auto") == "online"
    monkeypatch.setenv("NETRC", str(tmp_path / "missing"))
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_logger.resolve_mode("auto") == "online"
    assert wandb_logger.resolve_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")  # the environment always wins
    assert wandb_logger.resolve_mode("online") == "offline"
    with pytest.raises(ValueError, match="logger.wandb.mode"):
        monkeypatch.delenv("WANDB_MODE")
        wandb_logger.resolve_mode("sometimes")


def test_unreachable_service_falls_back_offline(monkeypatch, tmp_path, caplog):
    """Credentials but no server: one error, then an offline run that records everything."""
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    with caplog.at_level(logging.ERROR, logger="stoixlite.tracking.wandb_logger"):
        logger = WandbLogger({"x": 1}, tmp_path / "run", mode="auto", init_timeout=2)
    assert logger.mode == "offline" and logger.active
    assert len([r for r in caplog.records if "init (online) failed" in r.getMessage()]) == 1
    logger.log({"eval/episode_return": 1.0}, step=8)
    path = logger.run_path
    logger.finish()
    assert read_run(path)["history"][0]["eval/episode_return"] == 1.0


def test_failing_log_reports_once_and_stops(tmp_path, caplog):
    logger = WandbLogger({"x": 1}, tmp_path / "run")
    calls = []

    def broken_log(*args, **kwargs):
        calls.append(1)
        raise ConnectionError("service gone")

    logger.run.log = broken_log
    with caplog.at_level(logging.ERROR, logger="stoixlite.tracking.wandb_logger"):
        for step in range(5):
            logger.log({"eval/episode_return": 0.0}, step=step)  # never raises
        logger.summary({"a": 1.0})
    assert len(calls) == 1 and not logger.active
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "service gone" in errors[0].getMessage()
    logger.finish()


def test_disabled_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE")
    logger = WandbLogger({"x": 1}, tmp_path / "run", mode="disabled")
    logger.log({"a": 1.0}, step=1)
    logger.finish()
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


@pytest.mark.parametrize(
    "wandb_mode,mode,why",
    [
        (None, "auto", "no W&B credentials"),
        ("offline", "auto", "offline mode requested"),
        (None, "offline", "offline mode requested"),
    ],
)
def test_offline_run_says_so_in_one_line(monkeypatch, tmp_path, caplog, wandb_mode, mode, why):
    if wandb_mode is None:
        monkeypatch.delenv("WANDB_MODE")
    with caplog.at_level(logging.WARNING, logger="stoixlite.tracking.wandb_logger"):
        logger = WandbLogger({"x": 1}, tmp_path / "run", mode=mode)
    assert logger.mode == "offline" and logger.active
    lines = [r.getMessage() for r in caplog.records if "offline" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert why in lines[0] and f"wandb sync {logger.run_path}" in lines[0]
    assert logger.run_path.name.startswith("offline-run-")
    logger.finish()


def test_online_without_an_api_key_says_the_key_is_missing(monkeypatch, tmp_path, caplog):
    """``WANDB_MODE=online`` without a key used to say "W&B unreachable". The missing key is
    found before any connection is tried (no network needed)."""
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="stoixlite.tracking.wandb_logger"):
        logger = WandbLogger({"x": 1}, tmp_path / "run", init_timeout=2)
    assert logger.mode == "offline" and logger.active
    (line,) = [r.getMessage() for r in caplog.records]  # no "init (online) failed" error
    assert "WANDB_MODE=online but no W&B API key" in line and "`wandb login`" in line, line
    assert "WANDB_MODE=offline" in line and f"wandb sync {logger.run_path}" in line
    assert "unreachable" not in line and "\n" not in line
    logger.finish()
