"""Invalid actions (docs/envs.md, "Invalid actions"): every registered env at every difficulty.

An invalid action (negative, ``n``, huge; NaN for a Box) must never raise in the compiled path,
must pay no more than the worst valid action from the same state, and must give a finite,
well-formed next state. The reference is the env itself: the same state is stepped with every
valid action (a Box: a grid of torques across the bounds).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from slow_envs import SLOW_PROBES

from stoixlite.envs import available_envs, make
from stoixlite.envs.actions import (
    InvalidActionError,
    find_invalid_action_error,
    is_valid_action,
)
from stoixlite.envs.popgym import DIFFICULTIES
from stoixlite.envs.registry import missing_modules
from stoixlite.envs.types import LAST, MID, Box, Discrete
from stoixlite.envs.wrappers import make_batched_env, wrap_env

INT32_MAX = np.iinfo(np.int32).max
INT32_MIN = np.iinfo(np.int32).min


def _configs() -> list:
    """(name, difficulty) of every env at every level; the envs of :data:`SLOW_PROBES` marked
    slow (full Craftax's probe compiles for about 3 minutes on a 2-core CPU, an arcade game's in
    12 s), and so are the POPGym
    ports' medium and hard levels: each level compiles its own probe (1-2.5 s of CPU), and a
    level changes the sizes (board, maze, deck), not the code that handles an invalid action,
    which the easy level runs by default."""
    out: list = []
    for name in available_envs():
        levels = DIFFICULTIES if name.startswith("popgym/") else (None,)
        for level in levels:
            slow = name in SLOW_PROBES or level not in (None, DIFFICULTIES[0])
            out.append(pytest.param(name, level, marks=[pytest.mark.slow] if slow else []))
    return out


def _make(name: str, difficulty: str | None):
    for module in missing_modules(name):
        pytest.importorskip(module, reason=f"{name} needs the optional extra '.[{module}]'")
    return make(name, difficulty=difficulty) if difficulty else make(name)


def _actions(space) -> tuple[np.ndarray, np.ndarray]:
    """``(valid, invalid)`` action batches for ``space``."""
    if isinstance(space, Discrete):
        valid = np.arange(space.n, dtype=np.int32)
        invalid = np.array([-1, space.n, space.n + 1, INT32_MAX, INT32_MIN], np.int32)
        return valid, invalid
    low = np.broadcast_to(np.asarray(space.low, np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), space.shape)
    valid = np.stack([low + (high - low) * f for f in np.linspace(0.0, 1.0, 9)])
    nan = np.full((1, *space.shape), np.nan, np.float32)
    return valid.astype(np.float32), nan


def _all_finite(tree) -> jax.Array:
    """bool ``[A]``: every float leaf of a tree batched over its leading axis is finite."""
    flags = [
        jnp.all(jnp.isfinite(x).reshape(x.shape[0], -1), axis=1)
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    return jnp.all(jnp.stack(flags), axis=0)


def make_probe(env, actions: jax.Array, num_steps: int):
    """A jitted walk of ``num_steps`` steps along random valid actions (``picks``, indices into
    ``actions``) that steps the current state with *every* action of ``actions`` at each step.

    Returns per step and action: reward, all-finite flag of the next state and timestep, whether
    the observation lies within ``observation_space``, step type and discount. The walk resets
    (with a fresh key) after an episode ends.
    """
    space = env.observation_space
    low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
    step_all = jax.vmap(env.step, in_axes=(None, 0))

    def body(carry, inputs):
        state, need_reset = carry
        key, pick = inputs
        state = jax.lax.cond(need_reset, lambda: env.reset(key)[0], lambda: state)
        states, ts = step_all(state, actions)
        obs = ts.observation.reshape(actions.shape[0], -1)
        in_bounds = jnp.all((obs >= low.reshape(-1)) & (obs <= high.reshape(-1)), axis=1)
        out = (ts.reward, _all_finite((states, ts)), in_bounds, ts.step_type, ts.discount)
        picked = jax.tree.map(lambda x: x[pick], states)
        return (picked, ts.step_type[pick] == LAST), out

    @jax.jit
    def probe(key: jax.Array, picks: jax.Array):
        placeholder = jax.tree.map(jnp.zeros_like, jax.eval_shape(env.reset, key)[0])
        keys = jax.random.split(key, num_steps)
        return jax.lax.scan(body, (placeholder, jnp.bool_(True)), (keys, picks))[1]

    return probe


@pytest.mark.parametrize("name,difficulty", _configs())
def test_invalid_action_pays_at_most_the_worst_valid_action(name, difficulty):
    env = _make(name, difficulty)
    valid, invalid = _actions(env.action_space)
    assert not np.any(np.asarray(is_valid_action(env.action_space, jnp.asarray(invalid))))
    assert np.all(np.asarray(is_valid_action(env.action_space, jnp.asarray(valid))))
    actions = jnp.concatenate([jnp.asarray(valid), jnp.asarray(invalid)])
    num_steps, num_valid = 24, len(valid)
    picks = np.random.default_rng(0).integers(num_valid, size=num_steps)
    probe = make_probe(env, actions, num_steps)
    rewards, finite, in_bounds, step_type, discount = map(
        np.asarray, probe(jax.random.PRNGKey(7), jnp.asarray(picks))
    )
    worst_valid = rewards[:, :num_valid].min(axis=1, keepdims=True)
    # up to float rounding (the stand-in is stepped in another vectorisation of the same step,
    # stoixlite.envs.actions.worst_valid_step): two float32 ulps of the reward, at least 1e-7
    rounding = np.maximum(2 * np.spacing(np.abs(worst_valid).astype(np.float32)), 1e-7)
    bad = np.argwhere(rewards[:, num_valid:] > worst_valid + rounding)
    assert bad.size == 0, [(int(t), invalid[a].tolist()) for t, a in bad]
    assert finite.all()
    # within the declared observation bounds wherever the valid actions' observations are
    # (gymnax's MemoryChain declares bounds its own observations leave)
    assert in_bounds[in_bounds[:, :num_valid].all(axis=1), num_valid:].all()
    assert np.isin(step_type, (MID, LAST)).all() and np.isin(discount, (0.0, 1.0)).all()


def _episode_return(env, action, key=0, max_steps=2000) -> tuple[float, bool]:
    """Return of an episode repeating ``action``, and whether it ended by termination."""
    state, ts = env.reset(jax.random.PRNGKey(key))
    step = jax.jit(env.step)
    total = 0.0
    for _ in range(max_steps):
        state, ts = step(state, jnp.asarray(action))
        total += float(ts.reward)
        if int(ts.step_type) == LAST:
            return total, float(ts.discount) == 0.0
    return total, False


@pytest.mark.parametrize(
    "name,difficulty,action",
    [
        ("popgym/minesweeper", "easy", 16),  # was: return 1.0
        ("popgym/battleship", "easy", 66),  # was: a win
        ("popgym/concentration", "easy", 52),  # was: counted as matches
    ],
)
def test_reported_reward_exploits_are_closed(name, difficulty, action):
    env = _make(name, difficulty)
    for key in range(3):
        total, terminated = _episode_return(env, action, key=key)
        assert total < 0.0 and not terminated, (key, total)


def test_silent_clamps_are_now_invalid_moves():
    # (each env's reset and step compiled once, not run op by op)
    # bandit arm n never pays out
    bandit = make("popgym/multiarmed_bandit", difficulty="easy")
    state, _ = jax.jit(bandit.reset)(jax.random.PRNGKey(0))
    step_with_uniform = jax.jit(bandit.step_with_uniform)
    for u in (0.0, 0.5, 0.999):
        _, ts = step_with_uniform(state, jnp.int32(10), jnp.float32(u))
        assert float(ts.reward) < 0 and np.argmax(ts.observation) == 0
    # CartPole: an action other than 0/1 pushes neither way and earns nothing
    cart = make("popgym/position_only_cartpole", difficulty="easy")
    state, _ = jax.jit(cart.reset)(jax.random.PRNGKey(0))
    step = jax.jit(cart.step)
    pushed = {a: np.asarray(step(state, jnp.int32(a))[0].physics) for a in (0, 1, 2, -1)}
    np.testing.assert_array_equal(pushed[2], pushed[-1])
    assert not np.array_equal(pushed[2], pushed[0]) and not np.array_equal(pushed[2], pushed[1])
    assert float(step(state, jnp.int32(2))[1].reward) == 0.0
    # labyrinth: -1 and 4 stay in place, 4 shows NONE as the previous action
    maze = make("popgym/labyrinth_explore", difficulty="easy")
    state, _ = jax.jit(maze.reset)(jax.random.PRNGKey(0))
    step = jax.jit(maze.step)
    for action in (-1, 4, INT32_MAX):
        new_state, ts = step(state, jnp.int32(action))
        np.testing.assert_array_equal(new_state.position, state.position)
        np.testing.assert_array_equal(new_state.explored, state.explored)
        assert np.asarray(ts.observation)[-5:].tolist() == [0, 0, 0, 0, 1]


def test_box_actions_out_of_bounds_are_clipped():
    for name in ("popgym/position_only_pendulum", "gymnax/Pendulum-v1"):
        env = make(name)
        state, _ = env.reset(jax.random.PRNGKey(1))
        for big, bound in ((1e6, 2.0), (np.inf, 2.0), (-1e6, -2.0), (-np.inf, -2.0)):
            got = env.step(state, jnp.array([big], jnp.float32))
            want = env.step(state, jnp.array([bound], jnp.float32))
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("obs_augment", [False, True])
def test_wrappers_flag_invalid_actions(obs_augment):
    raw = make("popgym/minesweeper", difficulty="easy")
    env = make_batched_env(raw, 3, obs_augment=obs_augment)
    state, ts = env.reset(jax.random.PRNGKey(0))
    assert ts.extras["invalid_action"].dtype == bool and not np.any(ts.extras["invalid_action"])
    state, ts = jax.jit(env.step)(state, jnp.array([3, 16, -1], jnp.int32))
    np.testing.assert_array_equal(ts.extras["invalid_action"], [False, True, True])
    if obs_augment:  # an invalid action's previous-action one-hot is all zeros
        width = raw.num_obs
        prev = np.asarray(ts.extras["next_obs"])[:, width : width + raw.action_space.n]
        np.testing.assert_array_equal(prev.sum(axis=1), [1, 0, 0])


def test_obs_augment_encodes_box_actions_as_applied():
    env = wrap_env(make("popgym/position_only_pendulum"), obs_augment=True)
    state, _ = env.reset(jax.random.PRNGKey(0))
    for action, shown in ((5.0, 2.0), (-np.inf, -2.0), (np.nan, 0.0), (0.5, 0.5)):
        _, ts = env.step(state, jnp.array([action], jnp.float32))
        assert float(ts.extras["next_obs"][2]) == shown
        assert bool(ts.extras["invalid_action"]) == bool(np.isnan(action))


def test_checked_mode_raises_naming_env_action_and_range():
    raw = make("popgym/battleship", difficulty="easy")
    env = make_batched_env(raw, 4, obs_augment=True, check_actions=True)
    state, _ = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    step(state, jnp.array([0, 1, 63, 5], jnp.int32))  # valid actions pass
    with pytest.raises(Exception) as info:
        jax.block_until_ready(step(state, jnp.array([0, 66, 2, -3], jnp.int32)))
    message = find_invalid_action_error(info.value)
    assert message is not None, str(info.value)
    assert "popgym/battleship(difficulty='easy')" in message
    assert "invalid action 66" in message and "integers 0..63" in message
    assert "2 invalid" in message
    assert "\n" not in message


def test_checked_mode_unbatched_box():
    env = wrap_env(make("gymnax/Pendulum-v1"), obs_augment=False, check_actions=True)
    state, _ = env.reset(jax.random.PRNGKey(0))
    env.step(state, jnp.array([9.0], jnp.float32))  # out of bounds: clipped, allowed
    with pytest.raises(Exception) as info:
        jax.block_until_ready(env.step(state, jnp.array([np.nan], jnp.float32)))
    message = find_invalid_action_error(info.value)
    assert message is not None and "gymnax/Pendulum-v1" in message and "without NaN" in message
    assert find_invalid_action_error(InvalidActionError("x")) == "x"
    assert find_invalid_action_error(RuntimeError("unrelated")) is None


def test_gymnax_invalid_action_is_the_worst_valid_action():
    env = make("gymnax/MemoryChain-bsuite")
    state, ts = env.reset(jax.random.PRNGKey(3))
    step = jax.jit(env.step)
    while True:  # walk to the rewarded (last) step, comparing every step
        outcomes = [step(state, jnp.int32(a)) for a in range(env.action_space.n)]
        worst = int(np.argmin([float(o[1].reward) for o in outcomes]))
        invalid = step(state, jnp.int32(7))
        for a, b in zip(jax.tree.leaves(invalid), jax.tree.leaves(outcomes[worst]), strict=True):
            np.testing.assert_array_equal(a, b)
        state, ts = outcomes[0]
        if int(ts.step_type) == LAST:
            break
    assert isinstance(env.action_space, Discrete) and not isinstance(env.action_space, Box)


class _FixedActions:
    """A stand-in policy distribution: samples the given per-env actions."""

    def __init__(self, actions: jax.Array):
        self.actions = actions

    def sample(self, key: jax.Array) -> jax.Array:
        return self.actions[None]

    def log_prob(self, action: jax.Array) -> jax.Array:
        return jnp.zeros(action.shape, jnp.float32)


def test_rollout_counts_invalid_actions_in_train_metric():
    from stoixlite.ppo.learner import episode_metrics
    from stoixlite.ppo.rollout import rollout
    from stoixlite.ppo.types import LearnerState

    num_envs, length = 4, 5
    env = make_batched_env(make("popgym/repeat_first"), num_envs, obs_augment=True)
    env_state, timestep = env.reset(jax.random.PRNGKey(0))
    actions = jnp.array([0, 4, 1, -1], jnp.int32)  # two of the four envs act out of range

    def apply_fn(params, carry, obs, start):
        return carry, (_FixedActions(actions), jnp.zeros(obs.shape[:2], jnp.float32))

    state = LearnerState(
        params=None,
        opt_state=None,
        env_state=env_state,
        timestep=timestep,
        carry=jnp.zeros((num_envs,)),
        key=jax.random.PRNGKey(1),
        update_step=jnp.int32(0),
    )
    _, traj, *_ = rollout(apply_fn, env, state, length)
    expected = np.broadcast_to([False, True, False, True], (length, num_envs))
    np.testing.assert_array_equal(traj.invalid_action, expected)
    assert float(episode_metrics(traj)["train/invalid_actions"]) == 0.5


def test_evaluate_plays_in_checked_mode():
    from types import SimpleNamespace

    from conftest import compose_config

    from stoixlite.config.parse import parse
    from stoixlite.config.plan import plan_run
    from stoixlite.evaluate import evaluate_port

    cfg = parse(compose_config(["env=popgym/battleship", "env.difficulty=easy"]))
    actions = jnp.array([3, 64], jnp.int32)  # the second eval env's action is out of range

    class _Greedy(_FixedActions):
        def mode(self) -> jax.Array:
            return self.actions[None]

    def apply_fn(params, carry, obs, start):
        return carry, (_Greedy(actions), jnp.zeros(obs.shape[:2], jnp.float32))

    network = SimpleNamespace(apply=apply_fn, initialize_carry=lambda n: jnp.zeros((n,)))
    run = SimpleNamespace(config=cfg, network=network, hyper=plan_run(cfg).hyper.as_arrays())
    with pytest.raises(Exception) as info:
        evaluate_port(run, None, 2, greedy=True, seed=0)
    message = find_invalid_action_error(info.value)
    assert message is not None and "invalid action 64 (env index (1,))" in message, info.value


def _leaves_equal(a, b) -> None:
    is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)  # noqa: E731
    data = lambda t: jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, t)  # noqa: E731
    for x, y in zip(jax.tree.leaves(data(a)), jax.tree.leaves(data(b)), strict=True):
        if jnp.issubdtype(x.dtype, jnp.floating):  # batched physics may round differently
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(x, y)


def scalar_conds(fn, *args) -> list[int]:
    """The branch counts of the ``cond``s with a scalar predicate anywhere in ``fn``'s jaxpr
    (a ``cond`` batched by ``vmap`` becomes a ``select`` and is not among them)."""
    found: list[int] = []

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "cond" and eqn.invars[0].aval.shape == ():
                found.append(len(eqn.params["branches"]))
            for value in eqn.params.values():
                for inner in value if isinstance(value, tuple | list) else (value,):
                    inner = getattr(inner, "jaxpr", inner)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def test_worst_valid_step_is_batch_aware_under_nested_vmap():
    """Under vmap (seeds x envs) the gymnax adapter's step equals the per-env step, with valid
    and invalid actions in the batch, and the worst-valid sweep sits behind one cond on the whole
    batch (a scalar predicate), not a select that computes it every step."""
    env = make("gymnax/CartPole-v1")
    keys = jax.random.split(jax.random.PRNGKey(3), 6).reshape(2, 3, 2)
    states, _ = jax.vmap(jax.vmap(env.reset))(keys)
    step = jax.jit(jax.vmap(jax.vmap(env.step)))
    for actions in ([[0, 1, 1], [1, 0, 1]], [[0, 1, 7], [1, -1, 1]]):
        actions = jnp.asarray(actions, jnp.int32)
        out = step(states, actions)
        for i in range(2):
            for j in range(3):
                one = jax.jit(env.step)(
                    jax.tree.map(lambda x, i=i, j=j: x[i, j], states), actions[i, j]
                )
                _leaves_equal(jax.tree.map(lambda x, i=i, j=j: x[i, j], out), one)
    assert 2 in scalar_conds(jax.vmap(jax.vmap(env.step)), states, actions)
