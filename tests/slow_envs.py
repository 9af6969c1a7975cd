"""Registered envs whose env-contract and invalid-action tests run only under ``pytest -m slow``:
their programs take minutes to compile on a 2-core CPU (full Craftax: 56-92 s per test; each POPGym
Arcade game draws its 128 x 128 frames with a large program, 15-30 s per compile). One env of
each suite stays in the default run and covers the same adapter: Craftax-Classic (symbolic; the
pixel variants differ only in the observation kept as an image, whose spaces
test_craftax_adapter.py checks) and
``arcade/count_recall`` (whose replay and termination tests are in test_arcade_adapter.py).
"""

from __future__ import annotations

from stoixlite.envs.registry import available_envs

DEFAULT_RUN_ARCADE = "arcade/count_recall"

SLOW_ENVS = frozenset(
    {"craftax/symbolic", "craftax/classic_pixels", "craftax/pixels"}
    | {n for n in available_envs() if n.startswith("arcade/") and n != DEFAULT_RUN_ARCADE}
)
