"""Bad input to the benchmark tool (``python -m stoixlite.benchmark``) and its ``memory`` tool
ends in a one-line error before anything is compiled; the
implementations of PureJaxRL's ppo.py and ppo_rnn.py set-ups (stoixlite/benchmark/peers/) have
their networks and their loops train, and --purejaxrl-dir adapts a checkout at run time;
the memory tool's scan filter and memory estimates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SCRIPTS

from stoixlite.benchmark import cli, memory_models, rows, table, update_phases
from stoixlite.config.plan import plan_run
from stoixlite.networks.memory.standins import STANDINS

TOOL = "stoixlite.benchmark"
MEMORY_TOOL = "stoixlite.benchmark memory"


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (TOOL, ["--networks", "nope"], "unknown network 'nope'"),
        (TOOL, ["--envs", "gymnax/Nope-v0"], "unknown env 'gymnax/Nope-v0'"),
        (TOOL, ["--num-envs", "6"], "--num-envs 6 must be a positive multiple of --minibatches"),
        (TOOL, ["--chunk-steps", "100"], "--chunk-steps must be at least one update"),
        (TOOL, ["--repeats", "0"], "--repeats must be at least 1"),
        (TOOL, ["--reference-labels", "nope"], "unknown reference label 'nope'"),
        (
            TOOL,
            ["--networks", "purejaxrl_ppo_rnn", "--envs", "popgym/repeat_previous"]
            + ["--no-reference"],
            "purejaxrl_ppo_rnn runs only on gymnax/CartPole-v1, not popgym/repeat_previous",
        ),
        (
            TOOL,
            ["--purejaxrl-dir", "/nonexistent"],
            "--purejaxrl-dir /nonexistent is not a PureJaxRL checkout",
        ),
        (TOOL, ["sweep", "system.lr=1e-3,3e-4", "--rounds", "0"], "--rounds 0 is invalid"),
        (TOOL, ["sweep", "system.lr=1e-3"], "the overrides make 1 job"),
        (TOOL, ["sweep", "system.lr=1e-3,3e-4", "hydra/launcher=basic"], "sets hydra/launcher"),
        (TOOL, ["sweep", "arch.seed=0,1", "hydra.sweep.dir=x"], "sets hydra.sweep.dir"),
        (TOOL, ["sweep", "system.lr=[1e-3"], "system.lr=[1e-3"),
        (TOOL, ["sweep", "arch.seed=interval(0,1)"], "an interval is not a list of values"),
        (TOOL, ["sweep", "system.nope=1,2"], "system.nope"),
        (TOOL, ["sweep", "system.lr=abc,1e-3"], "system.lr"),
        (MEMORY_TOOL, ["--models", "nope"], "unknown model 'nope'"),
        (MEMORY_TOOL, ["--lengths", "64", "0"], "--lengths 0 must be at least 1"),
        (MEMORY_TOOL, ["--batch", "0"], "--batch 0 must be at least 1"),
        (MEMORY_TOOL, ["--max-state-mb", "-1"], "--max-state-mb -1.0 must be positive"),
        (MEMORY_TOOL, ["--scans", "parallel"], "invalid choice: 'parallel'"),
        (MEMORY_TOOL, ["--batch", "abc"], "invalid int value: 'abc'"),
    ],
)
def test_bad_input_is_a_one_line_error(script, args, message, capsys):
    """The tool's ``main(argv)`` in this process (its argument checks run before it starts
    JAX or any row; tests/test_script_inputs.py runs every script once as a command)."""
    main = cli.main if script == TOOL else memory_models.main
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], err


def test_purejaxrl_ppo_rnn_network_and_updates():
    """ppo_rnn.py's shape (embedding, GRU and heads 128); two tiny updates train finitely."""
    from stoixlite.benchmark.peers import purejaxrl_ppo_rnn as rnn

    GRUActorCritic, Settings, build = rnn.GRUActorCritic, rnn.Settings, rnn.build
    gru_policy, zero_state = rnn.gru_policy, rnn.zero_state

    n, obs_dim = 4, 4  # CartPole
    settings = Settings(num_envs=n, rollout_length=8, total_timesteps=64)
    init, run_updates = build(settings, gru_policy)
    state = jax.jit(init)(jax.random.PRNGKey(0))  # one program, not many eager ops
    params0 = state.params
    p = params0["params"]
    gru = {"ir", "iz", "in", "hr", "hz", "hn"}
    assert set(p["gru"]["cell"]) == gru
    assert all(p["gru"]["cell"][k]["kernel"].shape == (128, 128) for k in gru)
    shapes = {k: v["kernel"].shape for k, v in p.items() if k != "gru"}
    assert shapes == {
        "embed": (obs_dim, 128),
        "actor_hidden": (128, 128),
        "actor_out": (128, 2),
        "critic_hidden": (128, 128),
        "critic_out": (128, 1),
    }
    assert state.memory.shape == (n, 128) and not state.memory.any()  # zero state, no resets
    assert state.first.shape == (n,) and not state.first.any()

    # A reset flag sets the state to zeros before the cell: from a non-zero state, a reset
    # step's outputs equal those from the zero state; a step without one differs.
    @jax.jit
    def outputs(carry, obs, resets):
        _, logits, value = GRUActorCritic(num_actions=2).apply(params0, carry, obs, resets)
        return logits, value

    obs = jax.random.normal(jax.random.PRNGKey(1), (2, n, obs_dim))
    resets = jnp.zeros((2, n), bool).at[1].set(True)
    zero = zero_state(n)
    logits, value = outputs(jnp.ones((n, 128)), obs, resets)
    logits0, value0 = outputs(zero, obs[::-1], resets[::-1])  # step 1 first, from zeros
    np.testing.assert_allclose(logits[1], logits0[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value[1], value0[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(value[0], outputs(zero, obs, resets)[1][0])

    state, metrics = jax.jit(lambda s: run_updates(s, 2))(state)
    assert metrics["episode_return"].shape == metrics["episode_done"].shape == (2, 8, n)
    assert int(state.opt_state[1][0].count) == 2 * 4 * 4  # updates x epochs x minibatches
    assert state.memory.shape == (n, 128) and state.memory.any()  # the next rollout's state
    leaves = jax.tree.leaves(state.params)
    assert all(bool(jnp.isfinite(leaf).all()) for leaf in leaves)
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), state.params, params0)
    assert max(jax.tree.leaves(moved)) > 0


def test_purejaxrl_ppo_network_and_updates():
    """ppo.py's shape (separate 2 x 64 tanh actor and critic); two tiny updates train."""
    from stoixlite.benchmark.peers import purejaxrl_ppo as ppo

    Settings, build, feedforward_policy = ppo.Settings, ppo.build, ppo.feedforward_policy

    settings = Settings(num_envs=4, rollout_length=8, total_timesteps=64)
    init, run_updates = build(settings, feedforward_policy)
    state = jax.jit(init)(jax.random.PRNGKey(0))
    shapes = {k: v["kernel"].shape for k, v in state.params["params"].items()}
    assert shapes == {
        "actor0": (4, 64),
        "actor1": (64, 64),
        "actor_out": (64, 2),
        "critic0": (4, 64),
        "critic1": (64, 64),
        "critic_out": (64, 1),
    }
    state, metrics = jax.jit(lambda s: run_updates(s, 2))(state)
    assert metrics["episode_return"].shape == (2, 8, 4)
    assert int(state.opt_state[1][0].count) == 2 * 4 * 4
    assert all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(state.params))


FAKE_PPO = """
import distrax, gymnax, jax.numpy as jnp
from wrappers import Logged

def make_train(config):
    env, params = gymnax.make(config["ENV_NAME"])
    env = Logged(env)

    def train(rng):
        _, state = env.reset(rng, params)
        _, _, reward, done, _ = env.step(rng, state, 0, params)  # the 5-tuple of old gymnax
        entropy = distrax.Categorical(logits=jnp.zeros(2)).entropy()
        return {"metrics": {"returned_episode": done[None],
                            "returned_episode_returns": reward[None] + entropy}}

    return train
"""
FAKE_WRAPPERS = """
import chex
from brax import envs
from brax.envs.wrappers.training import AutoResetWrapper, EpisodeWrapper
import navix as nx

class Logged:
    def __init__(self, env: chex.Array):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)
"""


def test_purejaxrl_dir_adapts_a_checkout_at_run_time(tmp_path):
    """``--purejaxrl-dir``: a checkout's scripts import with stand-ins for the libraries that
    are not installed and see gymnax's step as the 5-tuple they were written for (a fake
    checkout with PureJaxRL's imports; run in a subprocess, as the benchmark's rows are)."""
    folder = tmp_path / "purejaxrl"
    folder.mkdir()
    (folder / "ppo.py").write_text(FAKE_PPO)
    (folder / "ppo_rnn.py").write_text(FAKE_PPO)
    (folder / "wrappers.py").write_text(FAKE_WRAPPERS)
    code = f"""
import math
import jax
from stoixlite.benchmark import purejaxrl
module = purejaxrl.load_purejaxrl({str(tmp_path)!r}, "ppo.py")
out = module.make_train({{"ENV_NAME": "CartPole-v1"}})(jax.random.PRNGKey(0))["metrics"]
assert not bool(out["returned_episode"][0])
assert abs(float(out["returned_episode_returns"][0]) - (1 + math.log(2))) < 1e-6
import flax.linen as nn
assert nn.GRUCell().features == 128
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_reference_rows_at_ppo_py_widths_use_the_feedforward_shape():
    """The memoroid rows "at the same widths as the feed-forward row" set exactly the keys
    of configs/network/feedforward.yaml that shape the network (a drifted copy would compare
    different networks)."""
    from omegaconf import OmegaConf

    feedforward = OmegaConf.load(SCRIPTS.parent / "configs" / "network" / "feedforward.yaml")
    widths = dict(o.removeprefix("network.").split("=") for o in rows.PPO_PY_WIDTHS)
    assert widths == {k: str(feedforward[k]) for k in widths}
    assert set(widths) >= {"embed_size", "encoder_layers", "head_size", "head_layers", "activation"}
    at_widths = [r for r in rows.REFERENCE_ROWS if r["label"] == "ppo.py widths"]
    assert {r["num_envs"] for r in at_widths} == {4, 64} and all(r["overrides"] for r in at_widths)


def test_benchmark_memory_scans_filter_and_memory_estimates():
    bench = memory_models
    both = list(bench._configs(["mamba", "gru"], [64]))
    assert {(n, s) for n, s, *_ in both} == {
        ("mamba", "associative"),
        ("mamba", "sequential"),
        ("gru", "-"),
    }
    seq = list(bench._configs(["mamba", "gru"], [64], ["sequential"]))
    assert {(n, s) for n, s, *_ in seq} == {("mamba", "sequential"), ("gru", "-")}
    # --modes: the T = 1 rollout step, the training step at each length, or both
    assert {(t, m) for *_, t, m in both} == {(1, "rollout"), (64, "train")}
    train = list(bench._configs(["gru"], [64, 256], modes=("train",)))
    assert train == [("gru", "-", 64, "train"), ("gru", "-", 256, "train")]
    assert list(bench._configs(["gru"], [64], modes=("rollout",))) == [("gru", "-", 1, "rollout")]
    # scanned models: T copies of the carry (gru: [B, H] floats)
    assert bench._estimate_state_mb("gru", 1024, 64, 128) == pytest.approx(
        1024 * 64 * 128 * 4 / 2**20
    )
    # windowed attention trains in parallel: the [B, heads, T, M + T] scores of every layer
    layers, heads, window = 2, 4, 64
    want = layers * 64 * heads * 256 * (window + 256) * 4 / 2**20
    assert bench._estimate_state_mb("transformer", 256, 64, 128) == pytest.approx(want)
    # chunkwise forms store one state per chunk of 16 steps, the associative scan one per step
    per_step = bench._estimate_state_mb("mlstm", 1024, 64, 128, "associative")
    assert bench._estimate_state_mb("mlstm", 1024, 64, 128, "sequential") == pytest.approx(
        per_step / 16
    )
    assert bench._estimate_state_mb("deltanet", 1000, 64, 128) == pytest.approx(
        bench._estimate_state_mb("deltanet", 1008, 64, 128)
    )


def test_benchmark_memory_parent_never_starts_a_backend(tmp_path):
    """The parent process only plans and collects: on a GPU a started backend would hold most of
    the card's memory (JAX preallocates it) while every configuration's subprocess runs. The
    backend, device and JAX version in the results' ``hardware`` come from the subprocesses."""
    out = tmp_path / "bench.json"
    code = f"""
import json, subprocess, sys
from stoixlite.benchmark import memory_models as bench
from jax._src import xla_bridge

def fake_run(cmd, **kwargs):  # a configuration's subprocess, as if it ran on a GPU
    if "--single" not in cmd:
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")
    at = cmd.index("--single")
    name, scan, length, mode = cmd[at + 1 : at + 5]
    res = {{"model": name, "scan": scan, "T": int(length), "mode": mode, "ms": 1.0,
           "ms_min": 1.0, "runs": 5, "compile_s": 0.5, "peak_mb": 10.0, "state_mb": 1.0,
           "backend": "gpu", "device": "Fake GPU", "jax": "0.0"}}
    return subprocess.CompletedProcess(cmd, 0, stdout="RESULT " + json.dumps(res), stderr="")

bench.subprocess.run = fake_run
argv = ["--models", "gru", "mamba", "mlstm", "transformer", "--lengths", "64", "1024"]
assert bench.main(argv + ["--out", {str(out)!r}]) == 0
assert not xla_bridge.backends_are_initialized()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {k: result["hardware"][k] for k in ("backend", "device")} == {
        "backend": "gpu",
        "device": "Fake GPU",
    }
    # measured, or skipped by the parent's own (shape-only) memory estimate
    assert all("ms" in r or r["status"].startswith("skipped") for r in result["results"])
    assert any("ms" in r for r in result["results"])
    assert any("status" in r for r in result["results"])


def test_profile_update_counts_the_minibatch_gradient_flops():
    """``python -m stoixlite.benchmark profile``'s ``minibatch gradient`` program is one
    minibatch's loss gradient, and XLA's operation count of it grows with the network's width (so
    the figure reported for the attention memories against the mlp measures their arithmetic)."""
    from hydra import compose, initialize_config_dir

    from stoixlite.cli.configs import CONFIG_DIR
    from stoixlite.config.parse import parse
    from stoixlite.run.build import build_run

    profile = update_phases
    counts = {}
    for width in (16, 64):
        overrides = [
            "network=mlp",
            f"network.hidden_size={width}",
            "env=gymnax/CartPole-v1",
            "arch.num_envs=4",
            "system.rollout_length=8",
        ]
        with initialize_config_dir(str(CONFIG_DIR), version_base=None):
            cfg = compose("config", overrides=overrides)
        programs, args = profile.phase_programs(build_run(plan_run(parse(cfg))), updates=1)
        # compiled once: the program the tool times and counts
        gradient = programs["minibatch gradient"].lower(*args["minibatch gradient"]).compile()
        grads = gradient(*args["minibatch gradient"])
        assert jax.tree.structure(grads) == jax.tree.structure(args["minibatch gradient"][0])
        counts[width] = profile.flops(gradient)
    assert counts[16] > 0
    assert counts[64] > 2 * counts[16]


def test_benchmark_table_shows_the_device_peak_beside_the_rss():
    """On a GPU the process RSS holds only the host side: the row shows ``RSS / device``."""
    row = {
        "network": "gru",
        "env": "gymnax/CartPole-v1",
        "num_envs": 64,
        "rollout_length": 128,
        "label": "",
        "sps_all": [1.0, 3.0, 2.0],
        "compile_s": 1.0,
        "peak_rss_mb": 3400.4,
        "final_return": 9.0,
        "load_avg": 0.5,
    }
    cpu = table.markdown([{**row, "peak_device_mb": None}]).splitlines()[-1]
    gpu = table.markdown([{**row, "peak_device_mb": 2388.2}]).splitlines()[-1]
    assert "| 3,400 |" in cpu and "| 3,400 / 2,388 |" in gpu
    assert "| 2 | 1-3 | 3 |" in gpu  # median, range, runs


@pytest.mark.parametrize("off", [False, True])
def test_compile_for_real_keeps_the_persistent_cache_out(off, tmp_path):
    """With a user's ``JAX_COMPILATION_CACHE_DIR`` the scripts' timed compiles would load cached
    executables; ``compile_for_real`` turns the cache off (the control run shows it would be
    written otherwise)."""
    cache = tmp_path / "cache"
    code = (
        "from stoixlite.cli.args import compile_for_real\n"
        + ("compile_for_real()\n" if off else "")
        + "import jax, jax.numpy as jnp\n"
        "jax.jit(lambda x: jnp.sin(x) * 2)(jnp.arange(4.0)).block_until_ready()\n"
    )
    env = {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "PYTHONPATH": str(SCRIPTS.parent),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    entries = list(cache.rglob("*")) if cache.exists() else []
    assert (entries == []) == off, entries


@pytest.mark.parametrize("network", sorted(STANDINS))
def test_free_recurrence_standin_keeps_shapes_and_is_restored(network):
    """``python -m stoixlite.benchmark profile --free-recurrence``: inside the block the model's
    T > 1 call uses the stand-in (same output and carry shapes, the input still reaches the
    output), and outside it the real recurrence is back (a different output). Each program is one
    jitted function traced where it is called (inside or outside the block), not hundreds of
    eager operations."""
    from stoixlite.networks.memory import build_memory, standins

    model = build_memory(network, hidden_size=8, scan="sequential")
    x = jax.random.normal(jax.random.key(0), (5, 2, 3))
    start = jnp.zeros((5, 2), bool).at[0, 0].set(True).at[2, 1].set(True)
    carry = model.initialize_carry(2)
    params = jax.jit(model.init)(jax.random.key(1), carry, (x, start))

    def out(x):
        return model.apply(params, carry, (x, start))

    def traced_here():
        """``out`` as a new jitted function: traced at its first call, with the recurrence of
        that moment (a function jitted earlier would reuse its earlier trace)."""
        return jax.jit(lambda x: out(x))

    real_carry, real_y = traced_here()(x)
    with standins.free_recurrence(network) as calls:
        free_carry, free_y = traced_here()(x)
        dx = jax.jit(jax.grad(lambda x: jnp.sum(out(x)[1] ** 2)))(x)
    assert calls[0] > 0
    assert free_y.shape == real_y.shape and free_y.dtype == real_y.dtype
    assert jax.tree.structure(free_carry) == jax.tree.structure(real_carry)
    assert [a.shape for a in jax.tree.leaves(free_carry)] == [
        a.shape for a in jax.tree.leaves(real_carry)
    ]
    assert float(jnp.sum(jnp.abs(dx))) > 0
    assert not np.allclose(free_y, real_y)
    np.testing.assert_array_equal(traced_here()(x)[1], real_y)  # restored after the block


# --------------------------------------------------------------------------------------------
# --suite gpu
# --------------------------------------------------------------------------------------------


def test_gpu_suite_rows_and_report():
    """The full suite: the four networks and PureJaxRL's two set-ups at 4,096 envs first, the
    cell's shape (64 envs x 3 seeds), ``arch.branching`` other than auto's on the platform, then
    64 and 1,024 envs; ``--purejaxrl-dir`` replaces the reimplementations' rows. The report
    puts them in docs/benchmarks.md's format with the targets' ratios (fake timings)."""
    from stoixlite.benchmark import gpu_suite

    specs = gpu_suite.suite_specs("full", None, 2, "gpu")
    assert len(specs) == 26
    assert [s["num_envs"] for s in specs[:6]] == [4096] * 6
    assert {s["network"] for s in specs[:6]} == {
        "purejaxrl_ppo",
        "feedforward",
        "purejaxrl_ppo_rnn",
        "gru",
        "memoroid",
        "mlp",
    }
    cell = [s for s in specs if "arch.num_seeds=3" in s["overrides"]]
    assert {(s["num_envs"], s["suite"]["branching"]) for s in cell} == {(64, "auto"), (64, "skip")}
    compared = [s for s in specs if s["suite"]["branching"] != "auto"]
    assert {s["network"] for s in compared} == {"feedforward", "gru"}
    assert all("arch.branching=skip" in s["overrides"] for s in compared)
    assert gpu_suite.suite_specs("full", None, 2, "cpu")[6 + 4]["suite"]["branching"] == "mask"
    checkout = gpu_suite.suite_specs("full", "/pj", 2, "gpu")
    peers = [s for s in checkout if s["network"].startswith("purejaxrl")]
    assert len(peers) == 6 and all(s["purejaxrl_dir"] == "/pj" for s in peers)
    assert all(s["updates"] >= 4 and s["rollout_length"] == 128 for s in specs)

    sps = {"purejaxrl_ppo": 100.0, "feedforward": 150.0, "purejaxrl_ppo_rnn": 10.0, "gru": 30.0}
    rows = [
        {
            **{k: s[k] for k in ("network", "num_envs", "rollout_length", "suite")},
            "sps_all": [
                sps.get(s["network"], 20.0) / (2 if s["suite"]["branching"] == "skip" else 1)
            ],
            "backend": "gpu",
        }
        for s in specs
    ]
    text = gpu_suite.report(rows, "a machine", "python -m stoixlite.benchmark --suite gpu")
    lines = text.splitlines()
    assert lines[0].startswith("Machine: a machine; commit ") and "UTC" in lines[0]
    assert "| network | 4,096 x 128 | 64 x 128 x 3 seeds | 64 x 128 | 1,024 x 128 |" in lines
    assert "| `feedforward` | 150 | 150 | 150 | 150 |" in lines
    assert "| PureJaxRL `ppo.py` set-up | 100 | - | 100 | 100 |" in lines
    assert "| feedforward / `ppo.py` | 1.50x | - | 1.50x | 1.50x |" in lines
    assert "| gru / `ppo_rnn.py` | 3.00x | - | 3.00x | 3.00x |" in lines
    assert "| memoroid / gru | 0.67x | 0.67x | 0.67x | 0.67x |" in lines
    assert "| `gru` (width 128), 4,096 x 128 | 15 | 30 | 2.00x |" in lines


@pytest.mark.slow(
    reason="compiles the suite's 8 programs (about 60 s on 2 cores); "
    "CI runs it as a step of its own (.ci/run)"
)
def test_gpu_suite_runs_at_a_cpus_sizes(tmp_path):
    """``--suite gpu`` on the CPU: one row of each kind at small sizes, in one worker process;
    the printed tables hold every row, with numbers, and the results file the rows."""
    out = tmp_path / "suite.json"
    proc = subprocess.run(
        [sys.executable, "-m", "stoixlite.benchmark", "--suite", "gpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout[proc.stdout.index("Machine: ") :]
    assert "commit " in text.splitlines()[0] and "on cpu" in text.splitlines()[0]
    assert "| network | 8 x 16 | 4 x 16 x 3 seeds |" in text
    number = r"[\d,]+"
    for name in ("PureJaxRL `ppo.py` set-up", "`feedforward`", "PureJaxRL `ppo_rnn.py` set-up"):
        assert re.search(rf"\| {re.escape(name)} \| {number} \| - \|", text), name
    assert re.search(rf"\| `gru` \(width 128\) \| {number} \| {number} \|", text)
    for ratio in ("feedforward / `ppo.py`", "gru / `ppo_rnn.py`", "memoroid / gru"):
        assert re.search(rf"\| {re.escape(ratio)} \| [\d.]+x \|", text), ratio
    assert re.search(rf"\| `gru` \(width 128\), 8 x 16 \| {number} \| {number} \| [\d.]+x \|", text)
    result = json.loads(out.read_text())
    assert result["suite"] == "gpu" and result["sizes"] == "small" and len(result["rows"]) == 8
    assert not any("error" in row for row in result["rows"])
