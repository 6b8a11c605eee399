"""``python -m artifactkit.cli``: the same as the ``artifactkit`` console script."""

from artifactkit.cli.main import main

raise SystemExit(main())
