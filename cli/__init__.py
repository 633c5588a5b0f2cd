"""The ``cader`` console script: one entry point with a subcommand per stage."""
