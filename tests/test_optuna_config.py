"""``configs/hydra/sweeper/ppo_optuna.yaml``: every parameter of the search space is a run config
key, and every value it can draw (an interval's ends, each choice) is a valid run config, so no
trial is wasted on a config error. Composing the sweeper itself needs the optional extra."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from stoixlite.cli.args import checked_run_config

SWEEPER = Path(__file__).resolve().parents[1] / "configs" / "hydra" / "sweeper" / "ppo_optuna.yaml"
PARAMS = yaml.safe_load(SWEEPER.read_text())["params"]


def drawable(spec: str) -> list[str]:
    """The ends of ``interval(a, b)`` (also under ``tag(log, ...)``), or each ``choice(...)``."""
    found = re.search(r"(interval|choice)\(([^()]*)\)", spec)
    assert found, f"unparsed search space {spec!r}"
    values = [v.strip() for v in found.group(2).split(",")]
    assert values and (found.group(1) == "choice" or len(values) == 2), spec
    return values


@pytest.mark.parametrize("key", sorted(PARAMS))
def test_every_drawable_value_is_a_valid_run_config(key):
    for value in drawable(str(PARAMS[key])):
        cfg, error = checked_run_config([f"{key}={value}"])
        assert error is None, f"{key}={value}: {error}"
        section, name = key.split(".")
        assert float(getattr(getattr(cfg, section), name)) == pytest.approx(float(value))


def test_a_value_outside_the_schema_is_caught():
    """Negative control: the check above refuses a value the run config does not allow."""
    _, error = checked_run_config(["system.clip_eps=-0.1"])
    assert error is not None and "system.clip_eps" in error


def test_the_sweeper_composes_with_the_extra(tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper",
        reason="needs the optuna extra: pip install -e '.[optuna]'",
    )
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(SWEEPER.parents[2]), version_base=None):
        cfg = compose("config", overrides=["hydra/sweeper=ppo_optuna"], return_hydra_config=True)
    assert cfg.hydra.sweeper.direction == "maximize"
    assert set(cfg.hydra.sweeper.params) == set(PARAMS)
