"""bindfs (``bindfs``): ``cp -a`` into a FUSE passthrough mount of a scratch store, and back out.

A store on a FUSE filesystem (s3fs, gcsfuse, a SeaweedFS or rclone mount) passes every ``utimensat``,
``chmod``, ``chown``, xattr call and read through a user-space daemon. bindfs is the plainest such
daemon: it forwards each call to a directory underneath, so whatever it loses is lost by FUSE (or by
bindfs), not by a storage format. Both directions cross the mount: the tree is written into it and read
back out of it.

Commands::

    mkdir {tmp}/store {tmp}/mnt
    bindfs --no-allow-other {tmp}/store {tmp}/mnt
    cp -a {src} {tmp}/mnt/tree
    cp -a {tmp}/mnt/tree {dst}
    fusermount3 -u {tmp}/mnt

Every option, and why (bindfs(1), cp(1), fusermount3(1)):

* ``bindfs`` with its defaults otherwise: owners, permissions, xattrs (``--xattr-rw``) and times pass
  through unchanged (``--chown-normal``, ``--chmod-normal``); nothing is remapped.
* ``--no-allow-other``: only the mounting user sees the mount (root's bindfs adds ``allow_other``).
* ``cp -a`` (``-dR --preserve=all``): modes, owners, times to the nanosecond, links, xattrs; the copy
  that is lossless on a local filesystem, so any difference is the mount's.
* ``fusermount3 -u``: unmounts for root and for a user alike; it runs whatever happened before it, and
  a copy's failure is the one reported. No FUSE here (no ``/dev/fuse``, no permission to mount) is a
  setup error carrying bindfs's own message.
"""

from __future__ import annotations

import contextlib
import os

from artifactkit.conformance.adapters._tool import find, steps
from artifactkit.errors import ToolFailedError

PACKAGE = "Debian's bindfs and fuse3 (apt-get install bindfs fuse3)"


def bindfs(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``cp -a`` ``src`` into a bindfs mount and from there into ``dst``."""
    exe, unmount, cp = find("bindfs", PACKAGE), find("fusermount3", PACKAGE), find("cp", "coreutils")
    with steps(src, dst, "bindfs", log) as run:
        store, mount = f"{run.tmp}/store", f"{run.tmp}/mnt"
        os.mkdir(store)
        os.mkdir(mount)
        run.run([exe, "--no-allow-other", store, mount])
        try:
            run.run([cp, "-a", run.src, f"{mount}/tree"])
            run.run([cp, "-a", f"{mount}/tree", run.dst])
        except ToolFailedError:
            with contextlib.suppress(ToolFailedError):
                run.run([unmount, "-u", mount])
            raise
        run.run([unmount, "-u", mount])


VERSION = ("bindfs", "--version")
