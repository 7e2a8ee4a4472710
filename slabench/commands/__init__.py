"""The `slabench` command line: the dispatcher and the subcommands that belong to no other folder."""
