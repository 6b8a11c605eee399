"""GNU tar, POSIX format (the ``tar-posix`` adapter): archive ``{src}``, extract into ``{dst}``.

Commands::

    tar --create --file {tmp}/a.tar --format=posix --atime-preserve=system \\
        --xattrs --xattrs-include=* -C {src} .
    mkdir {dst}
    tar --extract --file {tmp}/a.tar --incremental --xattrs --xattrs-include=* \\
        --same-permissions --same-owner -C {dst}

Every option, and why (GNU tar manual):

* ``--format=posix``: pax extended headers keep mtime, atime and ctime to the nanosecond.
* ``--atime-preserve=system``: read with ``O_NOATIME``, so archiving does not move the source's atime.
* ``--incremental`` on extraction: GNU tar restores atime only in incremental mode; otherwise it
  passes ``UTIME_OMIT`` and every atime is the extraction's (a non-incremental archive deletes nothing).
* ``--xattrs --xattrs-include=*``: extended attributes are neither stored nor restored without them.
* ``--same-permissions --same-owner``: root's defaults, written out so the intent is visible.
"""

from __future__ import annotations

import os

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's tar (apt-get install tar)"


def tar_posix(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """GNU tar with every option that keeps metadata."""
    exe = find("tar", PACKAGE)
    with steps(src, dst, "tar", log) as run:
        archive = f"{run.tmp}/a.tar"
        run.run([exe, "--create", "--file", archive, "--format=posix", "--atime-preserve=system",
                 "--xattrs", "--xattrs-include=*", "-C", run.src, "."])
        os.mkdir(run.dst)
        run.run([exe, "--extract", "--file", archive, "--incremental", "--xattrs", "--xattrs-include=*",
                 "--same-permissions", "--same-owner", "-C", run.dst])


VERSION = ("tar", "--version")
