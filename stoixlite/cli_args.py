"""The scripts' command-line helpers under their former name (:mod:`stoixlite.cli.args`)."""

from stoixlite.cli.args import (  # noqa: F401
    BAD_INPUT,
    OneLineArgumentParser,
    checked_run_config,
    compile_for_real,
    fail,
    last_error_line,
    one_line,
    output_dir_error,
    output_file_error,
)
