"""The ``artifactkit`` command: ``main`` parses and dispatches, one module per subcommand renders.

Subcommands call library functions and map exceptions to exit codes in one place
(:mod:`artifactkit.cli.common`); nothing below the cli imports it.
"""
