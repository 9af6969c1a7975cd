"""The benchmark's rows: the reference rows against PureJaxRL's set-ups, and the Hydra overrides
of a stoixlite row.

The PureJaxRL set-ups run as pseudo-networks named after their module in
:mod:`stoixlite.benchmark.peers` (stoixlite's own implementations: ``Settings``,
``build(settings, make_policy)`` and a policy factory), or with ``--purejaxrl-dir`` as
PureJaxRL's own file of that name.
"""

from __future__ import annotations

# The PureJaxRL set-ups run as pseudo-networks named after their module in scripts/ (stoixlite's
# own implementations: Settings, build(settings, make_policy) and a policy factory), or with
# --purejaxrl-dir as PureJaxRL's own file of that name.
PUREJAXRL_PPO = "purejaxrl_ppo"  # ppo.py
PUREJAXRL_PPO_RNN = "purejaxrl_ppo_rnn"  # ppo_rnn.py
REFERENCE_MODULES = (PUREJAXRL_PPO, PUREJAXRL_PPO_RNN)
POLICIES = {PUREJAXRL_PPO: "feedforward_policy", PUREJAXRL_PPO_RNN: "gru_policy"}
ORIGINAL_FILES = {PUREJAXRL_PPO: "ppo.py", PUREJAXRL_PPO_RNN: "ppo_rnn.py"}
REFERENCE_ENV = "gymnax/CartPole-v1"  # the only env the reference set-ups run
# The feedforward network's shape (configs/network/feedforward.yaml) around a memory model.

PPO_PY_WIDTHS = (
    "network.hidden_size=64",
    "network.embed_size=64",
    "network.encoder_layers=0",
    "network.head_size=64",
    "network.head_layers=2",
    "network.activation=tanh",
)

REFERENCE_ROWS = [
    # PureJaxRL ppo.py against its like-for-like stoixlite network (feedforward: separate
    # 2 x 64 tanh actor and critic, shuffled transitions), 4 epochs x 4 minibatches.
    *(
        {"network": n, "env": REFERENCE_ENV, "num_envs": e, "width": None, "label": label}
        for e in (4, 64)
        for n, label in ((PUREJAXRL_PPO, "PureJaxRL ppo.py"), ("feedforward", "like ppo.py"))
    ),
    # PureJaxRL ppo_rnn.py against its shape (GRU/embedding/heads 128) and the memoroids at the
    # same width.
    *(
        {"network": n, "env": REFERENCE_ENV, "num_envs": e, "width": w, "label": label}
        for e in (4, 64)
        for n, w, label in (
            (PUREJAXRL_PPO_RNN, None, "PureJaxRL ppo_rnn.py"),
            ("gru", 128, "width 128"),
            ("memoroid", 128, "width 128"),
            ("mlp", 128, "width 128"),
        )
    ),
    # The memoroids at ppo.py's widths, to compare like with like against that row: no encoder,
    # a 64-wide memory, then separate-head 2 x 64 tanh MLPs, against the feedforward row.
    *(
        {
            "network": n,
            "env": REFERENCE_ENV,
            "num_envs": e,
            "width": None,
            "label": "ppo.py widths",
            "overrides": list(PPO_PY_WIDTHS),
        }
        for e in (4, 64)
        for n in ("memoroid", "lru", "s5", "mingru", "linear_attention")
    ),
]
REFERENCE_LABELS = {row["label"] for row in REFERENCE_ROWS}


def reference_env_error(network: str, env: str) -> str | None:
    """The error for a PureJaxRL pseudo-network on an env it does not run, else None."""
    if network in REFERENCE_MODULES and env != REFERENCE_ENV:
        return f"{network} runs only on {REFERENCE_ENV}, not {env}"
    return None


def stoixlite_overrides(spec: dict) -> list[str]:
    """The Hydra overrides of a stoixlite row."""
    steps_per_update = spec["num_envs"] * spec["rollout_length"]
    width = spec.get("width", 128)
    return [
        f"env={spec['env']}",
        f"network={spec['network']}",
        f"arch.num_envs={spec['num_envs']}",
        f"system.rollout_length={spec['rollout_length']}",
        f"system.epochs={spec['epochs']}",
        f"system.num_minibatches={spec['minibatches']}",
        # one chunk per timed call; the LR schedule spans warm-up + timed chunks
        f"arch.total_timesteps={steps_per_update * spec['updates'] * (spec['repeats'] + 1)}",
        f"arch.num_evaluations={spec['repeats'] + 1}",
        *(
            [f"network.{k}={width}" for k in ("hidden_size", "embed_size", "head_size")]
            if width
            else []
        ),
        *([f"arch.num_devices={spec['devices']}"] if spec.get("devices") else []),
        *spec.get("overrides", []),
    ]


def checkout(spec: dict) -> str:
    """The label of a ``--purejaxrl-dir`` row: its reimplementation row's, marked."""
    return f"{spec.get('label') or 'PureJaxRL'} (checkout)"


def describe(spec: dict) -> str:
    """``<network> on <env>, <n> envs[, <d> devices]``: a row in the user's terms."""
    devices = f", {spec['devices']} devices" if spec.get("devices") else ""
    return f"{spec['network']} on {spec['env']}, {spec['num_envs']} envs{devices}"


def build_stoixlite_run(spec: dict):
    """The :class:`stoixlite.run.parts.Run` of a stoixlite row (:func:`stoixlite_overrides`)."""
    from hydra import compose, initialize_config_dir

    from stoixlite.cli.configs import CONFIG_DIR, read_config
    from stoixlite.config.plan import plan_run
    from stoixlite.run.build import build_run

    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("config", overrides=stoixlite_overrides(spec))
    return build_run(plan_run(read_config(cfg, join_processes=False)))
