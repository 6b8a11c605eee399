"""GNU cpio in copy-out / copy-in mode, as ``find | cpio`` pipelines are written (the ``cpio`` adapter).

Commands (the pipeline runs in ``sh``; nothing else does)::

    sh -c 'cd "$1" && find . -depth -print0 | cpio --null --create --format=newc --reset-access-time \\
        > "$2"' sh {src} {tmp}/a.cpio
    mkdir {dst}
    sh -c 'cd "$1" && cpio --extract --make-directories --preserve-modification-time \\
        --no-absolute-filenames --unconditional < "$2"' sh {dst} {tmp}/a.cpio

Every option, and why (GNU cpio manual, 2.13):

* ``find . -depth -print0`` / ``--null``: children before their directory (so a read-only directory is
  filled before its mode is set) and any byte in a name.
* ``--format=newc``: SVR4 with 32-bit inode numbers and sizes over 2 GiB (the default ``bin`` format has
  16-bit fields); it stores mtime in whole 32-bit seconds and no atime.
* ``--reset-access-time``: puts each read file's atime back with ``utime`` (it cannot avoid the read;
  the ctime of every file it read moves).
* ``--make-directories --preserve-modification-time``: create parents; set mtime (else the extraction
  time). Owners are restored by default for root.
* ``--no-absolute-filenames --unconditional``: stay inside ``{dst}``; replace what an earlier entry made.
"""

from __future__ import annotations

import os

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's cpio (apt-get install cpio)"
_CREATE = ('cd "$1" && find . -depth -print0 | cpio --null --create --format=newc --reset-access-time --quiet '
           '> "$2"')
_EXTRACT = ('cd "$1" && cpio --extract --make-directories --preserve-modification-time --no-absolute-filenames '
            '--unconditional --quiet < "$2"')


def cpio(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``find | cpio -o`` into an archive, ``cpio -i`` out of it."""
    find("cpio", PACKAGE)
    with steps(src, dst, "cpio", log) as run:
        archive = f"{run.tmp}/a.cpio"
        run.run(["sh", "-c", _CREATE, "sh", run.src, archive])
        os.mkdir(run.dst)
        run.run(["sh", "-c", _EXTRACT, "sh", run.dst, archive])


VERSION = ("cpio", "--version")
