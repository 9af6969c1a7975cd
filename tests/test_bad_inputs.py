"""Bad inputs as a new user makes them: each is one line on stderr, no traceback, a
non-zero exit, and no change to any file of an existing run directory.

The table grows with every defect found: add the input, the words its line must contain and the
exit status. ``{run}`` is a finished run directory; ``{nockpt}``, ``{zeroed}``, ``{garbage}``,
``{empty}`` and ``{missing}`` are copies of it without checkpoints, with every checkpoint file
zeroed, with a garbage ``config.yaml``, an empty directory and a path that does not exist. The
training CLI runs in this process (its entry point :func:`stoixlite.rec_ppo.cli`), so the inputs
that are refused before compiling cost no compilation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import signal
import sys
from pathlib import Path

import pytest
from conftest import TINY, run_cli, run_config, run_plan

from stoixlite.run import loop, resume
from stoixlite.run.signals import TrainingInterrupted
from stoixlite.tracking.checkpointing import checkpoint_dir
from stoixlite.tracking.jsonl import read_jsonl

RUN = TINY + ["arch.total_timesteps=128", "arch.num_evaluations=2", "logger.plot=false"]

CONFIG = 2  # exit status of a config or argument error
FAILED = 1  # no intact checkpoint, non-finite values
INTERRUPTED = 130  # Ctrl-C outside the training loop

BAD_INPUTS: list[tuple[list[str], str, int]] = [
    # config values: non-finite, absurd, out of range, wrong type
    (["system.lr=inf"], "system.lr=inf is invalid: must be a finite number", CONFIG),
    (["system.lr=nan"], "system.lr=nan is invalid", CONFIG),
    (["system.lr=-inf"], "system.lr=-inf is invalid", CONFIG),
    (["system.lr=-1"], "system.lr=-1 is invalid", CONFIG),
    (["system.lr=0"], "system.lr=0 is invalid", CONFIG),
    (["system.lr=2.0"], "system.lr=2.0 is invalid: must be a finite number in (0.0, 1.0]", CONFIG),
    (["system.lr=abc"], "system.lr='abc' is invalid", CONFIG),
    (["system.vf_coef=inf"], "system.vf_coef=inf is invalid", CONFIG),
    (["system.vf_coef=-1"], "system.vf_coef=-1 is invalid", CONFIG),
    (["system.vf_coef=1e9"], "system.vf_coef=1000000000.0 is invalid", CONFIG),
    (["system.ent_coef=nan"], "system.ent_coef=nan is invalid", CONFIG),
    (["system.ent_coef=-0.1"], "system.ent_coef=-0.1 is invalid", CONFIG),
    (["system.gamma=1.5"], "system.gamma=1.5 is invalid", CONFIG),
    (["system.gamma=0"], "system.gamma=0 is invalid", CONFIG),
    (["system.gamma=nan"], "system.gamma=nan is invalid", CONFIG),
    (["system.gae_lambda=-0.1"], "system.gae_lambda=-0.1 is invalid", CONFIG),
    (["system.gae_lambda=2"], "system.gae_lambda=2 is invalid", CONFIG),
    (["system.clip_eps=0"], "system.clip_eps=0 is invalid", CONFIG),
    (["system.clip_eps=inf"], "system.clip_eps=inf is invalid", CONFIG),
    (["system.value_clip_eps=-1"], "system.value_clip_eps=-1 is invalid", CONFIG),
    (["system.max_grad_norm=0"], "system.max_grad_norm=0 is invalid", CONFIG),
    (["system.max_grad_norm=inf"], "system.max_grad_norm=inf is invalid", CONFIG),
    (["system.adam_eps=0"], "system.adam_eps=0 is invalid", CONFIG),
    (["system.adam_eps=nan"], "system.adam_eps=nan is invalid", CONFIG),
    (["system.rollout_length=0"], "system.rollout_length=0 is invalid", CONFIG),
    (["system.rollout_length=abc"], "system.rollout_length='abc' is invalid", CONFIG),
    (["system.epochs=2.5"], "system.epochs=2.5 is invalid", CONFIG),
    (["system.epochs=0"], "system.epochs=0 is invalid", CONFIG),
    (["system.num_minibatches=3"], "must divide arch.num_envs", CONFIG),
    (["system.bptt_length=7"], "system.bptt_length=7 is invalid", CONFIG),
    (["system.bptt_length=-1"], "system.bptt_length=-1 is invalid", CONFIG),
    (["system.rollout_unroll=0"], "system.rollout_unroll=0 is invalid", CONFIG),
    (["arch.num_envs=0"], "arch.num_envs=0 is invalid", CONFIG),
    (["arch.num_envs=-4"], "arch.num_envs=-4 is invalid", CONFIG),
    (["arch.total_timesteps=100"], "arch.total_timesteps=100 is invalid", CONFIG),
    (["arch.total_timesteps=-5"], "arch.total_timesteps=-5 is invalid", CONFIG),
    (["arch.num_evaluations=0"], "arch.num_evaluations=0 is invalid", CONFIG),
    (["arch.num_eval_envs=0"], "arch.num_eval_envs=0 is invalid", CONFIG),
    (["arch.eval_max_steps=0"], "arch.eval_max_steps=0 is invalid", CONFIG),
    (["arch.num_seeds=0"], "arch.num_seeds=0 is invalid", CONFIG),
    (["arch.on_nonfinite=ignore"], "arch.on_nonfinite='ignore' is invalid", CONFIG),
    (["arch.max_rollbacks=-1"], "arch.max_rollbacks=-1 is invalid", CONFIG),
    (["arch.host_overlap=true"], "arch.host_overlap=True is invalid: popgym/", CONFIG),
    (["checkpoint.every=0"], "checkpoint.every=0 is invalid", CONFIG),
    (["checkpoint.keep_last=0"], "checkpoint.keep_last=0 is invalid", CONFIG),
    (["logger=wandb", "logger.wandb.mode=sometimes"], "logger.wandb.mode='sometimes'", CONFIG),
    (["env.name=popgym/nope"], "env.name='popgym/nope' is invalid: choose one of", CONFIG),
    (["env.difficulty=impossible"], "env.difficulty='impossible' is invalid", CONFIG),
    (["env=gymnax/CartPole-v1", "env.difficulty=hard"], "has no difficulty levels", CONFIG),
    (["env=craftax/nope"], "env=craftax/nope is invalid: no such env; choose one of ['", CONFIG),
    (["env.name=craftax/nope"], "env.name='craftax/nope' is invalid: choose one of", CONFIG),
    (["env=arcade/pong"], "env=arcade/pong is invalid: no such env; choose one of ['", CONFIG),
    # an env by its own library's id (stoixlite/cli/env_names.py): the closest names
    (["env=gymnasium/Acrobat-v1"], "is not a registered Gymnasium id (gym", CONFIG),
    (["env=gymnasium/acrobot-v1"], "closest: gymnasium/Acrobot-v1, gymnax/Acrobot-v1", CONFIG),
    (["env=gymnax/catch"], "env=gymnax/catch is invalid: not an env of stoixlite's gym", CONFIG),
    (["env=gymnax/breakout"], "closest: gymnax/Breakout-MinAtar, arcade/breakout", CONFIG),
    (["env=gymnsium/CartPole-v1"], "no such env; closest: gymnasium/CartPole-v1", CONFIG),
    (["env=popgym/repeat_previus"], "closest: popgym/repeat_previous, popgym/repeat_first", CONFIG),
    (["env=gymnax/MNISTBandit-bsuite"], "not available: gymnax downloads MNIST", CONFIG),
    (["env=gymnasium/no_such_module:X-v0"], "cannot import no_such_module", CONFIG),
    (["env=nope"], "choose one of arcade/<name>, craftax/<name>, gymnasium/<id>", CONFIG),
    (["-m", "env=gymnax/Catch-bsuite,gymnax/Catsh-bsuite"], "closest: gymnax/Catch-bs", CONFIG),
    (["-m", "env=choice(gymnax/Catch-bsuite,gymnax/nope)"], "env=gymnax/nope is invalid", CONFIG),
    (
        ["env=gymnax/Catch-bsuite", "env.kwargs.max_steps=5"],
        "env.kwargs.max_steps=5 is invalid: gymnax/Catch-bsuite refuses it (unknown params",
        CONFIG,
    ),
    (["env=gymnasium/Acrobot-v1", "env.kwargs.bogus=1"], "bogus", CONFIG),
    (
        ["env=gymnax/MemoryChain-bsuite", "+env.kwargs.bogus=1"],
        "env.kwargs.bogus=1 is invalid: gymnax/MemoryChain-bsuite refuses it (unknown params "
        "['bogus'] for gymnax/MemoryChain-bsuite; allowed: ['max_steps_in_episode', "
        "'memory_length'",
        CONFIG,
    ),
    (["network.name=transformerxl"], "network.name='transformerxl' is invalid", CONFIG),
    (["network.hidden_size=0"], "network.hidden_size=0 is invalid", CONFIG),
    (["network.activation=swish"], "network.activation='swish' is invalid", CONFIG),
    (["+network.bogus=3"], "network.bogus=3 is invalid: not a parameter", CONFIG),
    (["network.encoder_layers=-1"], "network.encoder_layers=-1 is invalid", CONFIG),
    # the cnn encoder and image observations (pixel/colour_cue: uint8 frames [16, 16, 3])
    (
        ["network.encoder=cnn"],
        "network.encoder='cnn' is invalid: env popgym/repeat_previous has no image",
        CONFIG,
    ),
    (
        ["env=pixel/colour_cue", "network.cnn_kernels=[9,9]"],
        "network.cnn_kernels=[9, 9] is invalid: convolution 2's 9x9 kernel is larger than the 4x4",
        CONFIG,
    ),
    (
        ["env=pixel/colour_cue", "network.cnn_strides=[2]"],
        "network.cnn_strides=[2] is invalid: needs one entry per convolution",
        CONFIG,
    ),
    (
        ["env=pixel/colour_cue", "env.obs_augment=true"],
        "env.obs_augment=True is invalid: env pixel/colour_cue has image observations [16, 16, 3]",
        CONFIG,
    ),
    (["network.cnn_channels=[0,8]"], "network.cnn_channels=[0, 8] is invalid: must be a", CONFIG),
    (["network.cnn_strides=2"], "network.cnn_strides=2 is invalid: must be a non-empty", CONFIG),
    # command-line overrides Hydra cannot apply
    (["env=popgym/nope"], "env=popgym/nope is invalid: no such env; choose one of ['", CONFIG),
    (["network=foo"], "network=foo is invalid: choose one of ['deltanet', 'dnc'", CONFIG),
    (["system=nope"], "system=nope is invalid: choose one of ['rec_ppo']", CONFIG),
    (["logger=nope"], "logger=nope is invalid: choose one of ['default', 'wandb']", CONFIG),
    (["checkpoint=nope"], "checkpoint=nope is invalid: choose one of ['default']", CONFIG),
    (["-m", "network=gru,nope"], "network=nope is invalid: choose one of", CONFIG),
    (["foo=3"], "foo='3' is invalid: unknown key (valid keys: ['arch'", CONFIG),
    (["system.lrr=0.1"], "unknown key (did you mean system.lr?)", CONFIG),
    (["Arch.seed=3"], "Arch.seed='3' is invalid: unknown key (did you mean arch.seed?)", CONFIG),
    (["arch.sede=3"], "unknown key (did you mean arch.seed?)", CONFIG),
    (["logger.wandb.mode=offline"], "logger.wandb is set by choosing logger=wandb", CONFIG),
    (["env.difficulty=1"], "env.difficulty=1 is invalid: choose one of ['easy', 'medium'", CONFIG),
    (["arch.num_envs"], "Error parsing override 'arch.num_envs'", CONFIG),
    (["arch.num_envs=[1,2"], "no viable alternative at input '[1,2'", CONFIG),
    (["system.rollout_carries=every-step"], "choose one of ['auto', 'every_step'", CONFIG),
    (["system.rollout_carries=3"], "system.rollout_carries=3 is invalid", CONFIG),
    # sizes beyond int32, memory settings that used to fail late (after compiling)
    (["arch.seed=1e100"], "arch.seed=1e+100 is invalid: must be an integer in [0,", CONFIG),
    (["arch.num_seeds=1e100"], "arch.num_seeds=1e+100 is invalid", CONFIG),
    (["arch.total_timesteps=1e100"], "arch.total_timesteps=1e+100 is invalid", CONFIG),
    (["network.hidden_size=1e100"], "network.hidden_size=1e+100 is invalid", CONFIG),
    (["network=ffm", "network.trace_size=0"], "network.trace_size=0 is invalid", CONFIG),
    (["network=lru", "network.r_max=1.5"], "network.r_max=1.5 is invalid", CONFIG),
    (["network=s5", "network.dt_min=0.5"], "must be <= network.dt_max=0.1", CONFIG),
    (["network=memoroid", "network.num_layers=0"], "network.num_layers=0 is invalid", CONFIG),
    (["network=gru", "network.chrono_period=0.5"], "network.chrono_period=0.5", CONFIG),
    (
        ["env=sets/card_table", "env.kwargs.capacity=0"],
        "is invalid: sets/card_table refuses it (need capacity >= 1",
        CONFIG,
    ),
    (
        ["distributed.coordinator_address=notahost"],
        "distributed.coordinator_address='notahost' is invalid: must be host:port",
        CONFIG,
    ),
    (["hydra.run.dir=/proc/stoixlite_run"], "hydra.run.dir=/proc/stoixlite_run is invalid", CONFIG),
    # inputs whose error used to take more than one line
    (
        ["env=sets/card_table", "env.kwargs=5"],
        "env.kwargs=5 is invalid: must be a mapping of sets/card_table's keyword arguments",
        CONFIG,
    ),
    (
        ["arch.num_envs=${oc.env:STOIXLITE_UNSET_VAR}"],
        "arch.num_envs=${oc.env:STOIXLITE_UNSET_VAR} is invalid: the interpolation does not "
        "resolve (Environment variable 'STOIXLITE_UNSET_VAR' not found)",
        CONFIG,
    ),
    (
        ["system.lr=${system.nope}"],
        "system.lr=${system.nope} is invalid: the interpolation does not resolve "
        "(Interpolation key 'system.nope' not found)",
        CONFIG,
    ),
    (["--foo"], "--foo is invalid: not an option (options: -m/--multirun", CONFIG),
    (["-x"], "-x is invalid: not an option", CONFIG),
    (["hydra.run.dir="], "hydra.run.dir='' is invalid: give a directory", CONFIG),
    (["hydra.sweep.dir= "], "hydra.sweep.dir='' is invalid: give a directory", CONFIG),
    (["=5"], "=5 is invalid: no key before '=' (give key=value", CONFIG),
    (["+=5"], "+=5 is invalid: no key before '='", CONFIG),
    (["arch.séed=3"], "the key 'arch.séed' has a non-ASCII character 'é'", CONFIG),
    (["systém.lr=0.1"], "did you mean system.lr?", CONFIG),
    # resume= and run-directory files
    (["resume="], "resume='' is invalid: give a run directory", CONFIG),
    (["resume={missing}"], "resume={missing}: no such directory", CONFIG),
    (["resume={empty}"], "resume={empty}: no config.yaml there", CONFIG),
    (["resume={nockpt}"], "its checkpoints/ directory is missing (deleted", CONFIG),
    (["resume={garbage}"], "config.yaml is", CONFIG),
    (["resume={zeroed}"], "no intact checkpoint in", FAILED),
    (["resume={run}", "network.hidden_size=16"], "different network/env config", CONFIG),
    (["resume={run}", "system.lr=inf"], "system.lr=inf is invalid", CONFIG),
    # one mistake (num_envs=5 would also break the budget: the typed parse lists both, one each)
    (["resume={run}", "arch.num_envs=3"], "must divide arch.num_envs=3", CONFIG),
]

# Every typed key with a value of the wrong type or out of range: the line names the
# key and the value as the typed parse read it (1e400 is read as inf).
_INT_KEYS = (
    *("arch.num_envs", "arch.num_eval_envs", "arch.eval_max_steps", "arch.num_seeds"),
    *("arch.max_rollbacks", "arch.num_evaluations", "arch.seed", "arch.total_timesteps"),
    *("system.rollout_length", "system.epochs", "system.num_minibatches", "system.bptt_length"),
    *("system.burn_in", "system.rollout_unroll", "checkpoint.every", "checkpoint.keep_last"),
    *("network.hidden_size", "network.embed_size", "network.encoder_layers"),
    *("network.head_size", "network.head_layers"),
)
_FLOAT_KEYS = (
    *("system.gamma", "system.gae_lambda", "system.clip_eps", "system.value_clip_eps"),
    *("system.vf_coef", "system.ent_coef", "system.lr", "system.max_grad_norm", "system.adam_eps"),
)
_BOOL_KEYS = (
    *("system.anneal_lr", "system.normalize_advantages", "system.stateless_transitions"),
    *("arch.eval_greedy", "checkpoint.enabled", "checkpoint.keep_best", "logger.progress"),
    *("logger.jsonl", "logger.plot", "network.shared_memory", "arch.host_overlap"),
)
_CHOICE_KEYS = (
    *("network.encoder", "network.set_pooling", "network.activation", "arch.on_nonfinite"),
    "system.rollout_carries",
)
_WRONG_VALUES = {  # (given, as the line shows it) per kind of key
    _INT_KEYS: (("abc", "'abc'"), ("1.5", "1.5"), ("[1]", "[1]")),
    _FLOAT_KEYS: (("abc", "'abc'"), ("[1]", "[1]"), ("1e400", "inf")),
    _BOOL_KEYS: (("maybe", "'maybe'"), ("2", "2")),
    _CHOICE_KEYS: (("xyz", "'xyz'"),),
}
TYPED_BAD_INPUTS: list[tuple[list[str], str, int]] = [
    ([f"{key}={given}"], f"{key}={shown} is invalid", CONFIG)
    for keys, values in _WRONG_VALUES.items()
    for key in keys
    for given, shown in values
]
# The default run gives every typed key one wrong value, each kind's values in turn (so every
# key and every wrong value of its kind is refused); the key's other wrong values run under
# `pytest -m slow` (the same typed parse of the same key: 70 cases, 10 s of CPU).
TYPED_SLOW = {
    f"{key}={given}"
    for keys, values in _WRONG_VALUES.items()
    for i, key in enumerate(keys)
    for j, (given, _) in enumerate(values)
    if j != i % len(values)
}


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bad_inputs")
    run = base / "run"
    loop.train(run_plan(RUN), run)
    nockpt, zeroed, garbage = base / "nockpt", base / "zeroed", base / "garbage"
    for copy in (nockpt, zeroed, garbage):
        shutil.copytree(run, copy)
    shutil.rmtree(checkpoint_dir(nockpt))
    for path in checkpoint_dir(zeroed).rglob("*"):
        if path.is_file():
            path.write_bytes(b"\0" * path.stat().st_size)
    (garbage / "config.yaml").write_bytes(b"\x00\xff: [unclosed\n")
    (base / "empty").mkdir()
    return {
        "run": run,
        "nockpt": nockpt,
        "zeroed": zeroed,
        "garbage": garbage,
        "empty": base / "empty",
        "missing": base / "missing",
        "scratch": base / "scratch",
    }


def _names_the_input(line: str, argv: list[str]) -> bool:
    """Whether ``line`` names a key or a value of the input (the key of an override, or its
    group option, or the flag), so that the user sees which input is wrong."""
    for arg in argv:
        if arg.startswith("hydra.run.dir=") and arg not in line and "hydra.run.dir" not in line:
            continue
        key, _, value = arg.partition("=")
        key = key.lstrip("+~")
        for word in (key, value.split(",")[-1], arg):
            if word and word in line:
                return True
    return False


# POPGym Arcade's own keys, checked by building the game (needs popgym-arcade installed)
if importlib.util.find_spec("popgym_arcade") is not None:
    ARCADE = ["env=arcade/count_recall"]
    BAD_INPUTS += [
        (
            [*ARCADE, "env.kwargs.obs_size=100"],
            "is invalid: arcade/count_recall refuses it (env.kwargs.obs_size=100 is not a frame "
            "size of arcade/count_recall; allowed: [128, 256])",
            CONFIG,
        ),
        (
            [*ARCADE, "env.kwargs.partial_obs=maybe"],
            "env.kwargs.partial_obs='maybe' is invalid",
            CONFIG,
        ),
        (
            [*ARCADE, "env.difficulty=extreme"],
            "env.difficulty='extreme' is invalid",
            CONFIG,
        ),
        (
            [*ARCADE, "network.cnn_kernels=[8,4,30]"],
            "network.cnn_kernels=[8, 4, 30] is invalid: convolution 3's 30x30 kernel is larger "
            "than the 14x14",
            CONFIG,
        ),
    ]


def test_the_table_is_long_enough():
    assert len(BAD_INPUTS) + len(TYPED_BAD_INPUTS) >= 200


@pytest.mark.parametrize(
    ("args", "expected", "status"),
    BAD_INPUTS
    + [
        pytest.param(*case, marks=pytest.mark.slow) if case[0][0] in TYPED_SLOW else case
        for case in TYPED_BAD_INPUTS
    ],
)
def test_bad_input_is_one_line(dirs, capsys, monkeypatch, args, expected, status):
    before = {name: _digest(path) for name, path in dirs.items() if path.is_dir()}
    argv = list(args)
    for name, path in dirs.items():
        argv = [a.replace(f"{{{name}}}", str(path)) for a in argv]
    if not any(arg.startswith("resume=") for arg in argv):  # a resumed run uses its own
        argv.append(f"hydra.run.dir={dirs['scratch']}")
    code, out, err = run_cli(argv, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    for name, path in dirs.items():
        expected = expected.replace(f"{{{name}}}", str(path))
    assert code == status, (code, err)
    assert len(lines) == 1 and expected in lines[0], err
    assert _names_the_input(lines[0], argv), lines[0]
    assert "Traceback" not in out + err
    assert not (dirs["scratch"] / ".hydra").exists()  # a refused run leaves no Hydra files
    after = {name: _digest(path) for name, path in dirs.items() if path.is_dir()}
    assert {k: v for k, v in after.items() if k != "scratch"} == {
        k: v for k, v in before.items() if k != "scratch"
    }


def _interrupt_while_building(monkeypatch) -> None:
    """Ctrl-C arrives while the experiment is built and compiled (before training starts)."""

    def build(cfg):
        signal.default_int_handler(signal.SIGINT, None)  # Python's own Ctrl-C handler: raises

    monkeypatch.setattr(loop, "build_run", build)


def test_ctrl_c_while_compiling_a_new_run_is_one_line(dirs, capsys, monkeypatch):
    _interrupt_while_building(monkeypatch)
    run_dir = dirs["scratch"] / "new"
    code, out, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    assert code == INTERRUPTED
    assert err.strip() == (
        f"interrupted before the first checkpoint: nothing was saved in {run_dir}; the same "
        "command (or resume=) starts it afresh"
    )


def test_ctrl_c_while_compiling_a_resume_prints_the_resume_command(dirs, capsys, monkeypatch):
    before = _digest(dirs["run"])
    _interrupt_while_building(monkeypatch)
    argv = [f"resume={dirs['run']}"]
    code, out, err = run_cli(argv, capsys, monkeypatch)
    assert code == INTERRUPTED
    assert err.strip() == (
        f"interrupted before the next checkpoint; resume with "
        f"`python -m stoixlite.rec_ppo resume={dirs['run']}`"
    )
    assert _digest(dirs["run"]) == before


EVALUATE_BAD_INPUTS: list[tuple[list[str], str]] = [
    (["{missing}"], "does not exist"),
    (["{empty}"], "config.yaml not found: is"),
    (["{nockpt}"], "no checkpoint in"),
    (["{zeroed}"], "no intact checkpoint in"),
    (["{garbage}"], "config.yaml is"),
    (["{run}", "--checkpoint", "nope"], "'nope' is not latest, best or a step number"),
    (["{run}", "--checkpoint", "99"], "--checkpoint 99: no such checkpoint"),
    (["{run}", "--episodes", "0"], "'0' is not a positive integer"),
    (["{run}", "--bogus"], "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: run_dir"),
    (["{run}", "--seed", "-1"], "'-1' is not an integer in [0, 2147483647]"),
    (["{run}", "--seed", "99999999999999999999"], "is not an integer in [0, 2147483647]"),
    (["{run}", "--seed", "abc"], "'abc' is not an integer in [0, 2147483647]"),
    (["{run}/config.yaml"], "config.yaml is a file, not a run directory"),
]


@pytest.mark.parametrize(("args", "expected"), EVALUATE_BAD_INPUTS)
def test_evaluate_bad_input_is_one_line_before_building(dirs, capsys, monkeypatch, args, expected):
    from stoixlite import evaluate

    def build(cfg):
        raise AssertionError("built a run for a bad input")

    monkeypatch.setattr(resume, "build_run", build)
    before = {name: _digest(path) for name, path in dirs.items() if path.is_dir()}
    argv = [a.format(**{k: str(v) for k, v in dirs.items()}) for a in args]
    try:
        code = evaluate.main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == CONFIG and len(lines) == 1 and expected in lines[0], captured.err
    assert "Traceback" not in captured.out + captured.err
    assert {name: _digest(path) for name, path in dirs.items() if path.is_dir()} == before


def test_stop_signal_prints_the_resume_command(dirs, capsys, monkeypatch):
    run_dir = dirs["scratch"] / "stopped"

    def stopped(cfg, run_dir, resume=False, **kwargs):
        raise TrainingInterrupted(signal.SIGTERM, run_dir, 1)

    monkeypatch.setattr(loop, "train", stopped)
    code, out, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    assert code == 128 + signal.SIGTERM
    assert err.strip().splitlines()[-1] == (
        f"stopped by SIGTERM after chunk 1; resume with "
        f"`python -m stoixlite.rec_ppo resume={run_dir}`"
    )


def test_full_disk_is_one_line_and_keeps_the_checkpoints(dirs, capsys, monkeypatch, tmp_path):
    from stoixlite.config.fingerprint import config_fingerprint
    from stoixlite.tracking.checkpointing import Checkpointer
    from stoixlite.tracking.jsonl import JsonlWriter

    run_dir = tmp_path / "run"
    shutil.copytree(dirs["run"], run_dir)
    cfg = run_config(RUN)
    shutil.rmtree(checkpoint_dir(run_dir) / "2")  # the run stopped after its first checkpoint
    kept = _digest(checkpoint_dir(run_dir))

    def full(self, record):
        raise OSError(28, "No space left on device", str(self.path))

    monkeypatch.setattr(JsonlWriter, "log", full)
    argv = [f"resume={run_dir}"]
    code, out, err = run_cli(argv, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == FAILED and lines == [
        f"error: cannot write the run's outputs: [Errno 28] No space left on device: "
        f"'{run_dir / 'metrics.jsonl'}'"
    ], err
    assert _digest(checkpoint_dir(run_dir)) == kept  # nothing half-written became "latest"
    with Checkpointer(
        checkpoint_dir(run_dir), config_fingerprint(cfg.to_dict()), read_only=True
    ) as ckpt:
        assert ckpt.all_steps() == [1] and ckpt.newest_intact()[0] == 1


def test_a_new_run_refuses_a_directory_that_holds_a_run(dirs, capsys, monkeypatch):
    """A new run pointed at an existing run's directory (``hydra.run.dir``) would append to its
    metrics and mix checkpoints: one line naming ``resume=``, exit 2, the run untouched."""
    before = _digest(dirs["run"])
    code, out, err = run_cli([*RUN, f"hydra.run.dir={dirs['run']}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == CONFIG, (code, err)
    assert len(lines) == 1 and "already holds a run" in lines[0], err
    assert f"resume={dirs['run']}" in lines[0]
    assert "Traceback" not in out + err
    assert _digest(dirs["run"]) == before


def test_run_outputs_are_what_a_run_writes(tmp_path):
    """``tracking.files.RUN_OUTPUTS`` (checked before Hydra starts, without importing JAX) names the
    files the loop, the recorder and the checkpointer write."""
    from stoixlite.run.resume import CONFIG_FILE
    from stoixlite.tracking.files import RUN_OUTPUTS
    from stoixlite.tracking.recorder import METRICS_FILE

    assert set(RUN_OUTPUTS) == {CONFIG_FILE, METRICS_FILE, checkpoint_dir(tmp_path).name}
    assert checkpoint_dir(tmp_path).parent == tmp_path


def test_what_another_process_writes_after_the_meeting_is_not_a_held_run(tmp_path, monkeypatch):
    """In a multi-process run, process 0 creates the checkpoint directory as soon as the processes
    have met (``check_agreement``); a slower process must not take that for another run's outputs
    (it did: process 1 stopped with "already holds a run" while process 0 waited for it). The
    directory is looked at before the meeting, and the processes agree on what they saw."""
    run_dir = tmp_path / "run"
    seen = {}

    def meet(num_processes, **values):
        seen.update(values)
        checkpoint_dir(run_dir).mkdir(parents=True)  # process 0, meanwhile

    monkeypatch.setattr(loop, "check_agreement", meet)
    loop.train(run_plan(RUN), run_dir)
    assert seen["run_dir_outputs"] == ""
    assert (run_dir / "metrics.jsonl").exists()


def test_the_training_loop_refuses_a_directory_that_holds_a_run(dirs):
    """The same check inside ``loop.train`` (the API, and two launches in the same second that
    resolve to the same timestamped directory): raised before anything is written."""
    before = _digest(dirs["run"])
    with pytest.raises(loop.RunDirInUseError, match="already holds a run"):
        loop.train(run_plan(RUN), dirs["run"])
    assert _digest(dirs["run"]) == before


def test_a_full_disk_while_checkpointing_is_one_line(dirs, capsys, monkeypatch, tmp_path):
    """TensorStore reports a full disk as ``ValueError('RESOURCE_EXHAUSTED: ...')``, not as an
    ``OSError``: the checkpoint writer fails that way from the second checkpoint on.
    One line naming the directory, the full disk and the checkpoint kept; the partial
    checkpoint's temporary directory is removed; resume continues from the kept one."""
    from orbax.checkpoint._src.serialization import serialization, type_handlers

    from stoixlite.config.fingerprint import config_fingerprint
    from stoixlite.tracking.checkpointing import Checkpointer

    def full_disk(real):
        async def write(*args, **kwargs):
            if (checkpoint_dir(run_dir) / "1").is_dir():  # the first checkpoint is written
                raise ValueError(
                    'RESOURCE_EXHAUSTED: Error writing "leaf_00018/0" in OCDBT database: Failed '
                    "to write 1308827 bytes to file 19: No space left on device "
                    "[os_error_code='28']"
                )
            return await real(*args, **kwargs)

        return write

    # TensorStore's writes of jax arrays (leaves stored on their own) and of host arrays (the
    # bundle of small leaves: stoixlite/tracking/leaf_bundle.py)
    real = serialization.async_serialize_from_host
    monkeypatch.setattr(serialization, "async_serialize_from_host", full_disk(real))
    real = type_handlers.NumpyHandler._open_and_write
    monkeypatch.setattr(type_handlers.NumpyHandler, "_open_and_write", full_disk(real))
    run_dir = tmp_path / "run"
    code, out, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    ckpts = checkpoint_dir(run_dir)
    assert code == FAILED and lines == [
        f"error: cannot save checkpoint 2 in {ckpts}: the disk is full (no space left on "
        f"device); its partial files were removed; checkpoint 1 is kept and intact: free some "
        f"space, then `python -m stoixlite.rec_ppo resume={run_dir}` continues from it"
    ], err
    assert sorted(p.name for p in ckpts.iterdir()) == ["1"]  # no temporary directory left
    with Checkpointer(ckpts, config_fingerprint(run_config(RUN).to_dict()), read_only=True) as ckpt:
        assert ckpt.newest_intact()[0] == 1


def _stopped_while_compiling(run_dir: Path, capsys, monkeypatch) -> None:
    """A new run in ``run_dir`` stopped by Ctrl-C while its learn program compiles (after its
    ``config.yaml`` and empty ``checkpoints/`` were written)."""
    from stoixlite.run.parts import Run

    def compile_programs(self, state, key):
        signal.default_int_handler(signal.SIGINT, None)

    with monkeypatch.context() as patch:
        patch.setattr(Run, "compile_programs", compile_programs)
        code, out, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    assert code == INTERRUPTED and "nothing was saved" in err, err
    assert (run_dir / "config.yaml").exists() and checkpoint_dir(run_dir).is_dir()


def test_the_same_command_after_a_stop_before_the_first_checkpoint_starts_afresh(
    tmp_path, capsys, monkeypatch
):
    """After a stop before the first checkpoint, running the same command into the same
    directory used to be refused ("already holds a run"), and so was resume= ("no
    checkpoint"): a dead end."""
    run_dir = tmp_path / "run"
    _stopped_while_compiling(run_dir, capsys, monkeypatch)
    code, out, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"{run_dir} holds a run that stopped before its first checkpoint (nothing was saved): "
        "starting it afresh"
    )
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [64, 128]


def test_resume_after_a_stop_before_the_first_checkpoint_starts_afresh(
    tmp_path, capsys, monkeypatch
):
    """The same with resume=, after non-finite values in the first chunk (its record not
    saved, no checkpoint written)."""
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(loop, "first_nonfinite", lambda metrics, finite: ("loss/total", 0))
        code, out, err = run_cli([*RUN, f"hydra.run.dir={run_dir}"], capsys, monkeypatch)
    assert code == FAILED and "non-finite loss/total in chunk 1" in err, err
    code, out, err = run_cli([f"resume={run_dir}"], capsys, monkeypatch)
    assert code == 0, err
    assert f"{run_dir} holds a run that stopped before its first checkpoint" in out.splitlines()[0]
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [64, 128]
    assert sorted(int(p.name) for p in checkpoint_dir(run_dir).iterdir()) == [1, 2]


def test_resume_of_a_run_whose_checkpoints_were_deleted_says_so(dirs, capsys, monkeypatch):
    """A deleted ``checkpoints/`` was reported as "stopped before saving its first one"."""
    code, out, err = run_cli([f"resume={dirs['nockpt']}"], capsys, monkeypatch)
    assert code == CONFIG and err.strip() == (
        f"error: no checkpoint in {dirs['nockpt']}: its checkpoints/ directory is missing "
        "(deleted, or the run had checkpoint.enabled=false), so there is nothing to resume or "
        "load; start a new run in another directory"
    ), err


def test_a_refused_run_leaves_no_litter(tmp_path):
    """A run refused with a config error used to leave ``.hydra/`` and an empty log in its run
    directory, and ``resume=<bad path>`` created ``outputs/<date>/...``. What the refused run
    created is removed; what was there before stays."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    cases = [
        ["env=sets/card_table", "env.kwargs=5", f"hydra.run.dir={tmp_path / 'new' / 'run'}"],
        ["env=sets/card_table", "env.kwargs=5", f"hydra.run.dir={kept}"],
        ["env=sets/card_table", "env.kwargs=5"],  # the default outputs/<date>/<time>_... dir
        [f"resume={tmp_path / 'nope'}"],
    ]
    for args in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "stoixlite.rec_ppo", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == CONFIG and len(lines) == 1, proc.stderr
        assert lines[0].startswith("config error: "), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # no new/, no outputs/
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
