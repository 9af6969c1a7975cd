"""The benchmark's peers: stoixlite's own implementations of the PPO set-ups of PureJaxRL's
``ppo.py`` (:mod:`.purejaxrl_ppo`) and ``ppo_rnn.py`` (:mod:`.purejaxrl_ppo_rnn`), timed beside
stoixlite's networks; no PureJaxRL code (``--purejaxrl-dir DIR`` times PureJaxRL's own files);
and the worker that times Stable-Baselines3's ``RecurrentPPO`` (:mod:`.sb3_recurrent_ppo`, run
as a file in a Python with sb3-contrib) beside stoixlite's host loop.
"""
