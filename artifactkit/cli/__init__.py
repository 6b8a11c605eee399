"""The ``artifactkit`` command: ``main`` parses and dispatches, one module per subcommand renders.

Subcommands call library functions and return one result each (:mod:`artifactkit.cli.result`), rendered as
text or as one JSON document; exceptions map to exit codes in one table (:data:`artifactkit.cli.common.EXIT_CODES`).
Nothing below the cli imports it.
"""
