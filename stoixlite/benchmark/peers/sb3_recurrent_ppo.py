"""Worker of ``python -m stoixlite.benchmark host``: times Stable-Baselines3's ``RecurrentPPO``
(sb3-contrib) training on Gymnasium's CartPole-v1, for the comparison with stoixlite's host loop.

It runs in the Python that has sb3-contrib (``pip install 'stoixlite[sb3]'``, or a venv of its
own named by ``--sb3-python``, which need not have stoixlite), so it imports nothing of
stoixlite and runs as a file; sb3-contrib, Stable Baselines3 and torch by ``importlib`` (the test
venv has none of them). Usage (``PEERS`` the folder of this file, stoixlite/benchmark/peers)::

    python PEERS/sb3_recurrent_ppo.py '{"vector": "sync", "num_envs": 8, "rollout_length": 128,
        "epochs": 4, "minibatches": 4, "updates": 1, "repeats": 3, "width": 128}'
    python PEERS/sb3_recurrent_ppo.py --versions

A timed call is ``model.learn`` of ``updates`` updates of ``num_envs x rollout_length`` steps
(rollout on a ``DummyVecEnv`` for ``sync``, a ``SubprocVecEnv`` for ``async``, then
``epochs x minibatches`` of training); one warm-up call, then ``repeats`` timed ones. The policy
is ``MlpLstmPolicy`` with its defaults (an LSTM for the actor and one for the critic, then
2 x 64 tanh MLPs) but ``lstm_hidden_size = width``. Prints one JSON line: ``sps_all``,
``compile_s`` (building the envs and the model: sb3 compiles nothing), ``peak_rss_mb`` (this
process), ``final_return`` (mean of the last 100 training episodes), ``load_avg``, ``threads``.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time

ENV_ID = "CartPole-v1"
PACKAGES = ("sb3_contrib", "stable_baselines3", "torch", "gymnasium")


def versions() -> dict[str, str]:
    """The versions of the packages this worker uses."""
    return {name: importlib.import_module(name).__version__ for name in PACKAGES}


def run(spec: dict) -> dict:
    sb3_contrib = importlib.import_module("sb3_contrib")
    vec_env = importlib.import_module("stable_baselines3.common.vec_env")
    env_util = importlib.import_module("stable_baselines3.common.env_util")
    torch = importlib.import_module("torch")

    if spec.get("torch_threads"):  # else torch's own choice (one per core)
        torch.set_num_threads(spec["torch_threads"])
    n, steps = spec["num_envs"], spec["rollout_length"]
    tic = time.perf_counter()
    envs = env_util.make_vec_env(
        ENV_ID,
        n_envs=n,
        seed=0,
        vec_env_cls=vec_env.DummyVecEnv if spec["vector"] == "sync" else vec_env.SubprocVecEnv,
    )
    model = sb3_contrib.RecurrentPPO(
        "MlpLstmPolicy",
        envs,
        n_steps=steps,
        batch_size=n * steps // spec["minibatches"],
        n_epochs=spec["epochs"],
        policy_kwargs={"lstm_hidden_size": spec["width"]},
        device="cpu",
        seed=0,
        verbose=0,
    )
    setup_s = time.perf_counter() - tic
    chunk = n * steps * spec["updates"]
    model.learn(chunk)  # warm-up
    times = []
    for _ in range(spec["repeats"]):
        tic = time.perf_counter()
        model.learn(chunk, reset_num_timesteps=False)
        times.append(time.perf_counter() - tic)
    episodes = [info["r"] for info in model.ep_info_buffer]
    envs.close()
    return {
        "sps_all": [chunk / t for t in times],
        "compile_s": setup_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "final_return": sum(episodes) / len(episodes) if episodes else float("nan"),
        "load_avg": os.getloadavg()[0],
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str]) -> int:
    if argv == ["--versions"]:
        print(json.dumps(versions()))
        return 0
    if len(argv) != 1:
        print(f"usage: {sys.argv[0]} SPEC_JSON | --versions", file=sys.stderr)
        return 2
    print(json.dumps(run(json.loads(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
