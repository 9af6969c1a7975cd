"""Build a run from its plan: the env stacks, network, optimiser and pure PPO functions of
:class:`~stoixlite.run.parts.Run`, laid out on the plan's devices, with the programs of recent
configs shared (:func:`build_run`). A host env's run is :func:`stoixlite.run.host.build_host_run`'s.

Tests and the benchmark tool (``python -m stoixlite.benchmark``) use :func:`build_run` too, so
they exercise exactly the training code path.
"""

from __future__ import annotations

import copy
from collections import OrderedDict

from stoixlite.config.plan import RunPlan
from stoixlite.envs.host import is_host_env
from stoixlite.ppo.evaluate import make_evaluator
from stoixlite.ppo.learner import make_learn_chunk, make_optimizer, make_update
from stoixlite.run.host import build_host_run
from stoixlite.run.parts import Run, make_env_stack, make_network
from stoixlite.run.sharding import Placement


def _build(plan: RunPlan) -> Run:
    cfg, ppo = plan.config, plan.ppo
    placement = Placement.of(plan)
    env = make_env_stack(cfg.env, ppo.num_envs, branching=ppo.branching)
    network = make_network(cfg.network, env)
    optimizer = make_optimizer(ppo)
    update = make_update(
        network.apply,
        env,
        optimizer,
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
        env=env,
        network=network,
        optimizer=optimizer,
        update=update,
        learn_chunk=make_learn_chunk(update, ppo.updates_per_chunk),
        evaluate=evaluate,
        placement=placement,
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
    run.plan = plan
    return run
