"""POSIX pax (Debian's, from MirBSD), ustar format, every privilege kept (the ``pax`` adapter).

Commands::

    (cd {src} && pax -w -x ustar -t -f {tmp}/a.tar .)
    mkdir {dst}
    (cd {dst} && pax -r -pe -f {tmp}/a.tar)

Every option, and why (pax(1), POSIX.1-2008 ``pax``):

* ``-w -x ustar``: the POSIX interchange format (Debian's pax writes no pax extended headers): times in
  whole seconds, no atime field, names up to 255 bytes split over prefix and name.
* ``-t``: put back the atime of every file it read (by ``utime``: the source's ctimes move).
* ``-r -pe``: "preserve everything": owner, mode with setuid/setgid/sticky, and times (pax restores
  atime too, from what it has: the archive has none).
"""

from __future__ import annotations

import os

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's pax (apt-get install pax)"
TOOL = "pax"


def pax(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``pax -w`` a ustar archive, ``pax -r -pe`` it back."""
    exe = find(TOOL, PACKAGE)
    with steps(src, dst, "pax", log) as run:
        archive = f"{run.tmp}/a.tar"
        run.run([exe, "-w", "-x", "ustar", "-t", "-f", archive, "."], cwd=run.src)
        os.mkdir(run.dst)
        run.run([exe, "-r", "-pe", "-f", archive], cwd=run.dst)


# pax has no version option: Debian's package database says which one this is (found only where pax is).
VERSION = ("dpkg-query", "-W", "-f=pax ${Version}\\n", "pax")
