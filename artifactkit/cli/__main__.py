"""``python -m artifactkit.cli``: the same as the ``artifactkit`` console script."""

from artifactkit.cli.entry import run

raise SystemExit(run())
