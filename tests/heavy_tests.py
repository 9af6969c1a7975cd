"""The tests that the default ``pytest`` leaves to ``pytest -m heavy`` (CI runs them as a step of
their own, `.ci/run`): whole files, whole tests or single cases, each with its reason. Heavy tests
are as binding as the default ones; they are the costliest minutes of the default run (subprocess
runs of the command line, trainings, the largest models' compiles), so that ``pytest`` stays within
8 minutes on a 2-core CPU. A test that is also ``slow`` runs only under ``-m slow``.

Keys are pytest node ids, or their prefixes up to a ``::`` or ``[`` boundary: a file, a test (all
its cases), one case. :func:`mark_heavy` (the suite's collection hook) fails the collection when a
key of a collected file matches nothing, so a renamed test cannot leave the list silently.
"""

from __future__ import annotations

import pytest

_SUBPROCESS_RUNS = "runs of the command line in subprocesses (faults, signals, resumes)"
_PIXELS = "pixel-encoder compiles; the smaller cases run by default"
_REFERENCE = "the largest models' compiles; the other models' references run by default"

HEAVY: dict[str, str] = {
    # Whole files: command-line runs in subprocesses, killed, resumed, damaged.
    "tests/test_faults.py": _SUBPROCESS_RUNS,
    "tests/test_ctrl_c_anytime.py": _SUBPROCESS_RUNS,
    "tests/test_checkpoint_damage.py": "a trained run's checkpoint damaged file by file",
    "tests/test_host_overlap.py": "host-env trainings with overlapped rollouts",
    "tests/test_one_plan.py": "a run and its resume through the command line",
    "tests/test_popgym_table.py": "the table runner's trainings through its command line",
    "tests/test_popgym_table_fresh.py": "a table cell trained into a fresh records folder",
    "tests/test_popgym_table_kill.py": "the table runner killed while it writes",
    "tests/test_popgym_table_fused.py": "table cells trained fused and alone through the runner",
    "tests/test_set_observations.py": "PPO updates and rule checks of the card-table env",
    "tests/test_benchmark_sweep.py::test_a_tiny_sweep_is_timed_fused_against_the_basic_launcher": (
        "two sweeps of the command line in subprocesses"
    ),
    # Tests and cases.
    "tests/test_memory_references.py::test_matches_sequential_reference[dnc]": _REFERENCE,
    "tests/test_memory_references.py::test_matches_sequential_reference[gtrxl]": _REFERENCE,
    "tests/test_memory_references.py::test_matches_sequential_reference[mamba-associative]": (
        _REFERENCE
    ),
    "tests/test_memory_references.py::test_matches_sequential_reference[fwp-associative]": (
        _REFERENCE
    ),
    "tests/test_memory_references.py::test_matches_sequential_reference[deltanet]": _REFERENCE,
    "tests/test_memory_references.py::test_matches_sequential_reference[s4d-sequential]": (
        _REFERENCE
    ),
    "tests/test_memory_references.py::test_matches_sequential_reference[mlstm-chunks-3]": (
        _REFERENCE
    ),
    "tests/test_memory_references.py::test_matches_sequential_reference[transformer]": _REFERENCE,
    "tests/test_memory_references.py::test_matches_sequential_reference[lmu]": _REFERENCE,
    "tests/test_memory_references.py::test_matches_sequential_reference"
    "[linear_attention-chunks-3]": _REFERENCE,
    "tests/test_memory_references.py::"
    "test_mamba_selective_scan_gradient_equals_autodiff_of_the_recurrence": _REFERENCE,
    "tests/test_arcade_adapter.py::test_pomdp_and_mdp_twins_share_the_game_not_the_frames": (
        "two pixel games compiled and stepped"
    ),
    "tests/test_arcade_adapter.py::test_frames_are_uint8_images_of_the_chosen_size[128]": (
        "the largest frame size; the smaller ones run by default"
    ),
    "tests/test_benchmark_scripts.py::test_profile_update_counts_the_minibatch_gradient_flops": (
        "the profiler's compiles"
    ),
    "tests/test_benchmark_scripts.py::test_purejaxrl_ppo_rnn_network_and_updates": (
        "the PureJaxRL peers trained for three updates"
    ),
    "tests/test_benchmark_scripts.py::test_purejaxrl_ppo_network_and_updates": (
        "the PureJaxRL peers trained for three updates"
    ),
    "tests/test_benchmark_scripts.py::test_purejaxrl_dir_adapts_a_checkout_at_run_time": (
        "a PureJaxRL checkout adapted and trained"
    ),
    "tests/test_experiments.py::test_multirun_with_wandb_failing_job_and_aggregate": (
        "a multirun of the command line in a subprocess"
    ),
    "tests/test_experiments.py::test_multi_seed_init_is_one_program_per_seed_and_matches_eager": (
        "multi-seed trainings compared with single-seed ones"
    ),
    "tests/test_experiments.py::test_seed_k_of_multi_seed_run_equals_single_seed_run": (
        "multi-seed trainings compared with single-seed ones"
    ),
    "tests/test_decay_scan.py::test_elements_repeated_along_the_last_state_axis": (
        "every decay model compiled at a second state size"
    ),
    "tests/test_env_wrappers.py::test_batched_lazy_reset_equals_eager_reset"
    "[popgym/labyrinth_escape]": "the largest env's resets; minesweeper's run by default",
    "tests/test_env_wrappers.py::test_lazy_reset_under_seeds_equals_each_seed_alone": (
        "the auto-reset of several seeds against each seed alone"
    ),
    "tests/test_popgym_labyrinth.py::test_equivalence_random_scripted_and_oracle"
    "[labyrinth_escape-easy]": "the escape maze against popgym; labyrinth_explore runs by default",
    "tests/test_next_values.py::test_training_with_one_step_rollouts": (
        "trainings; the bootstrap identity itself runs by default"
    ),
    "tests/test_host_envs.py::test_host_checkpoint_restores_learner_and_keys_exactly": (
        "a host-env run checkpointed and resumed"
    ),
    "tests/test_bad_inputs.py::test_a_refused_run_leaves_no_litter": (
        "refused runs of the command line in subprocesses"
    ),
    "tests/test_script_inputs.py::test_benchmark_refuses_bad_rows_before_running_any": (
        "the benchmark tool's command line in subprocesses"
    ),
    "tests/test_script_inputs.py::test_benchmark_refusal_keeps_existing_results": (
        "the benchmark tool's command line in subprocesses"
    ),
    "tests/test_invalid_actions.py::test_checked_mode_raises_naming_env_action_and_range": (
        "checked mode's host callbacks compiled for each env"
    ),
    "tests/test_invalid_actions.py::test_worst_valid_step_is_batch_aware_under_nested_vmap": (
        "the candidate sweep compiled under two vmaps"
    ),
    "tests/test_branching.py::test_skip_and_mask_collect_the_same_rollout[gru_kept_burn_in-2]": (
        "the kept-carry case of two seeds; one seed of it and gru run by default"
    ),
    "tests/test_host_envs.py::test_repeat_previous_host_equals_jax_port": (
        "popgym's own env stepped on the host against the port"
    ),
    "tests/test_cnn_encoder.py::test_ppo_update_with_cnn_on_pixels_keeps_uint8_in_the_buffers": (
        _PIXELS
    ),
    "tests/test_cnn_encoder.py::test_encoder_in_slices_equals_the_whole_batch[0]": _PIXELS,
    "tests/test_cnn_encoder.py::test_actor_critic_on_uint8_frames_has_finite_nonzero_gradients": (
        _PIXELS
    ),
    "tests/test_cnn_encoder.py::test_encoder_output_shape_is_what_conv_sizes_predicts"
    "[image1-channels1-kernels1-strides1]": _PIXELS,
    "tests/test_memoroid_scan.py::test_associative_equals_sequential[mlstm-1]": (
        "mlstm's scan at chunk size 1; its other chunk sizes run by default"
    ),
    "tests/test_memoroid_scan.py::test_linear_attention_output_is_normalised_by_accumulated_keys": (
        "a long sequence of linear attention"
    ),
    "tests/test_hostile_inputs_3.py::test_a_craftax_pixel_config_error_is_the_only_line": (
        _SUBPROCESS_RUNS
    ),
    "tests/test_hostile_inputs_3.py::test_evaluate_a_garbled_checkpoint_names_it[host/metadata]": (
        _SUBPROCESS_RUNS
    ),
    "tests/test_transitions.py::test_recurrent_transitions_differ_from_sequences": (
        "two trainings compared"
    ),
    "tests/test_transitions.py::test_transition_minibatch_equals_sequence_minibatch[mlp]": (
        "mlp's case; feedforward's runs by default"
    ),
    "tests/test_config_validation.py::test_cli_prints_single_line_and_exits_nonzero": (
        _SUBPROCESS_RUNS
    ),
    "tests/test_fused.py::test_a_diverging_member_stops_or_rolls_back_alone[rollback]": (
        "the rollback case; the stop case runs by default"
    ),
    "tests/test_multi_device.py::test_processes_configured_with_different_counts_are_refused": (
        "two processes of a multi-process run started"
    ),
    "tests/test_popgym_autoencode.py::test_equivalence[random-hard]": (
        "the hard level against popgym; easy and medium run by default"
    ),
    "tests/test_next_values.py::test_rollouts_next_values_equal_the_full_bootstrap"
    "[gymnax/Pendulum-v1-512-2]": "the two-seed Box-action case; MemoryChain's runs by default",
    "tests/test_host_envs.py::test_truncation_bootstraps_from_true_final_observation": (
        "a host-env training; the bootstrap identity runs by default (test_next_values)"
    ),
    "tests/test_branching.py::test_policy_actions_step_the_env_once_not_once_per_candidate"
    "[mask]": "the mask case; skip's (the CPU's default) runs by default",
    "tests/test_checkpointing.py::test_round_trip_with_empty_leaves": "a second run compiled",
    "tests/test_experiments.py::test_resume_refuses_other_chunks_and_extends_with_the_same_chunk"
    "_size": "runs resumed with other chunk sizes",
    "tests/test_rnn_custom_vjp.py::test_module_matches_flax_cell[lstm]": (
        "lstm's case; gru's runs by default"
    ),
    "tests/test_craftax_adapter.py::test_registered_variants[symbolic-obs1-43-100000-67]": (
        "Craftax's full game compiled"
    ),
    "tests/test_dependencies.py::test_scripts_and_tests_import_only_declared_dependencies": (
        "every script and test file parsed"
    ),
    "tests/test_plotting.py::test_plot_leaks_no_third_party_log_lines": _SUBPROCESS_RUNS,
    "tests/test_memory_properties.py::test_output_shape_and_carry_stable[dnc]": _REFERENCE,
    "tests/test_memory_properties.py::test_output_shape_and_carry_stable[gtrxl]": _REFERENCE,
    "tests/test_popgym_labyrinth.py::test_native_mazes_are_perfect_and_random_play_truncates"
    "[labyrinth_escape]": "the escape maze; labyrinth_explore's runs by default",
    "tests/test_env_contract.py::test_batched_stack_auto_resets_under_jit_and_vmap"
    "[gymnax/Breakout-MinAtar]": "MinAtar compiled under jit and vmap; other envs by default",
    "tests/test_env_contract.py::test_batched_stack_auto_resets_under_jit_and_vmap"
    "[gymnax/MetaMaze-misc]": "MetaMaze compiled under jit and vmap; other envs by default",
    "tests/test_invalid_actions.py::test_evaluate_plays_in_checked_mode": (
        "checked mode's host callbacks in the evaluator"
    ),
}


def _matches(nodeid: str, key: str) -> bool:
    return nodeid == key or (nodeid.startswith(key) and nodeid[len(key)] in ":[")


def mark_heavy(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Adds the ``heavy`` mark (with its reason) to the collected ``items`` that :data:`HEAVY`
    names (before ``-m`` and ``-k`` select: run first); raises ``pytest.UsageError`` for a key of
    a collected file that matches no test (a renamed or removed test: edit the list), unless
    the command line named single tests (``file::test``), which collects only those."""
    used: set[str] = set()
    for item in items:
        for key, reason in HEAVY.items():
            if _matches(item.nodeid, key):
                item.add_marker(pytest.mark.heavy(reason=reason))
                used.add(key)
                break
    if any("::" in arg for arg in config.args):
        return
    files = {item.nodeid.split("::")[0] for item in items}
    stale = [k for k in HEAVY if k.split("::")[0] in files and k not in used]
    if stale:
        raise pytest.UsageError(f"tests/heavy_tests.py names tests that do not exist: {stale}")
