"""How many of the source's atimes a publish's reads moved, and why: a publish reads without moving atimes where
it can, and says so where it cannot.

Two reads can move an atime. ``readlink`` moves a symlink's wherever the mount moves atimes (it takes no
``O_NOATIME``: 107 of 107 links in /usr/share/doc); and ``O_NOATIME`` is refused (``EPERM``) to a user who does not
own the file or directory, whose read or listing then moves its atime. Both were silent (issue 53). The count is
what is: after the reads, each entry that may have moved — every symlink, every file read without ``O_NOATIME``,
every directory when a listing went without it — is looked at again (``lstat``) and counted if its atime is not
the one the scan captured. Only those are looked at, so a publish of a tree the user owns pays one ``lstat`` per
symlink. The engines say which they are (:meth:`~artifactkit.engine.values.Captured.positions_of`,
:meth:`~artifactkit.engine.values.ReadBatch.read_with_atime`); the looking is this module's, so both engines count
alike. An atime someone else moved meanwhile is counted too: the count is of moves since the scan.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable

import attrs

from artifactkit.engine.values import ReadBatch, ScannedTree
from artifactkit.errors import SourceAtimesMovedWarning


@attrs.frozen
class MovedAtimes:
    """Source entries whose atime moved during a publish, by why: ``symlinks`` (``readlink``), ``files`` and
    ``directories`` (opened without ``O_NOATIME``)."""

    symlinks: int = 0
    files: int = 0
    directories: int = 0

    @property
    def total(self) -> int:
        return self.symlinks + self.files + self.directories

    def __add__(self, other: MovedAtimes) -> MovedAtimes:
        return MovedAtimes(self.symlinks + other.symlinks, self.files + other.files,
                           self.directories + other.directories)

    def as_json(self) -> dict[str, int]:
        return {"symlinks": self.symlinks, "files": self.files, "directories": self.directories, "total": self.total}

    def describe(self) -> str:
        """``moved N source atime(s)`` with the why of each kind that has any."""
        why = [f"{self.symlinks} symlink(s) read by readlink"] if self.symlinks else []
        opened = [f"{count} {kind}" for count, kind in ((self.files, "file(s)"), (self.directories, "directories"))
                  if count]
        if opened:
            why.append(" and ".join(opened) + " opened without O_NOATIME (refused: this user does not own them)")
        return f"moved {self.total} source atime(s)" + (f": {'; '.join(why)}" if why else "")

    def warning(self) -> SourceAtimesMovedWarning:
        return SourceAtimesMovedWarning(f"publish {self.describe()}", self.symlinks, self.files, self.directories)


def _moved(tree: ScannedTree, positions: list[int]) -> int:
    count = 0
    for path, atime_ns in tree.entries.path_atimes(positions):  # no FileMeta made: 0.3-2 s for 100,000 entries
        try:
            now = os.lstat(os.path.join(tree.root, path)).st_atime_ns
        except OSError:
            continue  # gone or unreachable since the scan: nothing of ours to count
        count += now != atime_ns
    return count


def moved_atimes(tree: ScannedTree, reads: Iterable[ReadBatch], base: int = 0) -> MovedAtimes:
    """The source atimes moved since ``tree`` was captured, among the entries a read may have moved: every symlink,
    the files of ``reads`` read without ``O_NOATIME``, and every directory if a listing went without it. ``base``:
    the position the reads number the tree's first entry (a part's: :attr:`~artifactkit.engine.plan.Plan.base`)."""
    files = [at - base for batch in reads for at in batch.read_with_atime()]
    directories = tree.entries.positions_of("dir") if not tree.listed_noatime else []
    return MovedAtimes(symlinks=_moved(tree, tree.entries.positions_of("symlink")), files=_moved(tree, files),
                       directories=_moved(tree, directories))


def warn_moved_atimes(tree: ScannedTree, reads: Iterable[ReadBatch]) -> None:
    """:class:`~artifactkit.errors.SourceAtimesMovedWarning` if the publish moved any source atime (the CLI turns
    its counts into its result: 0 of each when it did not come)."""
    moved = moved_atimes(tree, reads)
    if moved.total:
        warnings.warn(moved.warning(), stacklevel=4)


def moved_of(warned: Iterable[Warning | str]) -> MovedAtimes:
    """The counts the :class:`~artifactkit.errors.SourceAtimesMovedWarning` among ``warned`` carries (a caller's
    caught warnings); 0 of each if none came: the publish moved no source atime."""
    moved = [found for found in warned if isinstance(found, SourceAtimesMovedWarning)]
    return MovedAtimes(symlinks=sum(found.symlinks for found in moved), files=sum(found.files for found in moved),
                       directories=sum(found.directories for found in moved))
