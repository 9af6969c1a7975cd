"""PureJaxRL's rows: stoixlite's own implementations of its set-ups
(:mod:`stoixlite.benchmark.peers`), or PureJaxRL's own ``ppo.py`` / ``ppo_rnn.py`` from a
checkout (``--purejaxrl-dir``), adapted at run time to the installed libraries."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from stoixlite.benchmark.rows import ORIGINAL_FILES, POLICIES, reference_env_error
from stoixlite.benchmark.timing import program_memory, time_chunks


def reference_program(spec: dict) -> tuple[Any, Any, Any]:
    """``(fn, argument, final_return)`` of a PureJaxRL row (``purejaxrl_ppo`` or
    ``purejaxrl_ppo_rnn``): ``fn(argument)`` runs ``spec["updates"]`` updates of stoixlite's
    implementation of its set-up (``fn(state) -> (state, metrics)``), or with
    ``spec["purejaxrl_dir"]`` PureJaxRL's own file (:func:`original_program`);
    ``final_return(metrics)`` is the mean return of the episodes that ended in them."""
    import importlib

    import jax

    if error := reference_env_error(spec["network"], spec["env"]):
        raise SystemExit(error)
    if spec.get("purejaxrl_dir"):
        return original_program(spec)
    module = importlib.import_module(f"stoixlite.benchmark.peers.{spec['network']}")
    steps_per_update = spec["num_envs"] * spec["rollout_length"]
    updates = spec["updates"]
    settings = module.Settings(
        num_envs=spec["num_envs"],
        rollout_length=spec["rollout_length"],
        epochs=spec["epochs"],
        minibatches=spec["minibatches"],
        # the LR schedule spans the benchmarked updates, like stoixlite's num_updates
        total_timesteps=steps_per_update * updates * (spec["repeats"] + 1),
    )
    init, run_updates = module.build(settings, getattr(module, POLICIES[spec["network"]]))
    state = init(jax.random.PRNGKey(0))
    return lambda s: run_updates(s, updates), state, module.final_return


def run_reference_row(spec: dict) -> tuple[int, float, list[float], float, dict | None]:
    """Worker for a PureJaxRL row: ``(steps per chunk, compile s, times, return, program
    memory)`` of :func:`reference_program`. PureJaxRL's own ``train`` starts from a fresh
    network at every call (network and env initialisation included, a few milliseconds)."""
    import jax

    fn, argument, final_return = reference_program(spec)
    donate = 0 if not spec.get("purejaxrl_dir") else ()
    tic = time.perf_counter()
    learn = jax.jit(fn, donate_argnums=donate).lower(argument).compile()
    compile_s = time.perf_counter() - tic
    if spec.get("purejaxrl_dir"):  # train(key) -> metrics: the key stays the argument
        call = lambda key: (key, learn(key))  # noqa: E731
        times, _, metrics = time_chunks(call, argument, spec["repeats"])
    else:
        times, _, metrics = time_chunks(learn, argument, spec["repeats"])
    final = final_return(metrics) if times else float("nan")
    steps = spec["num_envs"] * spec["rollout_length"] * spec["updates"]
    return steps, compile_s, times, final, program_memory(learn)


def purejaxrl_source(directory: str | Path) -> Path | None:
    """The folder of PureJaxRL's ``ppo.py``, ``ppo_rnn.py`` and ``wrappers.py`` in a checkout
    (``DIR/purejaxrl`` or ``DIR`` itself), or None."""
    for folder in (Path(directory).expanduser() / "purejaxrl", Path(directory).expanduser()):
        if all((folder / f).is_file() for f in ("ppo.py", "ppo_rnn.py", "wrappers.py")):
            return folder
    return None


def load_purejaxrl(directory: str | Path, file: str):
    """Import PureJaxRL's ``file`` (``ppo.py`` or ``ppo_rnn.py``) from a checkout, adapted at
    run time to the libraries installed here (nothing of it is copied):

    * modules it imports that stoixlite does not install (``distrax``, ``brax``, ``navix``,
      ``chex``; ``wrappers.py`` imports the last three for wrappers the gymnax scripts never
      use) are stand-ins; ``distrax.Categorical`` gets the three methods the scripts call;
    * gymnax >= 1.0 returns ``terminated`` and ``truncated`` apart: the env that the script's
      ``gymnax.make`` returns gives their ``or`` as the ``done`` the scripts expect;
    * current flax's ``GRUCell`` needs its width (ppo_rnn.py's flax inferred 128 from the
      input) and its ``initialize_carry`` is a method of an instance: ``GRUCell`` defaults to
      128 features, and ``ScannedRNN.initialize_carry(batch, size)`` returns the zeros it did.
    """
    import importlib.util
    import types

    import flax.linen
    import gymnax
    import jax
    import jax.numpy as jnp

    source = purejaxrl_source(directory)
    if source is None:
        raise SystemExit(
            f"--purejaxrl-dir {directory}: no purejaxrl/ppo.py, ppo_rnn.py, wrappers.py"
        )

    class Categorical:
        def __init__(self, logits):
            self.logits = logits

        def sample(self, seed):
            return jax.random.categorical(seed, self.logits)

        def log_prob(self, value):
            log_p = jax.nn.log_softmax(self.logits)
            return jnp.sum(log_p * jax.nn.one_hot(value, log_p.shape[-1], dtype=log_p.dtype), -1)

        def entropy(self):
            log_p = jax.nn.log_softmax(self.logits)
            return -jnp.sum(jnp.exp(log_p) * log_p, -1)

    def stand_in(name: str, **attrs) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        module.__getattr__ = lambda attr: type(attr, (), {})  # placeholders for unused names
        return module

    stand_ins = {
        "distrax": {"Categorical": Categorical},
        "chex": {},
        "navix": {},
        "brax": {},
        "brax.envs": {},
        "brax.envs.wrappers": {},
        "brax.envs.wrappers.training": {},
    }
    missing = {
        top
        for top in ("distrax", "chex", "navix", "brax")
        if top not in sys.modules and importlib.util.find_spec(top) is None
    }
    for name, attrs in stand_ins.items():
        if name.split(".")[0] in missing:
            sys.modules[name] = stand_in(name, **attrs)

    class DoneEnv:
        """A gymnax >= 1.0 env whose ``step`` returns ``(obs, state, reward, done, info)``."""

        def __init__(self, env):
            self._env = env

        def __getattr__(self, name):
            return getattr(self._env, name)

        def step(self, key, state, action, params=None):
            obs, state, reward, terminated, truncated, info = self._env.step(
                key, state, action, params
            )
            return obs, state, reward, jnp.logical_or(terminated, truncated), info

    class GRUCell(flax.linen.GRUCell):
        features: int = 128

    flax.linen.GRUCell = GRUCell

    def load(name: str) -> types.ModuleType:  # a file of the checkout, as `import name` would
        spec = importlib.util.spec_from_file_location(name, source / f"{name}.py")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
        return loaded

    load("wrappers")  # the scripts' `from wrappers import ...`
    module = load(file.removesuffix(".py"))

    def make(name, **kwargs):
        env, params = gymnax.make(name, **kwargs)
        return DoneEnv(env), params

    module.gymnax = types.SimpleNamespace(make=make)
    if hasattr(module, "ScannedRNN"):
        module.ScannedRNN.initialize_carry = staticmethod(lambda n, size: jnp.zeros((n, size)))
    return module


def original_program(spec: dict) -> tuple[Any, Any, Any]:
    """:func:`reference_program` of a ``--purejaxrl-dir`` row: PureJaxRL's ``make_train(config)``
    with the row's sizes and its own defaults otherwise, ``train(key) -> metrics`` (its per-step
    env infos)."""
    import jax
    import numpy as np

    module = load_purejaxrl(spec["purejaxrl_dir"], ORIGINAL_FILES[spec["network"]])
    steps_per_update = spec["num_envs"] * spec["rollout_length"]
    config = {
        "LR": 2.5e-4,
        "NUM_ENVS": spec["num_envs"],
        "NUM_STEPS": spec["rollout_length"],
        "TOTAL_TIMESTEPS": steps_per_update * spec["updates"],
        "UPDATE_EPOCHS": spec["epochs"],
        "NUM_MINIBATCHES": spec["minibatches"],
        "GAMMA": 0.99,
        "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01,
        "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh",
        "ENV_NAME": "CartPole-v1",
        "ANNEAL_LR": True,
        "DEBUG": False,
    }
    train = module.make_train(config)

    def metrics(key: Any) -> Any:  # ppo.py returns {"metrics": ...}, ppo_rnn.py {"metric": ...}
        out = train(key)
        return out["metrics"] if "metrics" in out else out["metric"]

    def final_return(infos: dict) -> float:
        done = np.asarray(infos["returned_episode"])
        returns = np.asarray(infos["returned_episode_returns"])
        return float(returns[done].mean()) if done.any() else float("nan")

    return metrics, jax.random.PRNGKey(0), final_return
