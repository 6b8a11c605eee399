"""libarchive's bsdtar, pax format with every metadata option (the ``bsdtar`` adapter).

Commands::

    bsdtar --create --file {tmp}/a.tar --format=pax --xattrs --acls --fflags --read-sparse -C {src} .
    mkdir {dst}
    bsdtar --extract --file {tmp}/a.tar --xattrs --acls --fflags --same-owner -p -C {dst}

Every option, and why (bsdtar(1), libarchive 3.6):

* ``--format=pax``: the pax extended header carries mtime and atime to the nanosecond, owners by number
  and name, xattrs (``LIBARCHIVE.xattr.*``) and the file flags; ustar would cut times to seconds.
* ``--xattrs --acls --fflags`` on both sides: extended attributes, POSIX ACLs and ``chattr`` flags are
  archived and restored only when asked for (``-p`` implies them on extract; written out for intent).
* ``--read-sparse``: the default, written out: holes are recorded as holes.
* ``--same-owner -p``: restore owners (root's default) and permissions including setuid/setgid/sticky.
* bsdtar has no option to read the source without moving its atime (no ``O_NOATIME``).
"""

from __future__ import annotations

import os

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's libarchive-tools (apt-get install libarchive-tools)"


def bsdtar(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """bsdtar create/extract in pax format, xattrs, ACLs and file flags included."""
    exe = find("bsdtar", PACKAGE)
    with steps(src, dst, "bsdtar", log) as run:
        archive = f"{run.tmp}/a.tar"
        run.run([exe, "--create", "--file", archive, "--format=pax", "--xattrs", "--acls", "--fflags",
                 "--read-sparse", "-C", run.src, "."])
        os.mkdir(run.dst)
        run.run([exe, "--extract", "--file", archive, "--xattrs", "--acls", "--fflags", "--same-owner", "-p",
                 "-C", run.dst])


VERSION = ("bsdtar", "--version")
