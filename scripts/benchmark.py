"""Training throughput benchmark: env steps/s (compile excluded), compile time, peak memory.

Each row trains the real ``rec_ppo`` learn chunk (rollout + GAE + epochs x minibatches) in a fresh
subprocess, so peak memory is per row. A timed call is one compiled chunk of ``--chunk-steps``
env steps (``chunk_steps / (envs x steps)`` updates, the program training runs); each row runs a
warm-up call and ``--repeats`` timed calls, and ``--rounds R`` repeats the whole list of rows R
times, interleaved (A B A B ...), so that machine load hits every row alike. Reported per row: the
median and range of all timed calls, their number, compile seconds, peak memory (process RSS, and
on a GPU the device's own peak beside it), the memory of the compiled learn chunk (``program MiB``:
XLA's memory analysis of the compiled program, arguments + temporaries + outputs that do not reuse
an argument's buffer; what the program needs on its device on any backend, the CPU included, and
known before it runs), the final return (mean return of the training episodes of the last timed
chunk: evidence that the run learns) and the 1-minute load average during the row.
``--compile-only`` compiles each row and reports its memory without training (no SPS, no return):
for configurations too large to train on the machine at hand. Rows:

* the matrix ``--networks`` x ``--envs`` x ``--num-envs`` at ``--rollout-length`` (default: every
  registered memory model x {gymnax/CartPole-v1, popgym/repeat_previous}, 64 envs x 128 steps),
  with ``--overrides`` (Hydra overrides of every matrix row, shown in its note column: e.g. the
  encoder's settings, ``network.encoder=cnn network.cnn_channels=[32,64,64]``; the image env
  ``pixel/colour_cue`` selects the cnn encoder in its own config);
* reference rows (CartPole-v1, 4 epochs x 4 minibatches, 4 and 64 envs x 128 steps): the PPO
  set-up of PureJaxRL's ``ppo.py`` (stoixlite's own implementation in
  ``scripts/purejaxrl_ppo.py``, network name ``purejaxrl_ppo``: separate 2 x 64 tanh actor and
  critic, shuffled transitions) against ``network=feedforward``, and that of PureJaxRL's
  ``ppo_rnn.py`` (``scripts/purejaxrl_ppo_rnn.py``, network name ``purejaxrl_ppo_rnn``: GRU 128,
  whole 128-step sequences, minibatches of envs) against gru, memoroid and mlp at width 128
  (its GRU/embedding/head size).

The two PureJaxRL pseudo-networks run only on gymnax/CartPole-v1; ``--networks`` accepts them
for the matrix rows too. ``--purejaxrl-dir DIR`` (a checkout of PureJaxRL) adds, after each of
their rows, a row that times PureJaxRL's own ``ppo.py`` or ``ppo_rnn.py`` from ``DIR`` (label
``... (checkout)``), adapted at run time to the installed libraries (see
:func:`load_purejaxrl`). Its ``train`` starts from a fresh network at every call, so the final
return of such a row is that of one chunk of training.

Usage::

    python scripts/benchmark.py                        # full table, JSON to benchmark_results.json
    python scripts/benchmark.py --reference-only --rounds 3
    python scripts/benchmark.py --reference-only --reference-labels "PureJaxRL ppo.py" \\
        --purejaxrl-dir ~/src/purejaxrl --rounds 3   # the reimplementation vs the original
    python scripts/benchmark.py --no-reference --networks purejaxrl_ppo feedforward memoroid \\
        --width 0 --num-envs 4 64 --envs gymnax/CartPole-v1 --rounds 3
    python scripts/benchmark.py --networks gru --envs popgym/repeat_previous --no-reference \\
        --num-envs 1024 --devices 1 2 4 8             # SPS per device count (arch.num_devices)
    python scripts/benchmark.py ... --devices 1 2 4 --host-devices 4
                                                       # forced CPU devices: correctness, not speed
    python scripts/benchmark.py --networks gru mlp --envs pixel/colour_cue --no-reference \
        --overrides network.encoder=cnn                # image observations through the cnn
    python scripts/benchmark.py --networks gru --envs arcade/count_recall --no-reference \\
        --num-envs 64 128 --overrides arch.num_seeds=3 --compile-only
                                                       # the learn program's memory, not trained
    python scripts/benchmark.py --env-only [...]       # env throughput: every POPGym port vs popgym
                                                       # (arguments go to scripts/benchmark_envs.py)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from stoixlite.cli.args import (  # noqa: E402
    OneLineArgumentParser,
    checked_run_config,
    compile_for_real,
    fail,
    last_error_line,
    output_file_error,
)

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


def hardware() -> str:
    """CPU model (and GPU if JAX sees one), for the results table."""
    import jax

    from stoixlite.results.machine import cpu_description

    devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    backend = jax.default_backend()
    return f"{cpu_description()}; JAX {jax.__version__} on {backend} ({devices})"


def program_memory(compiled) -> dict[str, float] | None:
    """XLA's memory analysis of a compiled program, in MiB: ``temp``, ``argument``, ``output``,
    ``alias`` (outputs that reuse an argument's buffer: the donated learner state) and
    ``program`` = argument + temp + output - alias, the device memory it needs while it runs;
    ``None`` where the backend gives no analysis."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    mib = {
        k: getattr(analysis, f"{k}_size_in_bytes") / 2**20
        for k in ("temp", "argument", "output", "alias")
    }
    mib["program"] = mib["argument"] + mib["temp"] + mib["output"] - mib["alias"]
    return mib


def _time_chunks(learn_chunk, state, repeats: int) -> tuple[list[float], object, dict]:
    """Warm-up call, then ``repeats`` timed calls; returns (seconds per call, state, metrics).
    With ``repeats == 0`` (``--compile-only``) nothing runs: ``([], state, None)``."""
    import jax

    if repeats == 0:
        return [], state, None
    state, metrics = learn_chunk(state)  # warm-up
    jax.block_until_ready(metrics)
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        state, metrics = learn_chunk(state)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - tic)
    return times, state, metrics


def reference_env_error(network: str, env: str) -> str | None:
    """The error for a PureJaxRL pseudo-network on an env it does not run, else None."""
    if network in REFERENCE_MODULES and env != REFERENCE_ENV:
        return f"{network} runs only on {REFERENCE_ENV}, not {env}"
    return None


def run_reference_row(spec: dict) -> tuple[int, float, list[float], float, dict | None]:
    """Worker for a PureJaxRL row (``purejaxrl_ppo`` or ``purejaxrl_ppo_rnn``): ``(steps per
    chunk, compile s, times, return, program memory)``. With ``spec["purejaxrl_dir"]`` it times
    PureJaxRL's own file (:func:`run_original_row`), else stoixlite's implementation of its
    set-up."""
    import importlib

    import jax

    if error := reference_env_error(spec["network"], spec["env"]):
        raise SystemExit(error)
    if spec.get("purejaxrl_dir"):
        return run_original_row(spec)
    module = importlib.import_module(spec["network"])  # a script beside this one
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
    tic = time.perf_counter()
    learn = jax.jit(lambda s: run_updates(s, updates), donate_argnums=0).lower(state).compile()
    compile_s = time.perf_counter() - tic
    times, _, metrics = _time_chunks(learn, state, spec["repeats"])
    final = module.final_return(metrics) if times else float("nan")
    return steps_per_update * updates, compile_s, times, final, program_memory(learn)


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


def run_original_row(spec: dict) -> tuple[int, float, list[float], float, dict | None]:
    """Worker for a ``--purejaxrl-dir`` row: PureJaxRL's ``make_train(config)`` with the row's
    sizes and its own defaults otherwise; a timed call is its whole ``train(rng)`` of one
    chunk's updates (network and env initialisation included, a few milliseconds)."""
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
    key = jax.random.PRNGKey(0)
    tic = time.perf_counter()
    train = jax.jit(module.make_train(config)).lower(key).compile()
    compile_s = time.perf_counter() - tic
    # ppo.py returns {"metrics": ...}, ppo_rnn.py {"metric": ...}: the per-step env infos
    metrics_of = lambda out: out["metrics"] if "metrics" in out else out["metric"]
    times, _, metrics = _time_chunks(lambda k: (k, metrics_of(train(k))), key, spec["repeats"])
    if not times:
        return steps_per_update * spec["updates"], compile_s, times, float("nan"), None
    done = np.asarray(metrics["returned_episode"])
    returns = np.asarray(metrics["returned_episode_returns"])
    final = float(returns[done].mean()) if done.any() else float("nan")
    return steps_per_update * spec["updates"], compile_s, times, final, program_memory(train)


def run_stoixlite_row(spec: dict) -> tuple[int, float, list[float], float, int, dict | None]:
    """Worker for a stoixlite row: ``(steps per chunk, compile s, times, final return,
    devices, program memory)``."""
    exp = build_stoixlite_run(spec)
    state, _ = exp.init()  # laid out on the run's devices
    tic = time.perf_counter()
    learn_chunk = exp.learn.lower(state).compile()
    compile_s = time.perf_counter() - tic
    times, _, metrics = _time_chunks(learn_chunk, state, spec["repeats"])
    final = final_train_return(metrics) if times else float("nan")
    memory = program_memory(learn_chunk)
    return exp.steps_per_chunk, compile_s, times, final, exp.placement.num_devices, memory


def build_stoixlite_run(spec: dict):
    """The :class:`stoixlite.run.parts.Run` of a stoixlite row (:func:`stoixlite_overrides`)."""
    from hydra import compose, initialize_config_dir

    from stoixlite.cli.configs import CONFIG_DIR, read_config
    from stoixlite.config.plan import plan_run
    from stoixlite.run.build import build_run

    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("config", overrides=stoixlite_overrides(spec))
    return build_run(plan_run(read_config(cfg, join_processes=False)))


def final_train_return(metrics: dict) -> float:
    """The mean return of the training episodes that ended in a chunk's ``metrics`` (NaN where
    none did)."""
    import numpy as np

    count = np.asarray(metrics["train/episodes"], np.float64)
    returns = np.asarray(metrics["train/episode_return"], np.float64)
    return float((returns * count).sum() / count.sum()) if count.sum() else float("nan")


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


def run_row(spec: dict) -> dict:
    """Worker: compile and time the learn chunk for one configuration (runs in a subprocess).

    A timed call is one compiled chunk of ``updates`` updates (the same program training runs);
    it runs ``repeats`` times after one warm-up call. The final return is the mean return of
    the training episodes that ended in the last timed chunk.
    """
    import resource

    import jax

    compile_for_real()  # the compile seconds of the row are a compilation, not a cache load
    if spec["network"] in REFERENCE_MODULES:
        steps, compile_s, times, final, memory = run_reference_row(spec)
        devices = 1
    else:
        steps, compile_s, times, final, devices, memory = run_stoixlite_row(spec)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device_peak = None
    stats = jax.devices()[0].memory_stats() if hasattr(jax.devices()[0], "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        device_peak = stats["peak_bytes_in_use"] / 2**20
    return {
        **{
            k: spec[k]
            for k in ("network", "env", "num_envs", "rollout_length", "epochs", "minibatches")
        },
        "label": spec.get("label", ""),
        "devices": devices,
        "sps_all": [steps / t for t in times],
        "compile_s": compile_s,
        "peak_rss_mb": peak_rss_mb,
        "peak_device_mb": device_peak,
        "program_mb": None if memory is None else memory["program"],
        "program_memory_mb": memory,
        "final_return": final,
        "load_avg": os.getloadavg()[0],
        "backend": jax.default_backend(),
    }


def worker_env(host_devices: int | None = None) -> dict[str, str]:
    """The environment of the worker subprocesses (``--host-devices``: forced CPU devices)."""
    env = dict(os.environ)
    if host_devices:
        forced = f"--xla_force_host_platform_device_count={host_devices}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {forced}"
    return env


def run_worker(flag: str, payload: object, host_devices: int | None = None):
    """This script run as a worker subprocess (``flag`` with ``payload`` as JSON)."""
    return subprocess.run(
        [sys.executable, __file__, flag, json.dumps(payload)],
        capture_output=True,
        text=True,
        env=worker_env(host_devices),
    )


def launch(spec: dict, host_devices: int | None = None) -> dict:
    proc = run_worker("--worker", spec, host_devices)
    if proc.returncode != 0:
        return {**spec, "error": last_error_line(proc.stderr, f"failed (exit {proc.returncode})")}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def checkout(spec: dict) -> str:
    """The label of a ``--purejaxrl-dir`` row: its reimplementation row's, marked."""
    return f"{spec.get('label') or 'PureJaxRL'} (checkout)"


def describe(spec: dict) -> str:
    """``<network> on <env>, <n> envs[, <d> devices]``: a row in the user's terms."""
    devices = f", {spec['devices']} devices" if spec.get("devices") else ""
    return f"{spec['network']} on {spec['env']}, {spec['num_envs']} envs{devices}"


def row_error(specs: list[dict]) -> str | None:
    """Worker: the first row whose config is invalid (:func:`stoixlite.cli.args.checked_run_config`,
    as ``rec_ppo`` would refuse it) or that asks for more devices than there are, as one line;
    ``None`` when every row can run. Runs in a subprocess like the rows, so that this process
    never starts an accelerator backend (and holds none of its memory while the rows run)."""
    wanted = max((spec.get("devices") or 1 for spec in specs), default=1)
    if wanted > 1:
        import jax

        have = jax.device_count()
        if wanted > have:
            return (
                f"--devices {wanted}: this machine has {have} {jax.default_backend()} device(s) "
                "(--host-devices N forces N CPU devices)"
            )
    seen: set[tuple[str, ...]] = set()
    for spec in specs:
        if spec["network"] in REFERENCE_MODULES:
            continue
        overrides = stoixlite_overrides(spec)
        if tuple(overrides) in seen:
            continue
        seen.add(tuple(overrides))
        _, error = checked_run_config(overrides)
        if error is not None:
            return f"row {describe(spec)}: {error}"
    return None


def check_rows(specs: list[dict], host_devices: int | None = None) -> str | None:
    """:func:`row_error` of ``specs``, run in a subprocess with the workers' environment."""
    proc = run_worker("--check-rows", specs, host_devices)
    if proc.returncode != 0:
        return "checking the rows failed: " + last_error_line(proc.stderr)
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    return verdict["error"]


def merge_rounds(results: list[dict]) -> dict:
    """One row from the same spec's results over interleaved rounds: all timed chunks pooled."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return results[0]
    sps = sorted(x for r in ok for x in r["sps_all"])
    row = dict(ok[-1])
    if not sps:  # --compile-only
        return row
    if len(ok) < len(results):  # some rounds failed: their errors are kept with the row
        row["failed_rounds"] = [r["error"] for r in results if "error" in r]
    row.update(
        sps_all=sps,
        sps_median=statistics.median(sps),
        sps_min=sps[0],
        sps_max=sps[-1],
        compile_s=statistics.median(r["compile_s"] for r in ok),
        peak_rss_mb=max(r["peak_rss_mb"] for r in ok),
        load_avg=max(r["load_avg"] for r in ok),
        final_return=ok[-1]["final_return"],
    )
    return row


def peak_mib(row: dict) -> str:
    """The row's peak memory: process RSS, and the accelerator's own peak where it has one
    (``RSS / device``; on a GPU the RSS holds only the host side)."""
    rss = f"{row['peak_rss_mb']:,.0f}"
    device = row.get("peak_device_mb")
    return rss if device is None else f"{rss} / {device:,.0f}"


def markdown(rows: list[dict]) -> str:
    head = (
        "| network | env | envs x steps | devices | SPS median | SPS min-max | n | compile s "
        "| peak MiB | program MiB | final return | load | note |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['network']} | {r['env']} | {r['num_envs']} | {r.get('devices') or '-'} "
                f"| error: {r['error']} ||||||||"
            )
            continue
        sps = r["sps_all"]
        speed = "- | - | 0"  # --compile-only: nothing timed
        if sps:
            speed = f"{statistics.median(sps):,.0f} | {min(sps):,.0f}-{max(sps):,.0f} | {len(sps)}"
        failed = f" ({len(r['failed_rounds'])} rounds failed)" if r.get("failed_rounds") else ""
        program = "-" if r.get("program_mb") is None else f"{r['program_mb']:,.0f}"
        lines.append(
            f"| {r['network']} | {r['env']} | {r['num_envs']} x {r['rollout_length']} "
            f"| {r.get('devices', 1)} | {speed} "
            f"| {r['compile_s']:.1f} | {peak_mib(r)} | {program} | {r['final_return']:.1f} "
            f"| {r['load_avg']:.1f} | {r['label']}{failed} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--env-only" in argv:
        from benchmark_envs import main as env_benchmark  # the script beside this one

        env_benchmark([a for a in argv if a != "--env-only"])
        return 0
    parser = OneLineArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--check-rows", help=argparse.SUPPRESS)
    parser.add_argument(
        "--networks",
        nargs="*",
        default=None,
        help=f"default: all registered; also {' and '.join(REFERENCE_MODULES)} (CartPole-v1 only)",
    )
    parser.add_argument(
        "--envs", nargs="*", default=["gymnax/CartPole-v1", "popgym/repeat_previous"]
    )
    parser.add_argument("--num-envs", type=int, nargs="*", default=[64])
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument(
        "--chunk-steps",
        type=int,
        default=131072,
        help="env steps per timed call (a compiled chunk of chunk_steps / (envs x steps) updates)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed chunks per row and round")
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="compile each row and report its memory (peak RSS, program MiB); train nothing",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every row this many times, interleaved (ABAB...), pooling the timed chunks",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=128,
        help="hidden/embed/head size of the matrix rows (0: the network config's own)",
    )
    parser.add_argument("--reference-only", action="store_true")
    parser.add_argument(
        "--reference-labels",
        nargs="*",
        default=None,
        help=f"only the reference rows with these labels (of {sorted(REFERENCE_LABELS)})",
    )
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument(
        "--purejaxrl-dir",
        default=None,
        help="a checkout of PureJaxRL: after each purejaxrl_ppo/purejaxrl_ppo_rnn row, time its "
        "own ppo.py/ppo_rnn.py at the same sizes (adapted at run time, label '... (checkout)')",
    )
    parser.add_argument(
        "--devices", nargs="*", type=int, default=None, help="arch.num_devices of each row"
    )
    parser.add_argument(
        "--host-devices", type=int, default=None, help="force this many CPU devices (XLA_FLAGS)"
    )
    parser.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        help="Hydra overrides of every matrix row, e.g. network.encoder=cnn (checked like "
        "rec_ppo's command line before any row runs; shown in the row's note)",
    )
    parser.add_argument("--out", default="benchmark_results.json")
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(run_row(json.loads(args.worker))))
        return 0
    if args.check_rows:
        print(json.dumps({"error": row_error(json.loads(args.check_rows))}))
        return 0

    # Known networks and envs are those with a config (what the rows' overrides select); read
    # from configs/, so that this process never starts JAX (see row_error).
    config_root = Path(__file__).resolve().parents[1] / "configs"
    configs = {p.stem for p in (config_root / "network").glob("*.yaml")}
    envs = sorted(
        str(p.relative_to(config_root / "env").with_suffix(""))
        for p in (config_root / "env").rglob("*.yaml")
    )
    networks = args.networks or sorted(configs - {"ffm"})  # ffm: the same model as memoroid
    for name in networks:
        if name not in configs and name not in REFERENCE_MODULES:
            parser.error(
                f"unknown network {name!r}; choose from {sorted(configs | set(REFERENCE_MODULES))}"
            )
    for label in args.reference_labels or ():
        if label not in REFERENCE_LABELS:
            parser.error(
                f"unknown reference label {label!r}; choose from {sorted(REFERENCE_LABELS)}"
            )
    for env in args.envs:
        if env not in envs:
            parser.error(f"unknown env {env!r}; choose from {envs}")
    if not args.reference_only:  # the matrix rows
        for name in networks:
            for env in args.envs:
                if error := reference_env_error(name, env):
                    parser.error(error)
    for key in ("rollout_length", "epochs", "minibatches", "chunk_steps", "repeats", "rounds"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    for n in args.num_envs:
        if n < 1 or n % args.minibatches:
            parser.error(f"--num-envs {n} must be a positive multiple of --minibatches")
        if args.chunk_steps < n * args.rollout_length:
            parser.error(f"--chunk-steps must be at least one update ({n * args.rollout_length})")
    if args.width < 0:
        parser.error(f"--width {args.width} must be positive, or 0 for the network config's own")
    for d in args.devices or ():
        if d < 1:
            parser.error(f"--devices {d} must be at least 1 (devices per row)")
    if args.host_devices is not None and args.host_devices < 1:
        parser.error(f"--host-devices {args.host_devices} must be at least 1")
    if args.purejaxrl_dir is not None:
        source = purejaxrl_source(args.purejaxrl_dir)
        if source is None:
            parser.error(
                f"--purejaxrl-dir {args.purejaxrl_dir} is not a PureJaxRL checkout (no "
                "purejaxrl/ppo.py, ppo_rnn.py and wrappers.py in it)"
            )
        args.purejaxrl_dir = str(source.resolve())

    def common(num_envs: int, rollout: int) -> dict:
        return {
            "rollout_length": rollout,
            "epochs": args.epochs,
            "minibatches": args.minibatches,
            "updates": args.chunk_steps // (num_envs * rollout),
            "repeats": 0 if args.compile_only else args.repeats,
        }

    specs = []
    if not args.reference_only:
        specs += [
            {
                "network": n,
                "env": e,
                "num_envs": k,
                "width": args.width or None,
                **common(k, args.rollout_length),
                **(
                    {"overrides": args.overrides, "label": " ".join(args.overrides)}
                    if args.overrides
                    else {}
                ),
            }
            for e in args.envs
            for k in args.num_envs
            for n in networks
        ]
    if not args.no_reference:
        specs += [
            {**common(row["num_envs"], 128), **row, "epochs": 4, "minibatches": 4}
            for row in REFERENCE_ROWS
            if args.reference_labels is None or row["label"] in args.reference_labels
        ]
    if args.purejaxrl_dir:  # the original beside each of its reimplementation's rows
        specs = [
            twin
            for spec in specs
            for twin in (
                [spec, {**spec, "purejaxrl_dir": args.purejaxrl_dir, "label": checkout(spec)}]
                if spec["network"] in REFERENCE_MODULES
                else [spec]
            )
        ]
    if args.devices:
        specs = [{**spec, "devices": d} for spec in specs for d in args.devices]
    for spec in specs:  # the reference rows have their own envs x steps
        if spec["updates"] < 1:
            steps = spec["num_envs"] * spec["rollout_length"]
            parser.error(
                f"--chunk-steps must be at least one update ({steps}) of every row: "
                f"{describe(spec)} x {spec['rollout_length']} steps"
            )
    if not specs:
        parser.error(
            "no rows to run: --envs, --num-envs or --reference-labels is empty, or "
            "--reference-only with --no-reference"
        )
    if error := output_file_error(args.out):
        parser.error(error)
    if error := check_rows(specs, args.host_devices):
        parser.error(error)

    results: list[list[dict]] = [[] for _ in specs]
    for round_ in range(args.rounds):
        for i, spec in enumerate(specs):
            results[i].append(launch(spec, args.host_devices))
            print(f"round {round_ + 1}: " + markdown([results[i][-1]]).splitlines()[-1], flush=True)
    rows = [merge_rounds(r) for r in results]
    result = {"hardware": hardware(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    result["rows"] = rows
    print(f"\nHardware: {result['hardware']}; {result['date']}\n")
    print(markdown(rows))
    failed = sum("error" in r for rounds in results for r in rounds)
    try:
        Path(args.out).write_text(json.dumps(result, indent=2))
    except OSError as err:
        fail(
            f"the results (printed above) could not be written to {args.out}: {err}", 1, parser.prog
        )
    if failed:
        fail(
            f"{failed} of {len(specs) * args.rounds} row runs failed (their errors are in the "
            f"table and in {args.out})",
            1,
            parser.prog,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
