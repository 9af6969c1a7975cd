"""Registered envs whose env-contract and invalid-action tests run only under ``pytest -m slow``:
their programs take long to compile on a 2-core CPU (Craftax-Classic 25-28 s per test, full
Craftax 56-92 s; each POPGym Arcade game draws its 128 x 128 frames with a large program, 5-30 s
per compile). Their adapters stay covered in the default run by their own tests
(test_craftax_adapter.py: Craftax-Classic replayed against Craftax's ``step_env``, death against
the time limit, every variant's spaces; test_arcade_adapter.py) and by ``arcade/count_recall``,
the one arcade game whose declared specs are checked by default. Its batched auto-reset and
invalid-action probe (:data:`SLOW_PROBES`: 7 and 12 s) run under ``pytest -m slow`` too: both
go through the wrappers every env goes through (auto-reset, invalid-action policy), which the
default run checks on the gymnax and POPGym envs; the adapter's own episode ends are checked by
test_arcade_adapter.py.

gymnax's envs all go through one adapter (``stoixlite.envs.gymnax_adapter``): the default run
checks those with a config of their own and one of each other observation kind (MinAtar's
images: ``Breakout-MinAtar``, the cheapest to compile; bsuite's boards: ``Catch-bsuite``;
FrozenLake's one-hot cells); the others (Seaquest-MinAtar alone compiles for 50 s) under
``pytest -m slow``.
"""

from __future__ import annotations

from stoixlite.cli.configs import CONFIG_DIR
from stoixlite.envs.registry import available_envs

DEFAULT_RUN_ARCADE = "arcade/count_recall"
DEFAULT_RUN_GYMNAX = frozenset(
    {f"gymnax/{p.stem}" for p in (CONFIG_DIR / "env" / "gymnax").glob("*.yaml")}
    | {"gymnax/Breakout-MinAtar", "gymnax/Catch-bsuite", "gymnax/FrozenLake-misc"}
)

SLOW_ENVS = frozenset(
    {n for n in available_envs() if n.startswith("craftax/")}
    | {n for n in available_envs() if n.startswith("arcade/") and n != DEFAULT_RUN_ARCADE}
    | {n for n in available_envs() if n.startswith("gymnax/") and n not in DEFAULT_RUN_GYMNAX}
)

# Envs whose batched auto-reset (test_env_contract.py) and invalid-action probe
# (test_invalid_actions.py) run only under `pytest -m slow`.
SLOW_PROBES = SLOW_ENVS | {DEFAULT_RUN_ARCADE}
