"""What a run is: the :class:`Run` record (config, plan, env stack, network, optimiser, the pure
PPO functions of one seed and the programs compiled over all its seeds), the env-stack and
network factories, and :func:`over_seeds`, the one place where ``vmap`` over the seed axis,
``jit``, donation and the device layout are applied.

A run trains ``arch.num_seeds`` seeds in one program, and a single seed is the trivial case (no
seed axis, the plain jitted function). Seed k uses ``arch.seed + k`` and derives its keys exactly
like a single-seed run with that seed, so seed k of a multi-seed run reproduces it. On several
devices (``arch.num_devices``) the same programs are compiled with the shardings of
:class:`~stoixlite.run.sharding.Placement`: envs split over devices, seeds x devices.
:mod:`stoixlite.run.build` builds a :class:`Run` from its plan; :mod:`stoixlite.run.host` builds
the run of a host env, a :class:`Run` whose envs step on the host.

The axis is the run's lanes: its seeds, or for a fused group
(:func:`stoixlite.run.build.build_group`) members x seeds, lane ``m * S + s`` being seed ``s`` of
member ``m``, with the member's :class:`~stoixlite.ppo.types.Hyper` values in its lanes of the
learner state. A run alone is the group of its own plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from stoixlite.config.plan import RunPlan
from stoixlite.config.schema import EnvConfig, NetworkConfig, RunConfig
from stoixlite.envs.registry import make
from stoixlite.envs.types import Environment
from stoixlite.envs.wrappers import make_batched_env
from stoixlite.networks.actor_critic import ActorCritic
from stoixlite.ppo.episode_window import empty_window
from stoixlite.ppo.finite import all_finite
from stoixlite.ppo.types import Hyper, LearnerState, PPOConfig
from stoixlite.run.member_parts import MemberParts, members_axis, part_sizes, usable_cores
from stoixlite.run.sharding import Placement

Metrics = dict[str, jax.Array]


def make_env_stack(
    env_cfg: EnvConfig,
    num_envs: int,
    check_actions: bool | None = None,
    branching: str = "skip",
) -> Environment:
    """The vmapped, auto-resetting env stack for ``num_envs`` copies of ``env_cfg.name``.

    ``check_actions`` (default: ``env_cfg.check_actions``) raises on an out-of-range action
    instead of playing it as an invalid move (docs/envs.md, "Invalid actions"). ``branching``:
    the run plan's (``PPOConfig.branching``: ``skip`` or ``mask``, see
    :class:`~stoixlite.envs.wrappers.VmapWrapper`).
    """
    return make_batched_env(
        make(env_cfg.name, **env_cfg.factory_kwargs),
        num_envs,
        obs_augment=env_cfg.obs_augment,
        obs_prev_reward=env_cfg.obs_prev_reward,
        obs_prev_action=env_cfg.obs_prev_action,
        check_actions=env_cfg.check_actions if check_actions is None else check_actions,
        branching=branching,
    )


def make_network(net: NetworkConfig, env: Environment) -> ActorCritic:
    """The actor-critic for ``env``'s action space from the ``network`` config group."""
    return ActorCritic(
        action_space=env.action_space,
        memory_name=net.name,
        memory_kwargs=dict(net.memory),
        embed_size=net.embed_size,
        encoder_layers=net.encoder_layers,
        head_size=net.head_size,
        head_layers=net.head_layers,
        activation=net.activation,
        shared_memory=net.shared_memory,
        encoder_type=net.encoder,
        set_layout=getattr(env.unwrapped, "set_layout", None),
        set_pooling=net.set_pooling,
        cnn_channels=net.cnn_channels,
        cnn_kernels=net.cnn_kernels,
        cnn_strides=net.cnn_strides,
        cnn_slice_frames=net.cnn_slice_frames,
    )


def make_raw_env(cfg: RunConfig) -> Environment:
    """The unwrapped env of ``cfg`` (its params: the config's)."""
    return make(cfg.env.name, **cfg.env.factory_kwargs)


def run_hyper(plan: RunPlan, env: Environment) -> Hyper:
    """The :class:`~stoixlite.ppo.types.Hyper` of a run: its plan's values and ``env``'s
    traceable params, as float32 arrays."""
    return plan.hyper.replace(env=env.traceable_params()).as_arrays()


def over_seeds(
    fn: Callable,
    num_seeds: int,
    donate: bool = False,
    in_shardings: Any = None,
    out_shardings: Any = None,
) -> Callable:
    """``fn`` jitted for ``num_seeds`` lanes (seeds, or members x seeds): ``vmap``-ped over a
    leading lane axis when ``num_seeds > 1``; ``donate`` donates the first argument;
    ``in_shardings`` and ``out_shardings`` (``None``: default placement) lay the arguments and
    results out on devices."""
    batched = fn if num_seeds == 1 else jax.vmap(fn)
    layout = {}
    if in_shardings is not None:
        layout = {"in_shardings": in_shardings, "out_shardings": out_shardings}
    return jax.jit(batched, donate_argnums=0 if donate else (), **layout)


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(key, subkey)``: one split of ``key`` (the host key's step between chunks)."""
    both = jax.random.split(key)
    return both[0], both[1]


@dataclass
class Run:
    """One run: its plan (the config and what it means, :class:`~stoixlite.config.plan.RunPlan`),
    env stack, network, optimiser, the pure PPO functions of one seed
    (``update``, ``learn_chunk``, ``evaluate``) and the compiled programs over all its lanes
    (``learn``: learner state donated; ``evaluator``; ``split`` of the host keys;
    ``params_finite``: one flag, every parameter of every lane finite, checked after each chunk;
    ``lanes_finite``: one flag per lane; ``split_members`` (with ``member_lanes``, its program)
    and ``put_member``: a member's lanes out of and into a group's state), laid out on the
    devices of ``placement``.
    ``envs_on_host``: the envs step on the host (:mod:`stoixlite.run.host`), not inside the
    compiled programs. ``hyper``: the run's :class:`~stoixlite.ppo.types.Hyper` values;
    ``members``: the plans of a fused group (empty for a run alone, the group of its own plan),
    ``member_hypers`` their values; ``learn`` and ``evaluator`` compute a group's members in one
    batch or one after another (:func:`members_axis`)."""

    envs_on_host: ClassVar[bool] = False
    plan: RunPlan
    hyper: Hyper  # the values of one seed's program inputs (float32 arrays, run_hyper)
    env: Environment
    network: ActorCritic
    optimizer: optax.GradientTransformation
    update: Callable[[LearnerState], tuple[LearnerState, Metrics]]
    learn_chunk: Callable[[LearnerState], tuple[LearnerState, Metrics]]
    evaluate: Callable[[Any, Hyper, jax.Array], Metrics]
    placement: Placement
    members: tuple[RunPlan, ...] = ()
    member_hypers: tuple[Hyper, ...] = ()
    learn: Callable[[Any], tuple[Any, Metrics]] = field(init=False)
    evaluator: Callable[[Any, Hyper, jax.Array], Metrics] = field(init=False)
    split: Callable[[jax.Array], tuple[jax.Array, jax.Array]] = field(init=False)
    params_finite: Callable[[Any], jax.Array] = field(init=False)
    lanes_finite: Callable[[Any], jax.Array] = field(init=False)
    split_members: Callable[[Any], list[Any]] = field(init=False)
    member_lanes: Callable[[Any, Any], Any] = field(init=False)  # one member's (index an input)
    put_member: Callable[..., tuple[Any, jax.Array]] = field(init=False)
    compiled_learn: Any = field(init=False, default=None)  # ``learn`` compiled ahead of time
    # Programs compiled ahead of time (and the memory estimate, run/footprint.py), shared by the
    # copies of a cached run (same programs).
    compiled: dict[str, Any] = field(init=False, default_factory=dict)
    state_shardings: Any = field(init=False, default=None)  # of the learner state (None: 1 device)

    def __post_init__(self) -> None:
        lanes, place = self.num_lanes, self.placement
        rep = place.replicated
        if place.mesh is not None:
            self.state_shardings = place.state_shardings(jax.eval_shape(self.initial_states))
        shardings = self.state_shardings
        self.learn = over_seeds(self.learn_chunk, lanes, True, (shardings,), (shardings, rep))
        members, seeds = max(len(self.members), 1), self.config.arch.num_seeds
        self.evaluator = over_seeds(self.evaluate, lanes, False, (rep, rep, rep), rep)
        if members > 1 and members_axis(self.plan.devices[0].platform, place.mesh) == "parts":
            sizes = part_sizes(members, usable_cores())
            self.learn = MemberParts(self.learn_chunk, sizes, seeds, donate=True)
            self.evaluator = MemberParts(self.evaluate, sizes, seeds, donate=False)
        self.split = over_seeds(split_key, lanes, False, (rep,), rep)
        self.params_finite = over_seeds(all_finite, 1)  # one flag over all lanes (no vmap)
        self.lanes_finite = over_seeds(all_finite, lanes, False, (rep,), rep)
        self.member_lanes = jax.jit(partial(_member_lanes, seeds=seeds))
        self.split_members = partial(
            _split_members, members=members, seeds=seeds, lanes=self.member_lanes
        )
        self.put_member = jax.jit(
            partial(_put_member, seeds=seeds),
            donate_argnums=(0, 1),
            **({} if place.mesh is None else {"out_shardings": (shardings, rep)}),
        )

    @property
    def member_configs(self) -> tuple[RunConfig, ...]:
        """The configs of the runs trained together: the group's members, or the run's own."""
        return tuple(plan.config for plan in self.members) or (self.config,)

    @property
    def num_lanes(self) -> int:
        """Members x seeds: the leading axis of the learner state when above 1."""
        return max(len(self.members), 1) * self.config.arch.num_seeds

    def lane_hypers(self) -> list[Hyper]:
        """The :class:`~stoixlite.ppo.types.Hyper` values of each lane, in lane order."""
        hypers = self.member_hypers or (self.hyper,)
        return [h for h in hypers for _ in range(self.config.arch.num_seeds)]

    def lane_hyper(self) -> Hyper:
        """The :class:`~stoixlite.ppo.types.Hyper` values of every lane (``[L]`` when L > 1)."""
        lanes = self.lane_hypers()
        return lanes[0] if len(lanes) == 1 else _stack_lanes(lanes)

    @property
    def config(self) -> RunConfig:
        return self.plan.config

    @property
    def ppo(self) -> PPOConfig:
        return self.plan.ppo

    @property
    def steps_per_update(self) -> int:
        return self.plan.steps_per_update

    @property
    def steps_per_chunk(self) -> int:
        return self.plan.steps_per_chunk

    def init_state(self, key: jax.Array, hyper: Hyper) -> LearnerState:
        """Fresh learner state of one seed from its init ``key``: initial params, optimiser,
        envs reset with ``hyper.env`` (the env's traced params) and carries, and ``hyper`` (the
        seed's :class:`~stoixlite.ppo.types.Hyper` values, e.g. :attr:`hyper`; traced or not)."""
        key, net_key, env_key = jax.random.split(key, 3)
        env_state, timestep = self.reset_envs(env_key, hyper.env)
        carry = self.network.initialize_carry(self.ppo.num_envs)
        params = self.network.init(
            net_key, carry, timestep.observation[None], jnp.ones((1, self.ppo.num_envs), bool)
        )
        state = LearnerState(
            params=params,
            opt_state=self.optimizer.init(params),
            env_state=env_state,
            timestep=timestep,
            carry=carry,
            key=key,
            update_step=jnp.asarray(0, jnp.int32),
            episodes=empty_window(),
            hyper=hyper,
        )
        return _distinct_buffers(state)

    def reset_envs(self, key: jax.Array, env_params: dict[str, Any]) -> tuple[Any, Any]:
        """``(env state, first timesteps)`` of the training envs, reset with ``env_params``
        (``Hyper.env``) (the host envs' run replaces it, :mod:`stoixlite.run.host`)."""
        return self.env.with_params(env_params).reset(key)

    def _keys(self) -> tuple[jax.Array, jax.Array]:
        """``(host keys, init keys)``: ``key, init_key = split(PRNGKey(seed))`` of every lane's
        seed (stacked ``[L, 2]`` when L > 1)."""
        seeds = [seed for cfg in self.member_configs for seed in cfg.arch.seeds]
        pairs = [jax.random.split(jax.random.PRNGKey(seed)) for seed in seeds]
        if len(pairs) == 1:
            return pairs[0][0], pairs[0][1]
        return jnp.stack([p[0] for p in pairs]), jnp.stack([p[1] for p in pairs])

    def initial_states(self) -> LearnerState:
        """Every lane's :meth:`init_state` with its own values (leading lane axis when L > 1),
        computed eagerly (or traced: ``jax.eval_shape`` of it gives the state's shapes)."""
        init_keys = self._keys()[1]
        if self.num_lanes == 1:
            return self.init_state(init_keys, self.hyper)
        return _distinct_buffers(jax.vmap(self.init_state)(init_keys, self.lane_hyper()))

    def _compiled_initial_states(self) -> LearnerState:
        """:meth:`initial_states` computed by one compiled program per seed instead of eagerly (run
        eagerly, the network's init alone compiles ~150 single operations), compiled without
        XLA's backend optimisations (it runs once). Per seed, not vmapped over the seeds: a
        vmapped orthogonal init is a batched LAPACK QR, which waits for the XLA CPU thread pool
        from inside it and deadlocked on 2 cores (jaxlib 0.10, framestack/elman with 3 seeds).
        Each lane's call takes its own values (:meth:`lane_hypers`: a fused member's lanes reset
        their envs with its env params), so the lanes share the program."""
        init_keys, hypers = self._keys()[1], self.lane_hypers()
        if self.num_lanes == 1:
            return _unaliased(self._compiled_init(init_keys, self.hyper)(init_keys, self.hyper))
        init = self._compiled_init(init_keys[0], hypers[0])
        return _stack_lanes([init(k, h) for k, h in zip(init_keys, hypers, strict=True)])

    def _compiled_init(self, key: jax.Array, hyper: Hyper) -> Any:
        """:meth:`init_state` compiled for one seed's ``key`` and
        :class:`~stoixlite.ppo.types.Hyper` values ``hyper``, both inputs of the program (its
        shapes and dtypes only are read here): one compile serves every lane of the run and is
        shared (``compiled``) by the copies of a cached run, the jobs of a multirun process with
        one compile key whatever their seeds and values (a sweep over ``system.lr``)."""
        if "init" not in self.compiled:
            one = jax.jit(self.init_state).lower(key, hyper)
            self.compiled["init"] = one.compile(_RUN_ONCE_COMPILER_OPTIONS)
        return self.compiled["init"]

    def init(self) -> tuple[Any, jax.Array]:
        """Initial learner state and host PRNG key of every seed (leading seed axis when S > 1),
        laid out on the run's devices."""
        state, key = self._compiled_initial_states(), self._keys()[0]
        place = self.placement
        return place.put(state, self.state_shardings), place.put(key, place.replicated)

    def compile_learn(self, state: Any) -> Any:
        """``learn`` compiled ahead of time for ``state`` (once for the runs of one compile key,
        :func:`build_run`)."""
        if self.compiled_learn is None:
            if "learn" not in self.compiled:
                self.compiled["learn"] = self.learn.lower(state).compile()
            self.compiled_learn = self.compiled["learn"]
        return self.compiled_learn

    def compile_programs(
        self, state: Any, key: jax.Array, also: Sequence[tuple[Callable, tuple[Any, ...]]] = ()
    ) -> Any:
        """Compile every program of a chunk for ``state`` and host ``key``; returns the compiled
        ``learn``. The small programs (``evaluator``, ``split``, ``params_finite``, and the
        caller's jitted programs with their arguments in ``also``) compile in background threads
        while ``learn`` compiles here (XLA compiles release the GIL), into the jit caches their
        later calls hit; their compile time overlaps ``learn``'s (on 2 cores it gains little:
        XLA's compile of ``learn`` uses both).
        """
        small = [
            (self.evaluator, (state.params, state.hyper, key)),  # key: the eval keys' shape
            (self.split, (key,)),
            (self.params_finite, (state.params,)),
        ]
        small.extend(also)
        with ThreadPoolExecutor(max_workers=len(small)) as pool:
            pending = [pool.submit(lambda f=f, a=a: f.lower(*a).compile()) for f, a in small]
            learn = self.compile_learn(state)
            for future in pending:
                future.result()
        return learn

    def close(self) -> None:
        """End what the run holds outside its programs (nothing here; a host run's envs and
        actor thread, :mod:`stoixlite.run.host`). The training loop calls it when it is done with
        the run."""

    def seed_params(self, params: Any) -> list[Any]:
        """Per-lane parameter pytrees (the leading lane axis removed when L > 1)."""
        if self.num_lanes == 1:
            return [params]
        return [jax.tree.map(lambda x, k=k: x[k], params) for k in range(self.num_lanes)]


# XLA options for programs that run once (initialisation): compile time over run time.
_RUN_ONCE_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}


@jax.jit
def _stack_lanes(trees: list[Any]) -> Any:
    """One tree of the lanes' ``trees`` (a leading lane axis on each leaf, lanes in order)."""
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def _member_lanes(tree: Any, index: jax.Array, seeds: int) -> Any:
    """Member ``index``'s part of ``tree`` (leading lane axis): its lanes ``[S, ...]``, or
    without the axis for one seed (as a run alone has it). One program serves every member
    (``index`` is an input), where a program of every member's slices would grow with the
    group and compile for seconds."""

    def take(x: jax.Array) -> jax.Array:
        part = jax.lax.dynamic_slice_in_dim(x, index * seeds, seeds, 0)
        return part[0] if seeds == 1 else part

    return jax.tree.map(take, tree)


def _split_members(tree: Any, members: int, seeds: int, lanes: Callable[..., Any]) -> list[Any]:
    """``tree`` (leading lane axis when members x seeds > 1) as one tree per member:
    ``lanes(tree, m)`` (:func:`_member_lanes`, jitted) of each member ``m``."""
    if members * seeds == 1:
        return [tree]
    return [lanes(tree, np.int32(m)) for m in range(members)]


def _put_member(
    state: Any, key: jax.Array, index: jax.Array, tree: dict[str, Any], hyper: Hyper, seeds: int
) -> tuple[Any, jax.Array]:
    """``(state, key)`` of a group with member ``index``'s lanes replaced by ``tree`` (a
    checkpoint tree of that member, :func:`_split_members`'s part) and ``hyper``."""
    if seeds > 1:
        hyper = jax.tree.map(lambda h: jnp.broadcast_to(h, (seeds,)), hyper)

    def put(whole: jax.Array, part: jax.Array) -> jax.Array:
        part = part[None] if seeds == 1 else part
        return jax.lax.dynamic_update_slice_in_dim(whole, part, index * seeds, 0)

    learner = tree["learner"].replace(hyper=hyper)
    return jax.tree.map(put, state, learner), put(key, tree["host_key"])


def _distinct_buffers(tree: Any) -> Any:
    """A copy with a distinct buffer per leaf (e.g. reset's next_obs aliases its observation), so
    the state can be donated. Traced inside a program, the copies make distinct outputs; on
    concrete arrays :func:`_unaliased` copies only what needs it."""
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def _unaliased(tree: Any) -> Any:
    """``tree`` with a copy of every concrete leaf whose buffer an earlier leaf already uses
    (donation needs one buffer per leaf), the other leaves as they are. A program's outputs
    normally have their own buffers; copying every leaf eagerly (one dispatch each) cost 0.4 s
    of a run's start-up for nothing."""
    seen: set[tuple[int, ...]] = set()

    def once(x: Any) -> Any:
        buffers = tuple(shard.data.unsafe_buffer_pointer() for shard in x.addressable_shards)
        if buffers in seen:
            return jnp.array(x, copy=True)
        seen.add(buffers)
        return x

    return jax.tree.map(once, tree)
