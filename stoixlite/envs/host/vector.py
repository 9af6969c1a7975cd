"""A vector of host envs with the JAX env stack's timestep semantics, as numpy arrays.

:class:`HostVector` steps ``num_envs`` Gymnasium envs (``SyncVectorEnv``, or ``AsyncVectorEnv``
with one worker process per env) in Gymnasium's ``SAME_STEP`` autoreset mode, which is the JAX
stack's (:func:`stoixlite.envs.wrappers.wrap_env`): on the step an episode ends, the env resets
at once and the returned observation is the next episode's first, while the true final
observation comes back separately. (Gymnasium's default ``NEXT_STEP`` mode would instead spend
the following step on the reset, ignoring its action.) Every :meth:`HostVector.step` returns a
:class:`~stoixlite.envs.types.TimeStep` with leading axis ``[N]``:

* ``step_type`` LAST where the episode ended (terminated or truncated), else MID; FIRST after
  :meth:`HostVector.reset`; the start flag of the next policy step is ``step_type != MID``;
* ``reward`` float32; ``discount`` 0 where terminated (wins over a simultaneous truncation), else 1,
  so a truncation bootstraps;
* ``observation``: the next input (the new episode's first where LAST);
* ``extras``: ``next_obs`` (the true final observation where LAST, else ``observation``),
  ``truncated`` (LAST with discount 1), ``episode_return`` float32 and ``episode_length`` int32
  (of the episode so far, the finished one's where LAST; 0 after a reset).

With ``obs_augment`` the POPGym augmentation of
:class:`~stoixlite.envs.obs_augment.ObsAugmentWrapper` (previous action, optionally the previous
reward, is-first) is appended by that wrapper's own :meth:`augment`, so host and JAX observations
are the same: the first observation of an episode gets zeros and is-first 1, every other one
(the true final one included) the step's action and reward and is-first 0.

An env that raises, or a worker process that dies, raises :class:`HostEnvError` with one line.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import traceback
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stoixlite.envs.host.sources import HostEnvError, HostSource, require_gymnasium
from stoixlite.envs.host.spaces import env_action
from stoixlite.envs.obs_augment import ObsAugmentWrapper
from stoixlite.envs.types import FIRST, LAST, MID, Environment, TimeStep


class HostSpecs(Environment):
    """The specs of a host env as an :class:`~stoixlite.envs.types.Environment` (for the network
    and the config checks); it cannot be reset or stepped in JAX."""

    def __init__(self, source: HostSource):
        self.observation_space = source.observation_space
        self.action_space = source.action_space
        self.max_episode_steps = source.max_episode_steps
        self.registered_label = source.label


class HostVector:
    """``num_envs`` copies of ``source`` (see the module docstring); ``asynchronous`` runs each in
    its own worker process (:func:`worker_start_method`: never a fork of the parent, which runs
    JAX's threads)."""

    def __init__(
        self,
        source: HostSource,
        num_envs: int,
        asynchronous: bool = False,
        obs_augment: bool = False,
        obs_prev_reward: bool = False,
        obs_prev_action: bool = True,
    ):
        gym = require_gymnasium()
        self.source, self.num_envs, self.asynchronous = source, num_envs, asynchronous
        self.options = dict(
            asynchronous=asynchronous,
            obs_augment=obs_augment,
            obs_prev_reward=obs_prev_reward,
            obs_prev_action=obs_prev_action,
        )
        mode = gym.vector.AutoresetMode.SAME_STEP
        fns = [source.make] * num_envs
        vec, failure = None, None
        try:
            if asynchronous:  # made in two steps: the workers a failed start left can be ended
                vec = gym.vector.AsyncVectorEnv.__new__(gym.vector.AsyncVectorEnv)
                vec.__init__(fns, context=worker_start_method(), autoreset_mode=mode)
            else:
                vec = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
        except BaseException as err:  # an env that raised, or Ctrl-C while the workers start
            if vec is not None:
                _end_workers(vec)
                _drop_error_queue(vec)
            # The failed start's frames hold its shared buffers (and their semaphores) as long
            # as the error lives, which for a run that ends here is until the process exits.
            traceback.clear_frames(err.__traceback__)
            if not isinstance(err, Exception):
                raise
            failure = _line(err)
        if failure is not None:  # raised outside the handler: no context that holds the frames
            vec = None  # nor does this frame, which the error's traceback holds
            raise HostEnvError(f"{source.label}: the env vector did not start: {failure}")
        self._vec = vec
        self._env_space = self._vec.single_action_space
        specs: Environment = HostSpecs(source)
        self._augment = None
        if obs_augment:
            wrapper = ObsAugmentWrapper(
                specs, prev_reward=obs_prev_reward, prev_action=obs_prev_action
            )
            self._augment = jax.jit(jax.vmap(wrapper.augment))
            specs.observation_space = wrapper.observation_space
        self.specs = specs
        self._return = np.zeros(num_envs, np.float32)
        self._length = np.zeros(num_envs, np.int32)
        self.timestep: TimeStep | None = None

    @property
    def envs(self) -> list[Any]:
        """The envs of a synchronous vector (for tests and inspection)."""
        return list(self._vec.envs)

    def _obs(
        self, obs: Any, action: np.ndarray, reward: np.ndarray, first: np.ndarray
    ) -> np.ndarray:
        obs = np.asarray(obs, self.specs.observation_space.dtype if self._augment is None else None)
        if self._augment is None:
            return obs
        return np.asarray(self._augment(obs, action, reward, first))

    def reset(self, seed: int | list[int]) -> TimeStep:
        """Reset every env (env i with ``seed + i``, or ``seed[i]``); FIRST timesteps."""
        try:
            obs, _ = self._vec.reset(seed=seed)
        except Exception as err:
            raise HostEnvError(f"{self.source.label}: reset failed: {_line(err)}") from None
        n = self.num_envs
        self._return[:], self._length[:] = 0.0, 0
        first = np.ones(n, bool)
        observation = self._obs(obs, self._no_action(), np.zeros(n, np.float32), first)
        self.timestep = TimeStep(
            step_type=np.full(n, FIRST, np.int32),
            reward=np.zeros(n, np.float32),
            discount=np.ones(n, np.float32),
            observation=observation,
            extras={
                "next_obs": observation,
                "truncated": np.zeros(n, bool),
                "episode_return": self._return.copy(),
                "episode_length": self._length.copy(),
            },
        )
        return self.timestep

    def _no_action(self) -> np.ndarray:
        shape = getattr(self.specs.action_space, "shape", ())
        dtype = np.int32 if not shape else np.float32
        return np.zeros((self.num_envs, *shape), dtype)

    def step(self, action: np.ndarray) -> TimeStep:
        """Step every env with the policy's ``action [N, ...]`` (see the module docstring)."""
        try:
            with _quiet_workers():
                obs, reward, terminated, truncated, info = self._vec.step(
                    env_action(self._env_space, action)
                )
        except Exception as err:
            with _quiet_workers():
                self.close()
            what = "a worker process died" if isinstance(err, _LOST_WORKER) else "an env failed"
            raise HostEnvError(f"{self.source.label}: {what}: {_line(err)}") from None
        reward = np.asarray(reward, np.float32)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        done = terminated | truncated
        final = np.array(obs, copy=True)
        if done.any():
            for i in np.flatnonzero(done):
                final[i] = info["final_obs"][i]
        self._return += reward
        self._length += 1
        episode_return, episode_length = self._return.copy(), self._length.copy()
        self._return[done], self._length[done] = 0.0, 0
        action = np.asarray(action)
        observation = self._obs(obs, action, reward, done)
        next_obs = (
            self._obs(final, action, reward, np.zeros_like(done)) if done.any() else observation
        )
        discount = np.where(terminated, 0.0, 1.0).astype(np.float32)
        self.timestep = TimeStep(
            step_type=np.where(done, LAST, MID).astype(np.int32),
            reward=reward,
            discount=discount,
            observation=observation,
            extras={
                "next_obs": next_obs,
                "truncated": done & ~terminated,
                "episode_return": episode_return,
                "episode_length": episode_length,
            },
        )
        return self.timestep

    def close(self) -> None:
        """Close the envs (and end the worker processes); safe to call twice."""
        vec = self._vec
        if getattr(vec, "closed", False):
            return
        try:
            vec.close(terminate=True) if self.asynchronous else vec.close()
        except Exception:  # a worker died: end the others
            _end_workers(vec)
        _drop_error_queue(vec)


def _drop_error_queue(vec: Any) -> None:
    """Release the asynchronous vector's error queue once its workers are gone: its semaphores
    are freed now, not at interpreter teardown, which a process ended by Ctrl-C skips
    (:func:`stoixlite.run.signals.exit_now`; Python's resource tracker would warn of them)."""
    queue = getattr(vec, "error_queue", None)
    if queue is not None:
        queue.close()
        vec.error_queue = None


def _end_workers(vec: Any) -> None:
    """End the worker processes of an asynchronous vector that cannot be closed in order (one
    died, or it never finished starting), and mark it closed."""
    for process in getattr(vec, "processes", []):
        if process.is_alive():
            process.terminate()
    vec.processes = []  # one that never started still holds its arguments (shared buffers)
    vec.closed = True


def worker_start_method() -> str:
    """How the asynchronous vector starts its workers: ``forkserver`` where the platform has it
    (Linux, macOS), else ``spawn``; neither forks the parent, which runs JAX's threads.

    The fork server is started here (once per process) with Ctrl-C ignored, and its workers
    inherit that: a terminal's Ctrl-C, which reaches the whole foreground process group, stops
    the run once, in the parent (which closes its workers), instead of raising
    ``KeyboardInterrupt`` in every worker, at any moment of its start-up or its loop, each with
    its traceback. Under ``spawn`` the workers keep Python's Ctrl-C.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()  # handlers can only be set from the main thread
        return "forkserver"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)
    return "forkserver"


# What the asynchronous vector raises when a worker process is gone.
_LOST_WORKER = (EOFError, BrokenPipeError, ConnectionResetError)


@contextlib.contextmanager
def _quiet_workers() -> Iterator[None]:
    """Gymnasium's asynchronous vector warns (the worker's traceback, several lines) before it
    raises; the error is reported once, in :class:`HostEnvError`'s line."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"gymnasium\.vector\.async_vector_env")
        yield


def _line(err: BaseException) -> str:
    """The first line of an exception's message, with its type when it has none."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def to_device(timestep: TimeStep) -> TimeStep:
    """The policy's input of a host timestep (``jnp`` arrays; ``extras`` left out)."""
    return TimeStep(
        step_type=jnp.asarray(timestep.step_type),
        reward=jnp.asarray(timestep.reward),
        discount=jnp.asarray(timestep.discount),
        observation=jnp.asarray(timestep.observation),
    )
