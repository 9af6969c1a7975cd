"""The config fingerprint: what a checkpoint must agree on with the run that restores it.

:func:`config_fingerprint` reads it from a config's plain dict (:meth:`RunConfig.to_dict`); the
run plan holds its run's (:attr:`stoixlite.config.plan.RunPlan.fingerprint`), and a saved run's
is read from its ``config.yaml`` (:func:`stoixlite.run.resume.find_checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from stoixlite.config.schema import CNN_KEYS

# arch keys that change the shapes of the learner state (besides the network and env configs).
_SHAPE_ARCH_KEYS = ("num_envs", "num_seeds")
# env keys that change neither the learner state nor the env's dynamics on valid actions.
_UNFINGERPRINTED_ENV_KEYS = ("check_actions", "vector")
# Env keys added after checkpoints existed, with the value every older run had: left out of the
# fingerprint at that value, so checkpoints written before the key existed still restore.
_ADDED_ENV_KEYS = {"obs_prev_action": True}
# Network keys read only by one encoder: left out of the fingerprint unless that encoder is chosen
# (they change nothing else, and checkpoints written before they existed still restore).
_ENCODER_KEYS = {"cnn": CNN_KEYS}
# Network keys that change how the network computes, not what (equal up to float rounding).
_UNFINGERPRINTED_NETWORK_KEYS = ("cnn_slice_frames",)


def config_fingerprint(container: Mapping[str, Any]) -> dict[str, Any]:
    """What a checkpoint must agree on with the run restoring it.

    ``{"network": {...}, "env": {...}, "arch": {"num_envs": N, "num_seeds": S}, "hash": str}``
    of a parsed config's plain dict ``container`` (:meth:`~stoixlite.config.schema.RunConfig.
    to_dict`: typed values and defaults filled in, so a composed config, its parsed form and the
    saved ``config.yaml`` agree), without ``env.check_actions`` (a checked run
    resumes or evaluates an unchecked one's checkpoint) and without keys added later while they
    hold the value older runs had (``_ADDED_ENV_KEYS``), nor the keys of an encoder the run does
    not use (``_ENCODER_KEYS``), nor those that change only how the network computes
    (``_UNFINGERPRINTED_NETWORK_KEYS``). The hash is a short sha256 of the rest.
    """
    arch = container["arch"]
    env = {
        k: v
        for k, v in container["env"].items()
        if k not in _UNFINGERPRINTED_ENV_KEYS
        and not (k in _ADDED_ENV_KEYS and v == _ADDED_ENV_KEYS[k])
    }
    network = container["network"]
    unread = {
        k for encoder, keys in _ENCODER_KEYS.items() if network["encoder"] != encoder for k in keys
    } | set(_UNFINGERPRINTED_NETWORK_KEYS)
    fingerprint = {
        "network": {k: v for k, v in network.items() if k not in unread},
        "env": env,
        "arch": {k: arch.get(k, 1 if k == "num_seeds" else None) for k in _SHAPE_ARCH_KEYS},
    }
    blob = json.dumps(fingerprint, sort_keys=True, default=str).encode()
    return {**fingerprint, "hash": hashlib.sha256(blob).hexdigest()[:16]}
