"""A download's last read-back on a filesystem whose client may cache attributes: under names no cache has seen.

Waiting past the kernel's attribute timeout (1 s for FUSE) is not enough where the daemon keeps a cache of
its own, keyed by path: sshfs answers from one for 20 s whatever ``attr_timeout`` says (s3fs for 900 s). On
default sshfs a time the server moved a moment after it was set read back unchanged for those 20 s, and the
download said "verified exact". So, past the kernel's timeout, the staged tree is renamed inside the private
directory and every entry is read there: a path no such cache holds (sshfs drops a renamed subtree's cache).
Nothing in the tree is touched: the rename changes the root's ctime and the private directory's times only.

Whether that look really passes the daemon's cache is found out, not assumed, beside the tree while the
kernel's timeout runs out (:func:`prepare`): a file's time is set and read (now cached by name), changed to
another value through a second name (a hard link: the change bypasses that cache), and read again once its
directory is renamed (:func:`passes`). Showing the new value, the rename is a fresh look; showing the old one,
the cache moved with the rename, and where no hard link can be made (s3fs, rclone mount) no look can be shown
fresh. Then the times are still compared (a value seen moved is refused) but reported as unverified
(:data:`CACHED`), never as "verified exact". Beyond any look from here: a cache keyed by inode that outlives
the wait (NFS's ``actimeo``, up to 60 s), which the calibration's change, made through this client, updates.

Cost: a fixed dozen calls (the calibration, two renames: 8 ms median on loopback sshfs), and each entry is read
once, as before, but now from the server rather than the daemon's cache: a 1,000-file download onto loopback
sshfs took 4.18 s instead of 3.83 s (medians of 10 alternating pairs; paired difference +0.33 s).
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

from artifactkit.engine.values import Parsed
from artifactkit.metadata.mismatch import TIME_FIELDS
from artifactkit.metadata.times import verify_stored

#: The fields reported unverified where no look past the client's cache could be shown fresh.
CACHED: Final = TIME_FIELDS
#: Names inside the private directory (only this process makes anything there): the calibration's directory,
#: the same directory renamed, the second name of its file, and the staged tree's fresh name.
_CALIBRATION: Final = "calibration"
_CALIBRATION_RENAMED: Final = "calibration-looked"
_SECOND_NAME: Final = "calibration-link"
LOOKED: Final = "tree-looked"
_FILE: Final = "f"
#: Whole seconds inside SFTP's unsigned 32-bit range (sshfs keeps no more): the value cached, then the change.
_CACHED_NS, _CHANGED_NS = 1_000_000_000 * 10**9, 1_000_000_001 * 10**9
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def prepare(private_fd: int) -> bool:
    """Set up the calibration in the private directory ``private_fd``; False where no hard link can be made.

    The link comes first (sshfs forgets a file's cached attributes when it is linked), then the file's
    time is set and read by its name (now in a path-keyed cache), then changed through the link alone.
    """
    os.mkdir(_CALIBRATION, 0o700, dir_fd=private_fd)
    cal_fd = os.open(_CALIBRATION, _DIR_FLAGS, dir_fd=private_fd)
    try:
        os.close(os.open(_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=cal_fd))
        try:
            os.link(_FILE, _SECOND_NAME, src_dir_fd=cal_fd, dst_dir_fd=private_fd, follow_symlinks=False)
        except OSError:
            return False  # EOPNOTSUPP, EPERM, EIO, ENOSYS...: no second name, so no look can be shown fresh
        os.utime(_FILE, ns=(_CACHED_NS, _CACHED_NS), dir_fd=cal_fd, follow_symlinks=False)
        os.lstat(_FILE, dir_fd=cal_fd)
        os.utime(_SECOND_NAME, ns=(_CHANGED_NS, _CHANGED_NS), dir_fd=private_fd, follow_symlinks=False)
        return True
    finally:
        os.close(cal_fd)


def passes(private_fd: int) -> bool:
    """Once the kernel's timeout has run out: whether a look after a rename shows the change :func:`prepare`
    made behind the cached name (only mtime: ``weed mount`` keeps no atime, which the tree's look refuses)."""
    os.rename(_CALIBRATION, _CALIBRATION_RENAMED, src_dir_fd=private_fd, dst_dir_fd=private_fd)
    cal_fd = os.open(_CALIBRATION_RENAMED, _DIR_FLAGS, dir_fd=private_fd)
    try:
        return os.lstat(_FILE, dir_fd=cal_fd).st_mtime_ns == _CHANGED_NS
    finally:
        os.close(cal_fd)


def read_back(entries: Parsed, private_fd: int, tree: str, *, calibrated: bool) -> tuple[str, tuple[str, ...]]:
    """Rename ``tree`` to :data:`LOOKED` and verify every entry's times there; the tree's new name and the fields
    left unverified (:data:`CACHED` unless ``calibrated`` and the calibration :func:`passes`).

    A time that differs is refused whether or not the look was fresh: a move or a loss seen through any cache
    is proof (``weed mount``'s atime, lost once its 1 s cache expires). Called once the kernel's attribute
    timeout has run out since :func:`prepare` and since the tree's last entry was set.
    """
    fresh = calibrated and passes(private_fd)
    os.rename(tree, LOOKED, src_dir_fd=private_fd, dst_dir_fd=private_fd)
    root_fd = os.open(LOOKED, _DIR_FLAGS, dir_fd=private_fd)
    try:
        verify_stored([(entry, os.lstat(entry.path, dir_fd=root_fd)) for entry in entries], stage="download",
                      fields=TIME_FIELDS)
    finally:
        os.close(root_fd)
    with contextlib.suppress(OSError):  # the private directory's close() removes whatever is left
        os.unlink(_SECOND_NAME, dir_fd=private_fd)
    return LOOKED, () if fresh else CACHED
