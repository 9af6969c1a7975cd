"""stoixlite: end-to-end JAX recurrent PPO for partially observable tasks."""

__version__ = "0.1.0"
