"""Registered envs whose env-contract and invalid-action tests run only under ``pytest -m slow``:
their programs take long to compile on a 2-core CPU (Craftax-Classic 25-28 s per test, full
Craftax 56-92 s; each POPGym Arcade game draws its 128 x 128 frames with a large program, 5-30 s
per compile). Their adapters stay covered in the default run by their own tests
(test_craftax_adapter.py: Craftax-Classic replayed against Craftax's ``step_env``, death against
the time limit, every variant's spaces; test_arcade_adapter.py) and by ``arcade/count_recall``,
the one arcade game whose contract and invalid-action tests run by default.
"""

from __future__ import annotations

from stoixlite.envs.registry import available_envs

DEFAULT_RUN_ARCADE = "arcade/count_recall"

SLOW_ENVS = frozenset(
    {n for n in available_envs() if n.startswith("craftax/")}
    | {n for n in available_envs() if n.startswith("arcade/") and n != DEFAULT_RUN_ARCADE}
)
