"""A private directory in which reads provably do not move atime, or an ``IsolationError``.

Exact-atime assertions are only deterministic when nothing can move atime between a restore and
the check. Where reads would move it, ``FS_NOATIME_FL`` is set on the private directory only and
then *proved*: read back, inherited by a new dir and file, effective under a real read (with an
unflagged control beside the tree that the same read does move, else the experiment proved
nothing), and explicit ``utime`` still stores exactly. No skip, no retry, no sleep: whatever does
not hold is an error naming the filesystem and the remedy.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import types
from pathlib import Path
from typing import Final, Literal

import attrs

from artifactkit._fsutil import remove_tree
from artifactkit._syscalls import opened_dir
from artifactkit.errors import IsolationError
from artifactkit.isolation.probe import HISTORICAL_NS, AtimeProbe, probe_atime, read_moves_atime, write_file
from artifactkit.metadata import flags as _flags_module
from artifactkit.metadata.flags import get_flags, set_noatime_flag

REMEDY: Final = "run on a noatime test filesystem, or pass --artifactkit-base=PATH on one"
#: Where attributes come from a client cache, no read-back in the tree can be trusted: turn the caches off, or go local.
CACHE_REMEDY: Final = ("mount it with the client's attribute caches off (sshfs: -o dir_cache=no,attr_timeout=0,"
                       "entry_timeout=0; other FUSE: -o attr_timeout=0,entry_timeout=0 and the daemon's own cache "
                       "off; NFS: -o noac), or pass --artifactkit-base=PATH on a local filesystem")
Mode = Literal["flag", "noatime-mount"]


def _fail(fs_type: str, base: str, failed: str, detail: str, remedy: str = REMEDY) -> IsolationError:
    return IsolationError(
        f"atime isolation failed on {fs_type} ({base}): {detail}; remedy: {remedy}",
        fs_type=fs_type, base=base, failed=failed,
    )


@attrs.frozen
class NoatimeTree:
    """A verified private tree: ``path`` (empty, yours), the ``probe`` of its filesystem, the
    isolation ``mode`` chosen and ``verified_how`` (for logs). ``close()`` removes it."""

    path: Path
    probe: AtimeProbe
    mode: Mode
    verified_how: str
    container: Path = attrs.field(repr=False)

    def close(self) -> None:
        """Remove the tree and its private container (flagged inodes delete normally)."""
        remove_tree(self.container, ignore_errors=True)

    def __enter__(self) -> NoatimeTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def refuse_fake_filesystem(base: str) -> None:
    """Raise when ``os``/``fcntl`` are not the real modules (pyfakefs swaps both for fakes)."""
    # pyfakefs patches the module attributes of every loaded module: check the names we call through.
    used = (("os", os), ("flags.os", getattr(_flags_module, "os", os)),
            ("flags.fcntl", getattr(_flags_module, "fcntl", os)))
    fakes = [name for name, mod in used if not isinstance(mod, types.ModuleType)]
    if fakes:
        raise _fail("a fake filesystem", base, "fake-filesystem",
                    f"{', '.join(fakes)} replaced by a fake (pyfakefs?): its ioctl is a no-op returning 0, "
                    "so isolation would pass vacuously")


# Children are made through these two so a test can stand in for a filesystem that drops the flag.
def _new_dir(path: str) -> None:
    os.mkdir(path, 0o700)


def _new_file(path: str) -> None:
    write_file(path)


def private_noatime_tree(base: str | os.PathLike[str], *, probe: AtimeProbe | None = None) -> NoatimeTree:
    """Make and verify a private tree under ``base``; use as a context manager or ``close()`` it.

    ``probe`` (from :func:`probe_atime` on ``base``) is reused when it describes the same
    filesystem, so a session probes once; the per-tree verification always runs.
    """
    where = os.path.realpath(base)
    refuse_fake_filesystem(where)
    try:
        if probe is None or probe.device != os.lstat(where).st_dev:
            probe = probe_atime(where)
        container = tempfile.mkdtemp(prefix="artifactkit-", dir=where)
    except OSError as err:
        raise _fail("an unknown filesystem" if probe is None else probe.fs_type, where, "setup",
                    f"could not probe or create a private directory: {err}") from err
    if not probe.attributes_trusted:
        remove_tree(container, ignore_errors=True)
        raise _cached(probe, where)
    tree = os.path.join(container, "tree")
    try:
        os.mkdir(tree, 0o700)
        if probe.reads_move_atime:
            how = _flag_tree(tree, container, probe, where)
            mode: Mode = "flag"
        else:
            how = _confirm_no_moves(tree, probe, where)
            mode = "noatime-mount"
    except BaseException:
        remove_tree(container, ignore_errors=True)
        raise
    return NoatimeTree(Path(tree), probe, mode, how, Path(container))


def _cached(probe: AtimeProbe, base: str) -> IsolationError:
    if probe.client_cache == "seen":
        why = ("a file looked at again after the attribute timeout, or under a new name, showed other times than "
               "the name in use had, so what a test reads back here can be a client cache's copy, not the filesystem's")
    else:
        why = (f"the client may answer stat from a cache and no second name could be made to look past it, so "
               f"{', '.join(probe.unverified)} are unverified (client-cached attributes)")
    return _fail(probe.fs_type, base, "client-cache", why, CACHE_REMEDY)


def _confirm_no_moves(tree: str, probe: AtimeProbe, base: str) -> str:
    sample = os.path.join(tree, ".artifactkit-check")
    _new_file(sample)
    try:
        if read_moves_atime(sample, HISTORICAL_NS):
            raise _fail(probe.fs_type, base, "noatime-mount",
                        "the probe saw reads leave atime alone, yet a read inside the new tree moved it")
    finally:
        os.unlink(sample)
    return (f"no flag set: reads never moved atime on this {probe.fs_type} "
            f"(policy {probe.atime_policy}, probe and an in-tree read agree)")


def _flag_tree(tree: str, container: str, probe: AtimeProbe, base: str) -> str:
    fs = probe.fs_type
    if probe.noatime_flag != "supported":
        raise _fail(fs, base, probe.noatime_flag,
                    f"reads move atime (policy {probe.atime_policy}) and FS_NOATIME_FL is "
                    f"{probe.noatime_flag} here")
    result = set_noatime_flag(tree, private_root=tree)
    if result.status != "ok":
        raise _fail(fs, base, result.status,
                    f"setting FS_NOATIME_FL on the tree was {result.status} (errno {result.errno})")
    if not get_flags(tree).noatime:
        raise _fail(fs, base, "read-back", "FS_NOATIME_FL was set but does not read back on the tree")
    nested = os.path.join(tree, ".artifactkit-nested")
    files = [os.path.join(tree, ".artifactkit-file"), os.path.join(nested, "file")]
    control = os.path.join(container, "control")
    _new_dir(nested)
    try:
        for path in files:
            _new_file(path)
        lacking = [os.path.relpath(p, tree) for p in (nested, *files) if not get_flags(p).noatime]
        if lacking:
            raise _fail(fs, base, "inheritance",
                        f"FS_NOATIME_FL is not inherited by new inodes ({', '.join(lacking)}); "
                        "outputs created in the tree would not be protected")
        write_file(control)
        flagged_moved = read_moves_atime(files[1], HISTORICAL_NS)
        control_moved = read_moves_atime(control, HISTORICAL_NS)
        if not control_moved:
            raise _fail(fs, base, "positive-control",
                        "an unflagged control file's atime did not move on a read, so the "
                        "effectiveness experiment proved nothing")
        if flagged_moved:
            raise _fail(fs, base, "effectiveness",
                        "FS_NOATIME_FL reads back set, but a read still moved a flagged file's atime")
        # A value the filesystem can hold (aligned to its granularity) and new to this inode.
        wanted = (HISTORICAL_NS // probe.granularity_ns + 1) * probe.granularity_ns
        os.utime(files[0], ns=(wanted, wanted))
        st = os.lstat(files[0])
        if (st.st_atime_ns, st.st_mtime_ns) != (wanted, wanted):
            raise _fail(fs, base, "explicit-utime",
                        f"explicit utime(ns={wanted}) stored ({st.st_atime_ns}, {st.st_mtime_ns})")
    finally:
        remove_tree(nested, ignore_errors=True)
        for path in (files[0], control):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return ("FS_NOATIME_FL set on the tree and read back; inherited by a new dir and file; a read "
            "left a flagged file's historical atime unchanged while moving an unflagged control's; "
            "explicit utime(ns=) still stores")


def unflagged_paths(root: str | os.PathLike[str]) -> list[str]:
    """Relative paths under ``root`` (itself ``"."``) whose inode lacks ``FS_NOATIME_FL``.

    Symlinks are skipped: the flags ioctl cannot open them. Directories are listed through an
    ``O_NOATIME`` fd so the check itself moves nothing.
    """
    top = os.fspath(root)
    missing = [] if get_flags(top).noatime else ["."]
    _walk_unflagged(top, "", missing)
    return missing


def _walk_unflagged(top: str, rel: str, missing: list[str]) -> None:
    with opened_dir(os.path.join(top, rel) if rel else top, noatime=True) as fd:
        for name in sorted(os.listdir(fd)):
            relpath = f"{rel}/{name}" if rel else name
            kind = os.lstat(name, dir_fd=fd).st_mode
            if stat.S_ISLNK(kind):
                continue
            if not get_flags(os.path.join(top, relpath)).noatime:
                missing.append(relpath)
            if stat.S_ISDIR(kind):
                _walk_unflagged(top, relpath, missing)


def check_tree_flagged(root: str | os.PathLike[str]) -> None:
    """Raise :class:`IsolationError` unless every inode under ``root`` carries ``FS_NOATIME_FL``.

    A file *renamed into* a flagged tree keeps the flags it was created with, so outputs moved in
    from elsewhere are unprotected; this names them.
    """
    missing = unflagged_paths(root)
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise IsolationError(
            f"{len(missing)} inode(s) under {os.fspath(root)!r} lack FS_NOATIME_FL ({shown}): they were "
            "probably created elsewhere and renamed in, and reads will move their atime; create outputs "
            f"inside the tree instead; remedy: {REMEDY}",
            path=os.fspath(root), missing=missing, failed="unflagged",
        )


def noatime_subtree(parent: NoatimeTree) -> NoatimeTree:
    """A fresh private directory inside an already verified tree, checked for what can differ.

    The parent's verification (inheritance by a new dir and file, effectiveness against an
    unflagged control, explicit ``utime``) is a property of that flagged directory on that
    filesystem; what a new subdirectory can still get wrong is not inheriting the flag (the parent
    lost it, or the subtree sits on another mount), so that is read back — one ioctl instead of
    a dozen inode creations per test. ``close()`` removes only the subtree.
    """
    refuse_fake_filesystem(os.fspath(parent.path))  # pyfakefs may have started after the parent was made
    path = tempfile.mkdtemp(prefix="t-", dir=parent.path)
    device = os.lstat(path).st_dev
    if device != parent.probe.device:
        remove_tree(path, ignore_errors=True)
        raise _fail(parent.probe.fs_type, os.fspath(parent.path), "device",
                    "the subtree is on another filesystem than the verified tree (a mount inside it?)")
    if parent.mode == "flag" and not get_flags(path).noatime:
        remove_tree(path, ignore_errors=True)
        raise _fail(parent.probe.fs_type, os.fspath(parent.path), "inheritance",
                    "a new subtree of the verified tree lacks FS_NOATIME_FL (was the flag cleared on the "
                    "tree during the session?)")
    how = f"{parent.verified_how}; this subtree inherited the flag (read back)" if parent.mode == "flag" \
        else parent.verified_how
    return NoatimeTree(Path(path), parent.probe, parent.mode, how, Path(path))
