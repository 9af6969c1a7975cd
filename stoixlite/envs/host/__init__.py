"""Host environments: Python environments (any registered Gymnasium id, popgym's own numpy envs)
stepped on the host as a Gymnasium vector, for the same memory models and PPO as the JAX envs.

``env.name=gymnasium/<id>`` (``env.kwargs`` go to ``gymnasium.make``) and
``env.name=popgym_ref/<name>`` (popgym's original of the port ``popgym/<name>``, at
``env.difficulty``, with the port's observation encoding) name them. The vector
(:mod:`~stoixlite.envs.host.vector`) returns the JAX stack's :class:`~stoixlite.envs.types.
TimeStep` semantics as numpy arrays; :mod:`stoixlite.run.host` acts and learns on them.
"""

from __future__ import annotations

HOST_SUITES = ("gymnasium", "popgym_ref")

INSTALL_HINT = "pip install 'stoixlite[host]'"


def is_host_env(name: str) -> bool:
    """Whether ``name`` names a host env (``gymnasium/<id>`` or ``popgym_ref/<name>``)."""
    suite, _, rest = str(name).partition("/")
    return suite in HOST_SUITES and bool(rest)
