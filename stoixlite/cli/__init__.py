"""What only concerns the command line: Hydra's config directory and resolvers, override checks,
the multirun callback, the process setup of an entry point and the helpers the scripts share."""
