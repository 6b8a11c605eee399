"""rclone: ``copy`` ``{src}`` into a local "remote" directory and ``copy`` it back into ``{dst}``.

Commands::

    rclone copy --config {tmp}/rclone.conf [-M --links --create-empty-src-dirs] {src} {tmp}/store
    rclone copy --config {tmp}/rclone.conf [-M --links --create-empty-src-dirs] {tmp}/store {dst}

Every option, and why (rclone docs, "rclone copy", "Metadata", "local backend"):

* ``--config {tmp}/rclone.conf`` (an empty file): local paths need no remote, and rclone neither reads
  nor writes ``~/.config/rclone``.
* ``rclone`` uses none of the rest: rclone's defaults copy content and mtime only (modes 0644/0755,
  atime set to the mtime, symlinks skipped with a NOTICE, empty directories not created).
* ``rclone-metadata`` adds ``-M``/``--metadata`` (the local backend's mode, uid, gid, atime, mtime),
  ``--links`` (symlinks stored as ``.rclonelink`` files and turned back) and
  ``--create-empty-src-dirs``: the flags the docs name for keeping a tree's metadata.
"""

from __future__ import annotations

from pathlib import Path

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's rclone (apt-get install rclone)"
METADATA_OPTIONS = ("-M", "--links", "--create-empty-src-dirs")


def _rclone(src: str, dst: str, options: tuple[str, ...], log: list[str] | None) -> None:
    exe = find("rclone", PACKAGE)
    with steps(src, dst, "rclone", log) as run:
        conf = Path(run.tmp, "rclone.conf")
        conf.touch()
        common = ["--config", str(conf), *options]
        run.run([exe, "copy", *common, run.src, f"{run.tmp}/store"])
        run.run([exe, "copy", *common, f"{run.tmp}/store", run.dst])


def rclone(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """rclone's defaults."""
    _rclone(src, dst, (), log)


def rclone_metadata(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``rclone copy -M --links --create-empty-src-dirs`` both ways."""
    _rclone(src, dst, METADATA_OPTIONS, log)


VERSION = ("rclone", "version")
