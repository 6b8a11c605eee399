"""squashfs-tools: a squashfs image of the tree, unpacked again (the ``squashfs`` adapter).

Commands::

    mksquashfs {src} {tmp}/a.sqfs -noappend -no-progress -quiet -xattrs
    unsquashfs -no-progress -quiet -xattrs -d {dst} {tmp}/a.sqfs

Every option, and why (mksquashfs/unsquashfs 4.5 ``-help``):

* ``-noappend``: a new image, never appended to whatever has that name.
* ``-xattrs`` on both sides: the default, written out: extended attributes travel in the image.
* ``-no-progress -quiet``: no progress bar in the captured output, errors still on stderr.
* ``-d {dst}``: unsquashfs creates the destination itself and, as root, restores owners and modes.
* The image format stores one mtime per inode in unsigned 32-bit seconds and no atime; unsquashfs
  sets atime and mtime both to it (``utimes``). Holes are kept (sparse blocks).
"""

from __future__ import annotations

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's squashfs-tools (apt-get install squashfs-tools)"


def squashfs(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """mksquashfs into an image, unsquashfs it to ``dst``."""
    make = find("mksquashfs", PACKAGE)
    unpack = find("unsquashfs", PACKAGE)
    with steps(src, dst, "squashfs", log) as run:
        image = f"{run.tmp}/a.sqfs"
        run.run([make, run.src, image, "-noappend", "-no-progress", "-quiet", "-xattrs"])
        run.run([unpack, "-no-progress", "-quiet", "-xattrs", "-d", run.dst, image])


VERSION = ("mksquashfs", "-version")
