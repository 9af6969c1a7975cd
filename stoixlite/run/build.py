"""Build a run from its plan: the env stacks, network, optimiser and pure PPO functions of
:class:`~stoixlite.run.parts.Run`, laid out on the plan's devices, with the programs of recent
configs shared (:func:`build_run`). A host env's run is :func:`stoixlite.run.host.build_host_run`'s.

Tests and the benchmark tool (``python -m stoixlite.benchmark``) use :func:`build_run` too, so
they exercise exactly the training code path.
:func:`build_group` builds the :class:`~stoixlite.run.parts.Run` of a fused group: runs
with one :func:`program_key` (e.g. the jobs of a sweep over learning rates) as the members of one
program (:mod:`stoixlite.run.fused` trains it).
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict

from stoixlite.config.plan import RunPlan
from stoixlite.envs.host import is_host_env
from stoixlite.envs.types import Environment
from stoixlite.ppo.evaluate import make_evaluator
from stoixlite.ppo.learner import make_learn_chunk, make_optimizer, make_update
from stoixlite.run.host import build_host_run
from stoixlite.run.parts import Run, make_env_stack, make_network, make_raw_env, run_hyper
from stoixlite.run.sharding import Placement


def _build(plan: RunPlan, members: tuple[RunPlan, ...] = ()) -> Run:
    cfg, ppo = plan.config, plan.ppo
    placement = Placement.of(plan, max(len(members), 1))
    env = make_env_stack(cfg.env, ppo.num_envs, branching=ppo.branching)
    network = make_network(cfg.network, env)
    hyper = run_hyper(plan, env)
    optimizer = make_optimizer(ppo, hyper)
    update = make_update(
        network.apply,
        env,
        ppo,
        rollout_unroll=cfg.system.rollout_unroll,
        layout_minibatch=placement.constrain_minibatch if placement.mesh else None,
    )
    eval_env = make_env_stack(cfg.env, cfg.arch.num_eval_envs, branching=ppo.branching)
    evaluate = make_evaluator(
        network.apply,
        network.initialize_carry,
        eval_env,
        cfg.arch.num_eval_envs,
        greedy=cfg.arch.eval_greedy,
        max_steps=int((env.max_episode_steps or cfg.arch.eval_max_steps) + 1),
    )
    return Run(
        plan=plan,
        hyper=hyper,
        env=env,
        network=network,
        optimizer=optimizer,
        update=update,
        learn_chunk=make_learn_chunk(update, ppo.updates_per_chunk),
        evaluate=evaluate,
        placement=placement,
        members=members,
        member_hypers=tuple(hyper for _ in members),  # each member's: set by build_group
    )


# The programs of recent configs, keyed by everything that affects the compiled code
# (RunPlan.compile_key: not the seed, loggers or checkpoint settings): the jobs of a seed sweep in
# one multirun process, and a resumed run in the same process, reuse one compilation. Each
# build_run gets its own copy of the cached run with its own plan; the copies share the jitted
# and compiled programs.
_CACHE: OrderedDict[str, Run] = OrderedDict()
_CACHE_SIZE = 2


def build_run(plan: RunPlan) -> Run:
    """The :class:`Run` of ``plan``, a run of its own whose programs are shared with the runs
    of recent plans that compile the same (another seed, other outputs)."""
    if is_host_env(plan.config.env.name):  # envs of its own, stepped on the host: never shared
        return build_host_run(plan)
    key = plan.compile_key
    if key not in _CACHE:
        _CACHE[key] = _build(plan)
    _CACHE.move_to_end(key)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    run = copy.copy(_CACHE[key])  # shares the programs, not the plan
    run.plan = plan  # its env's params are the cached run's (the key holds env.kwargs)
    run.hyper = run_hyper(plan, run.env)
    return run


def program_key(plan: RunPlan, raw_env: Environment) -> str:
    """What the programs of ``plan`` depend on when its env's traced params are inputs too:
    :attr:`RunPlan.compile_key` without the ``env.kwargs`` that are ``raw_env``'s traceable
    params (:meth:`~stoixlite.envs.types.Environment.traceable_params`), with ``raw_env``'s specs
    (a traced param that changes a space or the time limit changes the programs). The runs of
    one key can train as one fused group (:func:`build_group`)."""
    compiled = json.loads(plan.compile_key)
    traced = raw_env.traceable_params()
    kwargs = compiled["env"]["kwargs"]
    compiled["env"]["kwargs"] = {k: v for k, v in kwargs.items() if k not in traced}
    compiled["env_specs"] = repr(
        (raw_env.observation_space, raw_env.action_space, raw_env.max_episode_steps)
    )
    return json.dumps(compiled, sort_keys=True, default=str)


def build_group(plans: list[RunPlan]) -> Run:
    """The :class:`Run` of a fused group: the runs of ``plans`` (one :func:`program_key`, at
    least two) as members of one program over ``len(plans) x arch.num_seeds`` lanes; its
    ``plan`` is the first member's (every member's programs are the same), its programs shared
    with recent groups of the same key and size."""
    raw = [make_raw_env(plan.config) for plan in plans]
    keys = {program_key(plan, env) for plan, env in zip(plans, raw, strict=True)}
    if len(plans) < 2 or len(keys) != 1:
        raise ValueError("a fused group needs at least two runs of one program (program_key)")
    key = f"{keys.pop()} members={len(plans)}"
    if key not in _CACHE:
        _CACHE[key] = _build(plans[0], tuple(plans))
    _CACHE.move_to_end(key)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    run = copy.copy(_CACHE[key])
    run.plan, run.members = plans[0], tuple(plans)
    run.member_hypers = tuple(run_hyper(p, env) for p, env in zip(plans, raw, strict=True))
    run.hyper = run.member_hypers[0]
    return run
