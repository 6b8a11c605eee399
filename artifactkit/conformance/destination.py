"""Where a copier writes, and how the kit reads the copy without moving what it checks.

The copier must see the atime behaviour of the filesystem under test: a copier that reads its own
output after setting times (a verify pass) leaves moved atimes on an ordinary destination, and an
inherited ``FS_NOATIME_FL`` would hide exactly that. So the destination parent is a directory inside
the verified private tree with the flag *cleared* (new inodes inherit nothing), proved by a read that
moves a historical atime there. The kit then captures the copy ``lstat``-first and hashes with
``O_NOATIME``; only for ``survives_read`` does it set the flag on every file and directory itself
(whatever flags the copier restored stay as they were otherwise), so that one ordinary read moves
nothing unless the copy itself changes when read (FUSE, lazy hydration). Symlinks cannot carry the
flag (the ioctl cannot open them) and ``readlink`` moves their atime, so their atime is left out of
that check; an entry whose flags cannot be changed (immutable) is left out and named.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Final

from artifactkit.errors import IsolationError
from artifactkit.isolation.probe import HISTORICAL_NS, AtimeProbe, read_moves_atime, write_file
from artifactkit.isolation.tree import REMEDY, NoatimeTree, private_noatime_tree
from artifactkit.metadata.compare import compare
from artifactkit.metadata.flags import get_flags, set_noatime_flag
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.metadata.model import FileMeta

#: The destination parent's name inside the private tree.
UNFLAGGED = "copies"
#: What to do when the base cannot hold the kit's trees: conformance is run with ``--base`` (or ``base=``),
#: never under pytest, and a noatime mount would hide a copier's reads of the source.
CONFORMANCE_REMEDY: Final = ("pass a base on ext4, tmpfs or xfs mounted relatime or strictatime, where FS_NOATIME_FL "
                             "works and reads move atime: --base DIR on the command line, base= in Python")


@contextlib.contextmanager
def private_tree(base: str, probe: AtimeProbe) -> Iterator[NoatimeTree]:
    """:func:`private_noatime_tree` with a refusal's remedy in conformance's own terms (btrfs: the flag is not
    inherited; the plugin's option means nothing to someone running ``artifactkit conformance``)."""
    with contextlib.ExitStack() as stack:
        try:
            tree = stack.enter_context(private_noatime_tree(base, probe=probe))
        except IsolationError as err:
            raise IsolationError(err.message.replace(REMEDY, CONFORMANCE_REMEDY), **err.context) from err
        yield tree


def unflagged_parent(tree: NoatimeTree, name: str = UNFLAGGED) -> str:
    """A directory ``name`` in ``tree`` without ``FS_NOATIME_FL`` where reads move atime as on its filesystem."""
    parent = os.path.join(tree.path, name)
    os.mkdir(parent, 0o700)
    if tree.mode != "flag":
        return parent  # a noatime mount: reads move nothing anywhere, the copier sees that too
    result = set_noatime_flag(parent, private_root=tree.path, on=False)
    if result.status != "ok" or get_flags(parent).noatime:
        raise IsolationError(
            f"conformance could not clear FS_NOATIME_FL on the destination parent ({result.status}); a copier's "
            f"own reads of its output would be hidden; remedy: {CONFORMANCE_REMEDY}",
            fs_type=tree.probe.fs_type, failed="destination-unflag")
    sample = os.path.join(parent, ".artifactkit-probe")
    write_file(sample)
    try:
        moved = read_moves_atime(sample, HISTORICAL_NS)
    finally:
        os.unlink(sample)
    if not moved:
        raise IsolationError(
            f"a read in the unflagged destination parent on {tree.probe.fs_type} left a historical atime alone, "
            f"so a copier's own reads would not show; remedy: {CONFORMANCE_REMEDY}",
            fs_type=tree.probe.fs_type, failed="destination-atime")
    return parent


def flag_for_reading(tree: NoatimeTree, root: str, entries: Iterable[FileMeta]) -> dict[str, str]:
    """Set ``FS_NOATIME_FL`` on every file and directory of the copy at ``root``; return the paths it could
    not be set on, with why (an immutable inode refuses any flag change)."""
    refused: dict[str, str] = {}
    if tree.mode != "flag":
        return refused
    for meta in entries:
        if meta.kind not in ("file", "dir"):
            continue
        path = root if meta.path == "." else os.path.join(root, meta.path)
        try:
            result = set_noatime_flag(path, private_root=tree.path)
        except PermissionError as err:  # an inode this process may not even open (mode 000 without root)
            refused[meta.path] = f"cannot open it to set FS_NOATIME_FL ({err.strerror})"
            continue
        if not result.noatime:
            refused[meta.path] = f"FS_NOATIME_FL could not be set ({result.status}, errno {result.errno})"
    return refused


def read_moves(before: Iterable[FileMeta], after: Iterable[FileMeta], left_out: Iterable[str]) -> list[Mismatch]:
    """The times one read moved on the copy, without link atimes (readlink moves them on any filesystem
    that is not noatime, whatever the copy did) or the entries in ``left_out``."""
    skipped = set(left_out)
    kinds = {meta.path: meta.kind for meta in before}
    return [m for m in compare(before, after, fields=("mtime_ns", "atime_ns"))
            if m.path not in skipped and not (kinds.get(m.path) == "symlink" and m.field == "atime_ns")]
