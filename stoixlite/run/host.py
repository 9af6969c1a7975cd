"""The run of a host env (:mod:`stoixlite.envs.host`): the same PPO update as the JAX envs',
with the rollout collected on the host.

One update (:meth:`HostRun.collect` then the compiled learner): for ``rollout_length`` steps the
policy step :func:`stoixlite.ppo.rollout.act` (compiled once) acts on the vector's current
timestep and the host vector steps with its actions; the steps are stacked into the same
:class:`~stoixlite.ppo.types.Transition` ``[T, N, ...]`` as the JAX rollout's, and the carries
after every step into ``[T, N, ...]``. From there everything is the JAX envs' code, compiled:
:func:`stoixlite.ppo.learner.collected` (bootstrap values, the carries the training sequences
start from) and :func:`stoixlite.ppo.learner.make_learn_from` (GAE, sequence cutting, the
epochs, the metrics). The PRNG key advances as in the JAX rollout (one split per step), so with
the same observations the host run takes the same actions and makes the same update.

By default acting and learning take turns. With ``arch.host_overlap`` they overlap
(:meth:`HostRun.overlapped_update`): while the learner trains on rollout k, an actor thread
(:mod:`stoixlite.run.actor`) collects rollout k+1 with the parameters the learner started update
k from, so every rollout after a pipeline's first acts with parameters one update stale. The
actor's rollout is a rollout like any other (its carries, log-probs, values and bootstrap values
are those of its acting parameters); the PRNG keys follow the same chain as without overlap.

One seed per run, on one device. The learner state and the host key are checkpointed as for
every run; the envs are not (a Python env's state is its own): a resumed run resets them with
seeds of its own (the memory starts afresh at the FIRST timesteps), so it continues the learner
exactly but not the episodes in progress. A rollout in flight is never saved: a checkpoint
holds the learner state an update returned, and a resumed run starts a new pipeline from it.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.config.plan import RunPlan
from stoixlite.envs.host.sources import HostSource, host_source
from stoixlite.envs.host.vector import HostVector, to_device
from stoixlite.envs.types import LAST, MID
from stoixlite.ppo.finite import all_finite
from stoixlite.ppo.learner import (
    Collected,
    collected,
    learner_keys,
    make_learn_from,
    make_optimizer,
    make_update_phases,
)
from stoixlite.ppo.rollout import ApplyFn, act
from stoixlite.ppo.types import Hyper, LearnerState, Transition
from stoixlite.run.actor import ActorThread, InFlight, check_stop
from stoixlite.run.parts import Metrics, Run, make_network, run_hyper, split_key
from stoixlite.run.sharding import Placement
from stoixlite.run.signals import ctrl_c_deferred


def _act(
    apply_fn: ApplyFn, params: Any, carry: Any, timestep: Any, key: jax.Array, greedy: bool
) -> tuple[Any, jax.Array, dict[str, jax.Array], jax.Array]:
    """The rollout's policy step (:func:`stoixlite.ppo.rollout.act` after one key split)."""
    key, act_key = jax.random.split(key)
    carry, action, extras, _ = act(apply_fn, params, carry, timestep, act_key, greedy)
    return carry, action, extras, key


def _stack(parts: list[Any]) -> Any:
    return jax.tree.map(lambda *x: jnp.stack(x), *parts)


def _copy(tree: Any) -> Any:
    """``tree`` with every leaf in a buffer of its own (traced: a copy, not the input)."""
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


@dataclass
class HostRun(Run):
    """A :class:`~stoixlite.run.parts.Run` whose envs are a :class:`HostVector` (and another for
    evaluation). ``update``, ``learn_chunk`` and ``evaluate`` are host loops around compiled
    programs; ``learn`` and ``evaluator`` are the same functions (there is nothing to vmap)."""

    envs_on_host: ClassVar[bool] = True
    vector: HostVector | None = None
    eval_vector: HostVector | None = None

    def __post_init__(self) -> None:
        apply_fn, ppo = self.network.apply, self.ppo
        phases = make_update_phases(apply_fn, self.env, ppo)
        self._policy = jax.jit(functools.partial(_act, apply_fn), static_argnums=4)
        self._collected = jax.jit(
            lambda params, c0, traj, log_prob, value, carries: collected(
                apply_fn,
                ppo,
                params,
                c0,
                traj.replace(log_prob=jnp.stack(log_prob), value=jnp.stack(value)),
                _stack(carries),
            )
        )
        self._learn_from = jax.jit(make_learn_from(phases, ppo), donate_argnums=0)
        self._copy = jax.jit(_copy)
        self._left = jax.jit(lambda key: learner_keys(key)[0])  # the key an update leaves
        self._timestep: Any = None
        self._collecting = False
        self._in_flight = InFlight()
        overlap = self.config.arch.host_overlap
        self.update = self.overlapped_update if overlap else self._update
        self.learn_chunk = self._learn_chunk
        self.evaluate = self._evaluate
        self.learn = self._learn_chunk
        self.evaluator = self._evaluate
        self.split = jax.jit(split_key)
        self.params_finite = jax.jit(all_finite)

    def train_seeds(self, update: int = 0) -> list[int]:
        """The reset seeds of the training envs starting at ``update``: distinct per env, per
        ``arch.seed`` and per start (a resumed run starts new episodes, not the run's first
        ones again)."""
        seq = np.random.SeedSequence([self.config.arch.seed, 0x5EED, update])
        return [int(s) for s in seq.generate_state(self.ppo.num_envs)]

    def init(self) -> tuple[Any, jax.Array]:
        """Reset the training envs, then :meth:`Run.init` (same keys as a JAX run's)."""
        assert self.vector is not None
        self._timestep = to_device(self.vector.reset(self.train_seeds()))
        return super().init()

    def reset_envs(self, key: jax.Array, env_params: dict[str, Any]) -> tuple[Any, Any]:
        """The host envs' first timesteps (reset by :meth:`init`; no env state on device)."""
        return None, self._timestep

    def compile_programs(
        self, state: Any, key: jax.Array, also: Sequence[tuple[Callable, tuple[Any, ...]]] = ()
    ) -> Any:
        """Compile the policy step and the learner by running them once on a rollout of zeros
        of the real shapes and dtypes (the envs do not step; ``state`` is left as it is), so
        that ``time/compile_s`` holds the compile time and the first chunk's steps per second
        do not; and the jitted programs of ``also`` for their arguments. Returns :attr:`learn`."""
        for program, args in also:
            program.lower(*args).compile()
        assert self.vector is not None and self.vector.timestep is not None
        host_ts = self.vector.timestep
        ts = to_device(host_ts)
        carry, action, extras, _ = self._policy(state.params, state.carry, ts, state.key, False)
        t = self.ppo.rollout_length

        def zeros(x: Any, dtype: Any = None) -> np.ndarray:
            x = np.asarray(x)
            return np.zeros((t, *x.shape), dtype or x.dtype)

        last = zeros(host_ts.step_type, bool)
        traj = Transition(
            obs=zeros(host_ts.observation),
            start=last,
            action=zeros(action),
            log_prob=None,
            value=None,
            reward=zeros(host_ts.reward),
            discount=zeros(host_ts.discount),
            last=last,
            next_obs=zeros(host_ts.extras["next_obs"]),
            episode_return=zeros(host_ts.extras["episode_return"]),
            episode_length=zeros(host_ts.extras["episode_length"]),
            invalid_action=last,
        )
        log_probs, values = [extras["log_prob"]] * t, [extras["value"]] * t
        data = self._collected(state.params, state.carry, traj, log_probs, values, [carry] * t)
        jax.block_until_ready(self._learn_from(self._copy(state), data))
        if self.config.arch.host_overlap:  # the overlapped update's own small programs
            jax.block_until_ready((self._copy((state.params, state.carry)), self._left(state.key)))
        return self.learn

    def compile_learn(self, state: Any) -> Any:
        return self.learn

    def collect(self, state: LearnerState) -> tuple[LearnerState, Collected]:
        """One rollout on the host acting with ``state.params`` (see the module docstring): the
        advanced state (carry, key, timestep) and the :class:`~stoixlite.ppo.learner.Collected`
        of the JAX rollout. The first rollout of a resumed run resets the envs first."""
        vector = self.vector
        assert vector is not None and vector.timestep is not None
        if not self._collecting:  # the first rollout of this process
            self._collecting = True
            update = int(state.update_step)
            if update:  # resumed: the envs restart with seeds of their own
                vector.reset(self.train_seeds(update))
        carry, key, timestep, data = self.rollout(state.params, state.carry, state.key)
        return state.replace(carry=carry, key=key, timestep=timestep), data

    def rollout(
        self, params: Any, carry: Any, key: jax.Array, stop: threading.Event | None = None
    ) -> tuple[Any, jax.Array, Any, Collected]:
        """``rollout_length`` steps of the training vector from its current timestep, acting with
        ``params`` from ``carry`` (leaves ``[N, ...]``) and ``key`` (one split per step):
        ``(carry after the last step, key, that step's timestep on the device, Collected)``, the
        trajectory ``[T, N, ...]`` holding the log-probs and values of ``params``, and the
        training sequences' carries and bootstrap values computed with ``params`` from the
        carries it produced. ``stop`` (the actor thread's) is checked before every step
        (:func:`~stoixlite.run.actor.check_stop`)."""
        vector = self.vector
        assert vector is not None and vector.timestep is not None
        initial, ts = carry, vector.timestep
        device_ts = to_device(ts)
        steps, log_probs, values, carries = [], [], [], []
        for _ in range(self.ppo.rollout_length):
            check_stop(stop)
            carry, action, extras, key = self._policy(params, carry, device_ts, key, False)
            action = np.asarray(action)
            nxt = vector.step(action)
            steps.append(
                (
                    ts.observation,
                    ts.step_type != MID,
                    action,
                    nxt.reward,
                    nxt.discount,
                    nxt.step_type == LAST,
                    nxt.extras["next_obs"],
                    nxt.extras["episode_return"],
                    nxt.extras["episode_length"],
                )
            )
            log_probs.append(extras["log_prob"])
            values.append(extras["value"])
            carries.append(carry)
            ts, device_ts = nxt, to_device(nxt)
        obs, start, action, reward, discount, last, next_obs, ep_return, ep_length = (
            np.stack(x) for x in zip(*steps, strict=True)
        )
        traj = Transition(
            obs=obs,
            start=start,
            action=action,
            log_prob=None,
            value=None,
            reward=reward,
            discount=discount,
            last=last,
            next_obs=next_obs,
            episode_return=ep_return,
            episode_length=ep_length,
            invalid_action=np.zeros_like(last),
        )
        data = self._collected(params, initial, traj, log_probs, values, carries)
        return carry, key, device_ts, data

    def _update(self, state: LearnerState) -> tuple[LearnerState, Metrics]:
        state, data = self.collect(state)
        return self._learn_from(state, data)

    def overlapped_update(self, state: LearnerState) -> tuple[LearnerState, Metrics]:
        """One update with acting and learning overlapped (``arch.host_overlap``).

        Rollout k comes from the actor thread started by the update that returned ``state``
        (acting with that update's starting parameters), or, when ``state`` is not the one the
        rollout in flight continues (the pipeline's first update: a new or resumed run, or a
        state from elsewhere; a rollout in flight is then discarded), from :meth:`collect` with
        ``state.params``. Then the actor thread starts rollout k+1 with ``state.params`` (a copy:
        the learner donates the state) from the carry after rollout k and the key the learner
        will leave (:func:`~stoixlite.ppo.learner.learner_keys`), and the compiled learner
        trains on rollout k. The returned state is what an update without overlap returns from
        the same rollout: the learner's result, with the carry, key and timestep that rollout
        k+1 starts from. An exception of either side is raised here after the other side
        stopped (the actor's at the next update, which waits for its rollout).
        """
        actor = self._in_flight.take(state)
        started: ActorThread[Any] | None = None
        try:
            if actor is None:
                state, data = self.collect(state)
            else:
                carry, key, timestep, data = actor.result()
                state = state.replace(carry=carry, key=key, timestep=timestep)
            acting, carry = self._copy((state.params, state.carry))
            key = self._left(state.key)
            started = ActorThread(functools.partial(self.rollout, acting, carry, key))
            new_state, metrics = self._learn_from(state, data)
        except BaseException:
            for thread in (actor, started):
                if thread is not None:
                    thread.discard()
            raise
        self._in_flight.put(started, new_state)
        return new_state, metrics

    def _learn_chunk(self, state: LearnerState) -> tuple[LearnerState, Metrics]:
        metrics = []
        for _ in range(self.ppo.updates_per_chunk):
            state, update_metrics = self.update(state)
            metrics.append(update_metrics)
        return state, _stack(metrics)

    def _evaluate(self, params: Any, hyper: Hyper, key: jax.Array) -> Metrics:
        """The JAX evaluator's episode per env (:func:`stoixlite.ppo.evaluate.make_evaluator`),
        on the evaluation vector, reset with a seed drawn from ``key`` (a host env has no
        traced params: ``hyper`` is the evaluator's argument, unused)."""
        del hyper
        assert self.eval_vector is not None
        greedy = self.config.arch.eval_greedy
        ret, length, done = self.play(self.eval_vector, params, key, greedy)
        return {
            "return": jnp.asarray(ret),
            "length": jnp.asarray(length),
            "finished": jnp.asarray(done),
        }

    def play(
        self, vector: HostVector, params: Any, key: jax.Array, greedy: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One episode per env of ``vector`` (reset with a seed drawn from ``key``), at most the
        env's time limit (else ``arch.eval_max_steps``) + 1 steps: ``(return, length,
        finished)``, each ``[num_envs]``."""
        n = vector.num_envs
        key, reset_key = jax.random.split(key)
        ts = vector.reset(int(jax.random.randint(reset_key, (), 0, 2**31 - 1)))
        carry = self.network.initialize_carry(n)
        done = np.zeros(n, bool)
        ret, length = np.zeros(n, np.float32), np.zeros(n, np.int32)
        max_steps = int((self.env.max_episode_steps or self.config.arch.eval_max_steps) + 1)
        for _ in range(max_steps):
            if done.all():
                break
            carry, action, _, key = self._policy(params, carry, to_device(ts), key, greedy)
            ts = vector.step(np.asarray(action))
            finished = (ts.step_type == LAST) & ~done
            ret = np.where(finished, ts.extras["episode_return"], ret)
            length = np.where(finished, ts.extras["episode_length"], length)
            done |= finished
        return ret, length, done

    def new_vector(self, num_envs: int) -> HostVector:
        """Another vector of this run's env and settings (e.g. for the CLI evaluator)."""
        assert self.vector is not None
        (vector,) = start_vectors(self.vector.source, (num_envs,), self.vector.options)
        return vector

    def close(self) -> None:
        """Discard the rollout in flight (if any), then end the envs (and their worker
        processes)."""
        _close(self._in_flight, *(v for v in (self.vector, self.eval_vector) if v is not None))


def start_vectors(
    source: HostSource, sizes: tuple[int, ...], options: dict[str, Any]
) -> list[HostVector]:
    """One :class:`HostVector` of ``source`` per size, each started whole: a Ctrl-C while its
    workers start is acted on once they have (a worker whose start was cut could not be ended);
    on an error or a Ctrl-C the vectors started so far are closed before it propagates."""
    vectors: list[HostVector] = []
    try:
        for num_envs in sizes:
            with ctrl_c_deferred():
                vectors.append(HostVector(source, num_envs, **options))
    except BaseException:
        for vector in vectors:
            vector.close()
        raise
    return vectors


def build_host_run(plan: RunPlan) -> HostRun:
    """The :class:`HostRun` of ``plan`` (a host env; one seed, one device: the config checks)."""
    cfg, ppo = plan.config, plan.ppo
    env_cfg = cfg.env
    source = host_source(env_cfg.name, env_cfg.difficulty, dict(env_cfg.kwargs))
    options = dict(
        asynchronous=env_cfg.vector == "async",
        obs_augment=env_cfg.obs_augment,
        obs_prev_reward=env_cfg.obs_prev_reward,
        obs_prev_action=env_cfg.obs_prev_action,
    )
    vectors = start_vectors(source, (ppo.num_envs, cfg.arch.num_eval_envs), options)
    vector, eval_vector = vectors
    try:  # an error, or Ctrl-C, before the run owns the vectors: they end here
        hyper = run_hyper(plan, vector.specs)
        run = HostRun(
            plan=plan,
            hyper=hyper,
            env=vector.specs,
            network=make_network(cfg.network, vector.specs),
            optimizer=make_optimizer(ppo, hyper),
            update=None,  # type: ignore[arg-type]  (set by __post_init__)
            learn_chunk=None,  # type: ignore[arg-type]
            evaluate=None,  # type: ignore[arg-type]
            placement=Placement.of(plan),
            vector=vector,
            eval_vector=eval_vector,
        )
    except BaseException:
        for made in vectors:
            made.close()
        raise
    # The envs end with the run (a rolled-back run is rebuilt), or at the latest at exit.
    weakref.finalize(run, _close, run._in_flight, vector, eval_vector)
    return run


def _close(in_flight: InFlight, *vectors: HostVector) -> None:
    in_flight.discard()  # the actor steps the training vector: stopped before it closes
    for vector in vectors:
        vector.close()
