"""7-Zip (``7zz``, the upstream console build Debian packages as ``7zip``): a .7z of the tree, extracted.

Commands::

    (cd {src} && 7zz a -bso0 -bsp0 -snl -mtm=on -mta=on -mtc=on {tmp}/a.7z .)
    7zz x -bso0 -bsp0 -snl -o{dst} {tmp}/a.7z

Every option, and why (7-Zip's ``7zz --help`` and its switches documentation):

* ``a`` from inside ``{src}`` with ``.``: entries are named relative to the tree, never absolute.
* ``-snl``: store symbolic links as links (the default follows them), and restore them as links.
* ``-mtm=on -mta=on -mtc=on``: store modification, access and creation times (FILETIME: 100 ns ticks);
  7-Zip keeps the Unix mode in the high bits of the attributes.
* ``-bso0 -bsp0``: no progress or listing on stdout; errors still go to stderr.
* ``x -o{dst}``: full paths, into ``{dst}`` (created by 7-Zip).
"""

from __future__ import annotations

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's 7zip (apt-get install 7zip)"


def sevenzip(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """7zz add with every time switch, then extract."""
    exe = find("7zz", PACKAGE)
    with steps(src, dst, "7z", log) as run:
        archive = f"{run.tmp}/a.7z"
        run.run([exe, "a", "-bso0", "-bsp0", "-snl", "-mtm=on", "-mta=on", "-mtc=on", archive, "."], cwd=run.src)
        run.run([exe, "x", "-bso0", "-bsp0", "-snl", f"-o{run.dst}", archive])


VERSION = ("7zz", "i")
VERSION_LINE = "7-Zip"
