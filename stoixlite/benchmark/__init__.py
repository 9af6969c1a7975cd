"""Training throughput benchmark (``python -m stoixlite.benchmark``): env steps/s (compile
excluded), compile time, peak memory.

Each row trains the real ``rec_ppo`` learn chunk (rollout + GAE + epochs x minibatches) in a fresh
subprocess, so peak memory is per row. A timed call is one compiled chunk of ``--chunk-steps``
env steps (``chunk_steps / (envs x steps)`` updates, the program training runs); each row runs a
warm-up call and ``--repeats`` timed calls, and ``--rounds R`` repeats the whole list of rows R
times, interleaved (A B A B ...), so that machine load hits every row alike. Reported per row: the
median and range of all timed calls, their number, compile seconds, peak memory (process RSS, and
on a GPU the device's own peak beside it), the memory of the compiled learn chunk (``program MiB``:
XLA's memory analysis of the compiled program, arguments + temporaries + outputs that do not reuse
an argument's buffer; what the program needs on its device on any backend, the CPU included, and
known before it runs), the final return (mean return of the training episodes of the last timed
chunk: evidence that the run learns) and the 1-minute load average during the row.
``--compile-only`` compiles each row and reports its memory without training (no SPS, no return):
for configurations too large to train on the machine at hand. Rows:

* the matrix ``--networks`` x ``--envs`` x ``--num-envs`` at ``--rollout-length`` (default: every
  registered memory model x {gymnax/CartPole-v1, popgym/repeat_previous}, 64 envs x 128 steps),
  with ``--overrides`` (Hydra overrides of every matrix row, shown in its note column: e.g. the
  encoder's settings, ``network.encoder=cnn network.cnn_channels=[32,64,64]``; the image env
  ``pixel/colour_cue`` selects the cnn encoder in its own config);
* reference rows (CartPole-v1, 4 epochs x 4 minibatches, 4 and 64 envs x 128 steps): the PPO
  set-up of PureJaxRL's ``ppo.py`` (stoixlite's own implementation in
  :mod:`stoixlite.benchmark.peers.purejaxrl_ppo`, network name ``purejaxrl_ppo``: separate
  2 x 64 tanh actor and critic, shuffled transitions) against ``network=feedforward``, and that
  of PureJaxRL's ``ppo_rnn.py`` (:mod:`~stoixlite.benchmark.peers.purejaxrl_ppo_rnn`, network
  name ``purejaxrl_ppo_rnn``: GRU 128,
  whole 128-step sequences, minibatches of envs) against gru, memoroid and mlp at width 128
  (its GRU/embedding/head size).

The two PureJaxRL pseudo-networks run only on gymnax/CartPole-v1; ``--networks`` accepts them
for the matrix rows too. ``--purejaxrl-dir DIR`` (a checkout of PureJaxRL) adds, after each of
their rows, a row that times PureJaxRL's own ``ppo.py`` or ``ppo_rnn.py`` from ``DIR`` (label
``... (checkout)``), adapted at run time to the installed libraries (see
:func:`load_purejaxrl`). Its ``train`` starts from a fresh network at every call, so the final
return of such a row is that of one chunk of training.

Usage::

    python -m stoixlite.benchmark                   # full table, JSON to benchmark_results.json
    python -m stoixlite.benchmark --reference-only --rounds 3
    python -m stoixlite.benchmark --reference-only --reference-labels "PureJaxRL ppo.py" \\
        --purejaxrl-dir ~/src/purejaxrl --rounds 3   # the reimplementation vs the original
    python -m stoixlite.benchmark --no-reference --networks purejaxrl_ppo feedforward memoroid \\
        --width 0 --num-envs 4 64 --envs gymnax/CartPole-v1 --rounds 3
    python -m stoixlite.benchmark --networks gru --envs popgym/repeat_previous --no-reference \\
        --num-envs 1024 --devices 1 2 4 8             # SPS per device count (arch.num_devices)
    python -m stoixlite.benchmark ... --devices 1 2 4 --host-devices 4
                                                       # forced CPU devices: correctness, not speed
    python -m stoixlite.benchmark --networks gru mlp --envs pixel/colour_cue --no-reference \\
        --overrides network.encoder=cnn                # image observations through the cnn
    python -m stoixlite.benchmark --networks gru --envs arcade/count_recall --no-reference \\
        --num-envs 64 128 --overrides arch.num_seeds=3 --compile-only
                                                       # the learn program's memory, not trained

Other measurements, each a tool of its own (``python -m stoixlite.benchmark TOOL --help``):
``envs`` (env throughput alone, :mod:`~stoixlite.benchmark.envs`), ``host`` (the host loop
against sb3-contrib, :mod:`~stoixlite.benchmark.host`), ``memory`` (a memory model alone,
:mod:`~stoixlite.benchmark.memory_models`) and ``profile`` (one update's phases,
:mod:`~stoixlite.benchmark.update_phases`).
"""
