"""Experiment workflow: exact resume after SIGTERM, multi-seed == single seeds, refusing a
checkpoint of another config, a Hydra multirun with W&B (offline) and a failing job,
aggregation of its results, and evaluation of a saved checkpoint (also on the popgym reference).

All runs share one tiny config, so the host loop's program cache compiles it once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY, compose_config, run_config
from omegaconf import OmegaConf
from wandb_reader import read_run

from stoixlite.cli.resume import resume_config
from stoixlite.config.fingerprint import config_fingerprint
from stoixlite.config.parse import parse
from stoixlite.config.plan import plan_run
from stoixlite.config.strict import ConfigError
from stoixlite.run.build import build_run
from stoixlite.run.loop import train
from stoixlite.run.resume import checkpoint_tree
from stoixlite.run.signals import TrainingInterrupted
from stoixlite.tracking.checkpointing import Checkpointer, CheckpointMismatchError, checkpoint_dir
from stoixlite.tracking.jsonl import read_jsonl
from stoixlite.tracking.state_arrays import pack_state

ROOT = Path(__file__).resolve().parent.parent
# 3 chunks of 1 update (4 envs x 16 steps) each; popgym/repeat_previous (episodes of 51 steps).
RUN = TINY + ["arch.total_timesteps=192", "arch.num_evaluations=3", "logger.plot=false"]
VOLATILE = ("time/", "train/sps")


def stable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in records]


def final_arrays(cfg, run_dir: Path) -> dict[str, np.ndarray]:
    state, key = build_run(plan_run(cfg)).init()
    with Checkpointer(checkpoint_dir(run_dir), config_fingerprint(cfg.to_dict())) as ckpt:
        tree, host, step = ckpt.restore(checkpoint_tree(state, key))
    assert step == cfg.arch.num_evaluations and host["chunk"] == step
    return pack_state(tree)[0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    cfg = run_config(RUN)
    run_dir = tmp_path_factory.mktemp("full")
    final = train(plan_run(cfg), run_dir)
    return cfg, run_dir, final


def test_sigterm_then_resume_is_bit_identical(tmp_path, uninterrupted):
    cfg, full_dir, full_final = uninterrupted

    def kill_after_first_chunk(chunk, record):
        if chunk == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted) as stop:
        train(plan_run(cfg), tmp_path, on_chunk_end=kill_after_first_chunk)
    assert stop.value.code == 128 + signal.SIGTERM and "resume=" in str(stop.value)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    with Checkpointer(checkpoint_dir(tmp_path), config_fingerprint(cfg.to_dict())) as ckpt:
        assert ckpt.all_steps() == [1]
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 1

    resumed_cfg = resume_config(compose_config(RUN), tmp_path, [])
    resumed_final = train(plan_run(parse(resumed_cfg)), tmp_path, resume=True)
    assert resumed_final == full_final
    assert stable(read_jsonl(tmp_path / "metrics.jsonl")) == stable(
        read_jsonl(full_dir / "metrics.jsonl")
    )
    full, resumed = final_arrays(cfg, full_dir), final_arrays(cfg, tmp_path)
    assert full.keys() == resumed.keys()
    for name in full:
        np.testing.assert_array_equal(resumed[name], full[name], err_msg=name)


def test_seed_k_of_multi_seed_run_equals_single_seed_run(tmp_path, uninterrupted):
    cfg1, _, _ = uninterrupted
    single_cfg = run_config(RUN + ["arch.seed=1"])
    single_final = train(plan_run(single_cfg), tmp_path / "single")
    multi_cfg = run_config(RUN + ["arch.seed=0", "arch.num_seeds=2"])
    multi_final = train(plan_run(multi_cfg), tmp_path / "multi")

    per_seed = read_jsonl(tmp_path / "multi" / "metrics_per_seed.jsonl")
    assert [r["seed"] for r in per_seed] == [0, 1] * 3
    seed1 = [{k: v for k, v in r.items() if k != "seed"} for r in per_seed if r["seed"] == 1]
    single = read_jsonl(tmp_path / "single" / "metrics.jsonl")
    for got, want in zip(stable(seed1), stable(single), strict=True):
        assert got.keys() <= want.keys()
        for key, value in got.items():
            if value is None:
                assert want[key] is None, key
            else:
                np.testing.assert_allclose(value, want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    aggregate = read_jsonl(tmp_path / "multi" / "metrics.jsonl")[-1]
    seeds_last = [r["eval/episode_return"] for r in per_seed[-2:]]
    np.testing.assert_allclose(aggregate["eval/episode_return"], np.mean(seeds_last), rtol=1e-6)
    np.testing.assert_allclose(multi_final, np.mean(seeds_last), rtol=1e-6)
    np.testing.assert_allclose(seeds_last[1], single_final, rtol=1e-5, atol=1e-6)

    multi = final_arrays(multi_cfg, tmp_path / "multi")
    single_arrays = final_arrays(single_cfg, tmp_path / "single")
    for name, value in single_arrays.items():
        np.testing.assert_allclose(multi[name][1], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_resume_refuses_other_network_config(uninterrupted):
    cfg, run_dir, _ = uninterrupted
    other = compose_config(RUN + ["network.hidden_size=16"])
    resumed = resume_config(other, run_dir, ["network.hidden_size=16"])
    assert resumed.network.hidden_size == 16 and resumed.arch.num_envs == cfg.arch.num_envs
    with pytest.raises(CheckpointMismatchError, match="network.hidden_size: 8"):
        train(plan_run(parse(resumed)), run_dir, resume=True)


def test_evaluate_checkpoint_on_port_and_reference(uninterrupted, capsys):
    from stoixlite.evaluate import main

    _, run_dir, _ = uninterrupted
    assert main([str(run_dir), "--episodes", "3", "--reference", "--checkpoint", "best"]) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("| 0 |")][0]
    port, reference = (float(cell.split("±")[0]) for cell in row.split("|")[2:4])
    # RepeatPrevious returns lie in [-1, 1] on both implementations.
    assert -1.0 <= port <= 1.0 and -1.0 <= reference <= 1.0
    assert main([str(run_dir / "nope")]) == 2


def test_multirun_with_wandb_failing_job_and_aggregate(tmp_path):
    """4 jobs (2 seeds x 2 learning rates, one of them invalid): the valid jobs finish, share a
    W&B group, the invalid ones leave error.txt; the aggregate table pools the seeds."""
    sweep = tmp_path / "sweep"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "stoixlite.rec_ppo",
        "-m",
        *RUN,
        "logger=wandb",
        "arch.seed=0,1",
        "system.lr=0.001,-1",
        f"hydra.sweep.dir={sweep}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # failed jobs: summary line, non-zero exit
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    ok = [j for j in jobs if (j / "metrics.jsonl").exists()]
    failed = [j for j in jobs if (j / "error.txt").exists()]
    assert len(ok) == 2 and len(failed) == 2
    assert all("system.lr=-1" in (j / "error.txt").read_text() for j in failed)
    assert not any((j / "error.txt").exists() for j in ok)
    # one summary line, the last, naming each failed job's error file; no traceback
    summary = [line for line in proc.stderr.splitlines() if line.startswith("multirun:")]
    assert len(summary) == 1 and proc.stderr.rstrip().endswith(summary[0])
    assert "multirun: 2 of 4 jobs failed" in summary[0]
    names = ", ".join(f"{j.name}/error.txt" for j in failed)
    assert f"{sweep.resolve()}/{{{names}}}" in summary[0], summary[0]
    assert "Traceback" not in proc.stderr
    groups = set()
    for job in ok:
        assert len(read_jsonl(job / "metrics.jsonl")) == 3
        (wandb_run,) = (job / "wandb").glob("offline-run-*")
        run = read_run(wandb_run)
        groups.add(run["run"].run_group)
        assert [h["env_step"] for h in run["history"]] == [64, 128, 192]
        assert run["config"]["system"]["lr"] == 0.001
        assert "final/eval_return" in run["summary"]
    assert len(groups) == 1 and groups.pop().endswith(sweep.name)

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoixlite.aggregate",
            str(sweep),
            "--out",
            str(tmp_path / "agg"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "agg" / "results.md").read_text()
    finals = [read_jsonl(j / "metrics.jsonl")[-1]["eval/episode_return"] for j in ok]
    row = [line for line in table.splitlines() if "repeat_previous" in line][0]
    # the sample standard deviation over seeds (ddof 1), as the table's note says
    assert f"{np.mean(finals):.3f} ± {np.std(finals, ddof=1):.3f}" in row and "| 2 |" in row
    assert "sample sd (ddof 1)" in table
    assert "2 failed" in table
    assert (tmp_path / "agg" / "popgym-repeat_previous-easy.png").stat().st_size > 0
    cfg = OmegaConf.load(ok[0] / "config.yaml")
    assert cfg.system.lr == 0.001 and jax.numpy.isfinite(finals[0])
    by_run = [sys.executable, "-m", "stoixlite.aggregate", str(sweep), "--label", "run"]
    out = subprocess.run(
        by_run + ["--out", str(tmp_path / "agg_runs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| popgym/repeat")]
    assert sorted(row.split("|")[2].strip() for row in rows) == sorted(j.name for j in ok)
    for job, final in zip(ok, finals, strict=True):
        (row,) = [r for r in rows if f"| {job.name} |" in r]
        assert "| 1 |" in row and f"| {final:.3f} | n/a |" in row  # one seed: no sd, no interval


def test_target_return_stops_early(tmp_path, uninterrupted):
    """``arch.target_return`` ends the run after the first eval that reaches it (checkpointed);
    a target above every eval return runs the whole budget."""
    cfg, full_dir, _ = uninterrupted
    full = read_jsonl(full_dir / "metrics.jsonl")
    first = full[0]["eval/episode_return"]
    stopped = run_config(RUN + [f"arch.target_return={first}"])
    train(plan_run(stopped), tmp_path / "stop")
    records = read_jsonl(tmp_path / "stop" / "metrics.jsonl")
    assert stable(records) == stable(full[:1])
    with Checkpointer(
        checkpoint_dir(tmp_path / "stop"), config_fingerprint(stopped.to_dict())
    ) as ckpt:
        assert ckpt.latest_step() == 1
    unreachable = run_config(RUN + ["arch.target_return=2.0"])  # popgym returns are <= 1
    train(plan_run(unreachable), tmp_path / "full")
    assert len(read_jsonl(tmp_path / "full" / "metrics.jsonl")) == len(full)


def test_resume_after_an_early_stop_trains_no_further(tmp_path, uninterrupted, capsys):
    """A run stopped at ``arch.target_return`` is finished: resuming it adds no chunk and keeps
    its records and checkpoint; resuming with ``arch.target_return=null`` trains on to the
    budget, the same records as the uninterrupted run."""
    _, full_dir, _ = uninterrupted
    full = read_jsonl(full_dir / "metrics.jsonl")
    first = full[0]["eval/episode_return"]
    stopped = run_config(RUN + [f"arch.target_return={first}"])
    run_dir = tmp_path / "stop"
    train(plan_run(stopped), run_dir)
    before = (run_dir / "metrics.jsonl").read_text()
    assert train(plan_run(stopped), run_dir, resume=True) == pytest.approx(first)
    assert "nothing to train" in capsys.readouterr().out
    assert (run_dir / "metrics.jsonl").read_text() == before
    with Checkpointer(checkpoint_dir(run_dir), config_fingerprint(stopped.to_dict())) as ckpt:
        assert ckpt.latest_step() == 1
    train_on = run_config(RUN + ["arch.target_return=null"])
    train(plan_run(train_on), run_dir, resume=True)
    assert stable(read_jsonl(run_dir / "metrics.jsonl")) == stable(full)


def test_multi_seed_init_is_one_program_per_seed_and_matches_eager():
    """``Run.init`` compiles the initial state per seed: vmapped, the orthogonal init is a batched
    LAPACK QR that deadlocked the 2-core XLA thread pool (framestack, 3 seeds). In a subprocess
    with a timeout, so a deadlock fails the test instead of hanging the suite; the state equals
    the eager computation up to float32 rounding (the init program skips XLA's optimisations)."""
    code = (
        "import jax, numpy as np\n"
        "from conftest import run_plan\n"
        "from stoixlite.run.build import build_run\n"
        "run = build_run(run_plan(['network=framestack', 'env=popgym/repeat_previous',\n"
        "    'arch.num_seeds=3', 'arch.num_envs=8', 'system.num_minibatches=2']))\n"
        "compiled, eager = run.init()[0], run.initial_states()\n"
        "raw = lambda x: np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(\n"
        "    x.dtype, jax.dtypes.prng_key) else x)\n"
        "for a, b in zip(jax.tree.leaves(compiled), jax.tree.leaves(eager), strict=True):\n"
        "    assert a.shape == b.shape and a.dtype == b.dtype\n"
        "    np.testing.assert_allclose(raw(a), raw(b), rtol=0, atol=1e-5)\n"
    )
    tests_dir = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{tests_dir.parent}{os.pathsep}{tests_dir}"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_resume_refuses_other_chunks_and_extends_with_the_same_chunk_size(
    tmp_path, uninterrupted, capsys
):
    """A checkpoint counts chunks: a resume that changes their size is refused (one line, the
    key and the fitting arch.num_evaluations); with the chunk size kept it trains on."""
    _, full_dir, _ = uninterrupted
    run_dir = tmp_path / "run"
    shutil.copytree(full_dir, run_dir)
    saved = (run_dir / "config.yaml").read_text()
    longer = ["arch.total_timesteps=384"]
    with pytest.raises(ConfigError) as err:
        train(
            plan_run(parse(resume_config(compose_config(RUN + longer), run_dir, longer))),
            run_dir,
            True,
        )
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert "arch.total_timesteps=384 (saved: 192)" in message
    assert "arch.num_evaluations=6" in message
    assert (run_dir / "config.yaml").read_text() == saved  # nothing written

    extend = longer + ["arch.num_evaluations=6"]
    train(
        plan_run(parse(resume_config(compose_config(RUN + extend), run_dir, extend))), run_dir, True
    )
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [64, 128, 192, 256, 320, 384]
    assert stable(records[:3]) == stable(read_jsonl(full_dir / "metrics.jsonl"))

    capsys.readouterr()
    extended = (run_dir / "config.yaml").read_text()
    other = ["system.gamma=0.5"]  # a resume that trains nothing writes nothing, not even config
    resumed = parse(resume_config(compose_config(RUN + extend + other), run_dir, other))
    train(plan_run(resumed), run_dir, True)
    assert "has trained all 6 chunks of arch.total_timesteps=384: nothing to train" in (
        capsys.readouterr().out
    )
    assert read_jsonl(run_dir / "metrics.jsonl") == records
    assert (run_dir / "config.yaml").read_text() == extended


def test_resume_refuses_a_checkpoint_counted_in_other_chunks(tmp_path, uninterrupted):
    """The checkpoint's learner has trained ``update_step`` updates in ``chunk`` chunks; a
    saved config whose chunks are of another size (written by hand here; or by a stoixlite
    whose chunk split differed) is refused in one line, and nothing is written."""
    _, full_dir, _ = uninterrupted
    run_dir = tmp_path / "run"
    shutil.copytree(full_dir, run_dir)
    config = run_dir / "config.yaml"
    edited = OmegaConf.load(config)
    edited.arch.total_timesteps = 384  # 3 chunks of 2 updates, but the checkpoint has 1 each
    OmegaConf.save(edited, config)
    saved, metrics = config.read_text(), (run_dir / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError) as err:
        train(
            plan_run(parse(resume_config(compose_config(RUN), run_dir, []))), run_dir, resume=True
        )
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert "holds 3 updates in 3 chunks, not chunks of 2 updates" in message
    assert config.read_text() == saved and (run_dir / "metrics.jsonl").read_text() == metrics
