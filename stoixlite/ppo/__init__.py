"""The compiled recurrent-PPO core: rollout, GAE, loss, update step and learn chunk."""
