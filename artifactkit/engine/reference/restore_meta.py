"""Restoring everything beyond content, modes and times — owners, xattrs and ACLs, inode flags — in an
order where no step undoes another, and reading each back.

The order, per entry: content (the caller), then ``chown`` (it clears setuid/setgid and, on a file, the
``security.capability`` xattr: so it comes first), then xattrs *exactly* (any the destination added —
a default ACL inherited from the parent — is removed), then ``chmod`` (after ``chown``, which cleared
setuid; it also sets an ACL's mask to the group bits the source had), then the restorable inode flags,
then the times (the caller), last. Everything set here is read back at once.

Policy: by default (``owners="exact"``) a download that cannot restore an owner, a privileged xattr
(``trusted.*``, ``security.*``) or an inode flag here refuses before writing anything, naming every
entry. ``owners="current"`` accepts the downloader's ownership instead, and then means the same for root
as for anyone: nothing it makes carries a privilege the downloader did not have before. Every entry is
the downloader's (euid; egid unless the recorded group is one the process is in), no entry keeps a
setuid/setgid bit — not even one recorded as the downloader's own, since the manifest is only as trusted
as whoever can write the store — and ``security.*``/``trusted.*`` xattrs (``security.capability``
included) are dropped. A :class:`ReownedWarning` lists every changed entry and what changed in its
``entries`` (the message shows the first 20); an entry that needs no change is not listed.

A manifest that records no owner for an entry (format 1, or a hand-written one) says nothing about who
may own its setuid/setgid bits, and the file would otherwise become the downloader's — root's, for a
root download. So with ``owners="exact"`` such an entry is refused up front (:class:`NotRestorableError`
naming it: nothing is dropped silently), and with ``owners="current"`` its bits are cleared and it is
listed in the warning.

FIFOs and device nodes are made by name (``mkfifo``/``mknod`` beneath the private staging directory's fd)
and never opened: opening a FIFO blocks, opening a device talks to hardware. So their owner, xattrs and
mode are set by name through that directory's fd (nothing but this process writes there), they have no
inode flags, and the same read-back covers their kind, device number, owner and times.

A device node other than overlayfs's whiteout (char 0,0, which the kernel lets anyone make since Linux
5.8 and which opens nothing) needs ``CAP_MKNOD`` in the initial user namespace. Without it an exact
download refuses up front, naming every device, like an owner it cannot restore. ``owners="current"``
*refuses* such a tree too, for root as for anyone, rather than dropping the devices and listing them in
the warning: a device node is access to whatever it names (``/dev/sda``'s 8,0 is the whole disk), whoever
owns it, so it cannot be made "the downloader's without privilege" the way a setuid file can; and a
download that silently has fewer entries than its manifest is a tree no one published. The whiteout is
kept in both modes: it grants nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import warnings
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from artifactkit._fsutil import naming
from artifactkit._os_calls import named
from artifactkit.engine.values import Owners
from artifactkit.errors import MetadataMismatchError, NotRestorableError, ReownedWarning
from artifactkit.metadata.extended import read_xattrs
from artifactkit.metadata.flags import (
    COMPARED_FLAGS,
    FlagResult,
    InodeFlag,
    flag_letters,
    flags_if_unchanged,
    restore_flags_fd,
)
from artifactkit.metadata.model import DEVICE_KINDS, KIND_IFMT, FileMeta, Xattrs

OWNER_POLICIES: Final = ("exact", "current")
_PRIVILEGED_PREFIXES: Final = ("trusted.", "security.")
_NEVER_SET: Final = int(InodeFlag.FS_IMMUTABLE_FL | InodeFlag.FS_APPEND_FL)
_SETID: Final = stat.S_ISUID | stat.S_ISGID
_COMPARED_INT: Final = int(COMPARED_FLAGS)
#: linux/capability.h: CAP_MKNOD, bit 27 of the effective set in /proc/self/status.
_CAP_MKNOD: Final = 27
#: ``listxattr``/``setxattr`` on a filesystem without xattrs (on Linux the two are one value).
_NO_XATTRS: Final = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP})
#: What overlayfs writes for a deleted name: the one device any user may make (vfs_mknod, Linux >= 5.8).
WHITEOUT: Final = (0, 0)


def plan(entries: Iterable[FileMeta], owners: Owners) -> dict[str, FileMeta]:
    """What the download will produce for each path here, or :class:`NotRestorableError` before anything
    is written. ``owners="current"`` turns every entry into the downloader's, without privilege."""
    result, problems, reowned = _plan(entries, owners)
    if problems and owners == "current":
        raise NotRestorableError(
            "download refused: owners=\"current\" never creates a device node (whoever owns one has the device "
            "it names) and never sets immutable/append; download these as root with owners=\"exact\":\n  "
            + "\n  ".join(problems), entries=problems)
    if problems:
        raise NotRestorableError(
            "download refused: this user cannot restore everything the manifest records, and nothing is "
            f"ever dropped silently; {'' if os.geteuid() == 0 else 'run as root, or '}pass owners=\"current\" "
            "(CLI --owners current) to take the downloader's ownership without setuid/setgid or capabilities:\n  "
            + "\n  ".join(problems),
            entries=problems)
    if reowned:
        warning = ReownedWarning(
            f"{len(reowned)} entr(y/ies) given the downloader's ownership without setuid/setgid or privileged "
            "xattrs: " + "; ".join(reowned[:20]) + (f"; and {len(reowned) - 20} more" if len(reowned) > 20 else ""),
            entries=reowned)  # the whole list as data, beside the short message
        warnings.warn(warning, stacklevel=3)
    return result


def plans_nothing(entries: Sequence[FileMeta], owners: Owners) -> bool:
    """Whether :func:`plan` returns every one of ``entries`` as it is, refusing and warning nothing: then it
    does the same for any entry equal to one of them in every field it reads but the path (the native
    core's parse plans one entry of each such kind and leaves the rest as they are)."""
    result, problems, reowned = _plan(entries, owners)
    return not problems and not reowned and all(result.get(entry.path) is entry for entry in entries)


def _plan(entries: Iterable[FileMeta], owners: Owners) -> tuple[dict[str, FileMeta], list[str], list[str]]:
    """:func:`plan`'s entries, problems and re-owned entries, neither raised nor warned."""
    if owners not in OWNER_POLICIES:
        raise ValueError(f"owners must be one of {OWNER_POLICIES}, not {owners!r}")
    root = os.geteuid() == 0
    mknod = _can_make_devices()
    me, my_gid, groups = os.geteuid(), os.getegid(), {os.getegid(), *os.getgroups()}
    result: dict[str, FileMeta] = {}
    problems: list[str] = []
    reowned: list[str] = []
    for entry in entries:
        if entry.flags is not None and entry.flags & _NEVER_SET:
            problems.append(f"{entry.path}: inode flag(s) {flag_letters(entry.flags & _NEVER_SET)} "
                            "(immutable/append are never set by a download)")
        if entry.kind in DEVICE_KINDS and entry.rdev != WHITEOUT and (owners == "current" or not mknod):
            why_device = "owners=\"current\" never creates a device node" if owners == "current" else \
                "creating a device node needs CAP_MKNOD"
            problems.append(f"{entry.path}: {entry.kind} device {_rdev(entry)} ({why_device})")
        if owners == "current":
            changes = _changes_for_current(entry, me, groups)
            if changes:
                reowned.append(f"{entry.path} ({', '.join(changes)})")
                entry = _reowned(entry, me, my_gid, groups)  # noqa: PLW2901 - the planned entry replaces it
        else:
            why = _why_not(entry, root, me, groups)
            if entry.mode & _SETID and (entry.uid is None or entry.gid is None):
                why.append(f"{_setid_names(entry.mode)} with no recorded owner (it would become the "
                           "downloader's)")
            if why:
                problems.append(f"{entry.path}: {', '.join(why)}")
        result[entry.path] = entry
    return result, problems, reowned


def _rdev(entry: FileMeta) -> str:
    assert entry.rdev is not None
    return f"{entry.rdev[0]},{entry.rdev[1]}"


def _can_make_devices() -> bool:
    """CAP_MKNOD, effective, in the initial user namespace: the kernel refuses devices to any other."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            caps = next((int(line.split()[1], 16) for line in status if line.startswith("CapEff:")), 0)
        with open("/proc/self/uid_map", encoding="ascii") as uid_map:
            initial = uid_map.read().split() == ["0", "0", "4294967295"]
    except OSError:  # no procfs: the mknod itself decides, and its EPERM is refused the same way
        return os.geteuid() == 0
    return bool(caps >> _CAP_MKNOD & 1) and initial


def _why_not(entry: FileMeta, root: bool, me: int, groups: set[int]) -> list[str]:
    if root:
        return []
    why = []
    if entry.uid is not None and entry.uid != me:
        why.append(f"owner uid {entry.uid}")
    if entry.gid is not None and entry.gid not in groups:
        why.append(f"group gid {entry.gid}")
    why += [f"xattr {name} (needs privilege)" for name, _ in entry.xattrs or ()
            if name.startswith(_PRIVILEGED_PREFIXES)]
    return why


def _setid_names(mode: int) -> str:
    return "/".join(name for bit, name in ((stat.S_ISUID, "setuid"), (stat.S_ISGID, "setgid")) if mode & bit)


def _changes_for_current(entry: FileMeta, me: int, groups: set[int]) -> list[str]:
    """What ``owners="current"`` changes in ``entry`` for this process, root or not (empty: nothing)."""
    changes = []
    if entry.uid is not None and entry.uid != me:
        changes.append(f"owner uid {entry.uid}")
    if entry.gid is not None and entry.gid not in groups:
        changes.append(f"group gid {entry.gid}")
    if entry.mode & _SETID:
        unowned = " with no recorded owner" if entry.uid is None or entry.gid is None else ""
        changes.append(f"{_setid_names(entry.mode)}{unowned} cleared")
    changes += [f"xattr {name} dropped" for name, _ in entry.xattrs or () if name.startswith(_PRIVILEGED_PREFIXES)]
    return changes


def _reowned(entry: FileMeta, uid: int, gid: int, groups: set[int]) -> FileMeta:
    # Never a setuid/setgid file the manifest's word alone put there, never a capability moved to
    # another owner: both are privilege the downloader was not given. A recorded group the process is
    # in stays (it could chgrp the file itself); an unrecorded owner becomes the downloader's explicitly.
    xattrs = None if entry.xattrs is None else tuple(
        (name, value) for name, value in entry.xattrs if not name.startswith(_PRIVILEGED_PREFIXES))
    kept_gid = entry.gid if entry.gid is not None and entry.gid in groups else gid
    return attrs.evolve(entry, uid=uid, gid=kept_gid, xattrs=xattrs, mode=entry.mode & ~_SETID)


def apply_fd(fd: int, entry: FileMeta, where: str) -> None:
    """Owner, xattrs (exactly), mode and restorable flags of an open file or directory; read back. A call
    that fails names ``where``, never the fd (:func:`~artifactkit._fsutil.naming`)."""
    with naming(where):
        _apply_fd(fd, entry, where)


def _apply_fd(fd: int, entry: FileMeta, where: str) -> None:
    uid, gid, wanted = entry.uid, entry.gid, entry.xattrs
    if uid is not None and gid is not None:
        named("fchown", os.fchown, fd, uid, gid)
    xattrs: Xattrs | None = None
    if wanted is not None:
        present = None
        if not wanted:
            with contextlib.suppress(OSError):  # _set_xattrs_exactly lists again and names the failure
                present = os.listxattr(fd)
        # The usual new file: none wanted, none there, and that listing was the read-back.
        xattrs = () if present == [] else _set_xattrs_exactly(fd, wanted, where)
    named("fchmod", os.fchmod, fd, entry.mode)
    flags = None
    if entry.flags is not None and (flags := named("ioctl", flags_if_unchanged, fd, entry.flags)) is None:
        # Also when the source had none: ext4 passes sync/nodump/dirsync on from the parent. The
        # result is the kernel's value read back after the change (or unchanged, as read).
        result = named("ioctl", restore_flags_fd, fd, entry.flags, where)
        if result.flags is None and entry.flags & _COMPARED_INT:
            raise flags_not_restorable(where, entry.flags, result)
        flags = int(result.flags) if result.flags is not None else None
    if mismatch := read_back_mismatch(entry, xattrs=xattrs, flags=flags):
        raise mismatch


def apply_symlink(dir_fd: int, name: str, entry: FileMeta) -> None:
    """Owner and xattrs of a symlink itself (``lchown``; no link is followed)."""
    if entry.uid is not None and entry.gid is not None:
        named("chown", os.chown, name, entry.uid, entry.gid, dir_fd=dir_fd, follow_symlinks=False)
    if entry.xattrs:
        path = f"{_proc(dir_fd)}/{name}"
        with naming(entry.path):  # not the /proc path the call went through
            for xname, value in entry.xattrs:
                named("setxattr", os.setxattr, path, xname, value, follow_symlinks=False)


def create_special(dir_fd: int, name: str, entry: FileMeta) -> None:
    """Make a FIFO or device node ``name`` under ``dir_fd`` with ``entry``'s owner, xattrs (read back), mode
    and times; kind, device number, owner and times are read back with its siblings (``verify_stored``)."""
    private = KIND_IFMT[entry.kind] | 0o600  # nobody else may open it before its mode is set
    try:
        if entry.kind in DEVICE_KINDS:
            assert entry.rdev is not None
            named("mknod", os.mknod, name, private, os.makedev(*entry.rdev), dir_fd=dir_fd)
        else:
            named("mkfifo", os.mkfifo, name, 0o600, dir_fd=dir_fd)
    except OSError as err:
        # What plan could not see: EPERM (a seccomp filter, overlayfs's own whiteout 0,0), EINVAL (a device
        # number the filesystem cannot hold: xfs keeps a minor below 2**18).
        if err.errno not in (errno.EPERM, errno.EINVAL):
            raise
        what = f" {entry.rdev[0]},{entry.rdev[1]}" if entry.rdev is not None else ""
        raise NotRestorableError(f"download refused: cannot create {entry.kind}{what} {entry.path!r} on this "
                                 f"filesystem ({os.strerror(err.errno or 0)}); nothing was made visible",
                                 entries=[entry.path]) from err
    if entry.uid is not None and entry.gid is not None:
        named("chown", os.chown, name, entry.uid, entry.gid, dir_fd=dir_fd, follow_symlinks=False)
    # By path through the directory's fd: an O_PATH fd takes no xattr or mode calls, and opening it blocks.
    path = f"{_proc(dir_fd)}/{name}"
    with naming(entry.path):  # not the /proc path the call went through
        xattrs = None if entry.xattrs is None else _set_xattrs_exactly(path, entry.xattrs, entry.path)
    named("chmod", os.chmod, name, entry.mode, dir_fd=dir_fd)  # after chown, which clears setuid/setgid
    named("utime", os.utime, name, ns=(entry.atime_ns, entry.mtime_ns), dir_fd=dir_fd, follow_symlinks=False)
    if mismatch := read_back_mismatch(entry, xattrs=xattrs, flags=None):
        raise mismatch


def _proc(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _set_xattrs_exactly(fd: int | str, wanted: Xattrs, where: str) -> Xattrs:
    """Make the inode's xattrs exactly ``wanted``; return what it holds afterwards, read back. ``fd`` is an
    open fd or the path of a FIFO or device (never followed: os refuses ``follow_symlinks=False`` with an fd)."""
    by_path = {} if isinstance(fd, int) else {"follow_symlinks": False}
    try:
        try:
            present = set(named("listxattr", os.listxattr, fd, **by_path))
        except OSError as err:
            # sshfs, s3fs, ramfs: no xattrs at all. The filesystem holds none, and none is wanted: exact.
            if err.errno in _NO_XATTRS and not wanted:
                return ()
            raise
        if not present and not wanted:
            return ()  # the common case: that listing was the read-back
        for name, value in wanted:
            named("setxattr", os.setxattr, fd, name, value, **by_path)
        for name in sorted(present - {name for name, _ in wanted}):
            # e.g. an ACL inherited from the destination's default ACL
            named("removexattr", os.removexattr, fd, name, **by_path)
        return read_xattrs(fd)
    except OSError as err:
        if err.errno not in (*_NO_XATTRS, errno.EPERM):
            raise
        raise xattrs_not_restorable(where, err) from err


def xattrs_not_restorable(where: str, err: OSError) -> NotRestorableError:
    """The refusal of xattrs this filesystem cannot hold (``ENOTSUP``: it has none) or this user may not set."""
    lack = ": this filesystem does not support xattrs" if err.errno in _NO_XATTRS else ""
    return NotRestorableError(f"download refused: cannot restore the xattrs of {where!r} here{lack} "
                              f"({os.strerror(err.errno or 0)}); nothing was made visible", entries=[where])


def read_back_mismatch(entry: FileMeta, *, xattrs: Xattrs | None, flags: int | None) -> MetadataMismatchError | None:
    """The error a download raises where the ``xattrs`` and ``flags`` read back of ``entry``'s new inode differ
    from the manifest's (each ``None``: not read back); ``None`` where they agree."""
    # The common case, decided without building objects: exactly what compare_extended finds no
    # difference in (xattrs equal where both are recorded; the compared flag bits equal).
    if ((xattrs is None or entry.xattrs is None or xattrs == entry.xattrs)
            and (flags is None or entry.flags is None or not (flags ^ entry.flags) & _COMPARED_INT)):
        return None
    # Only a mismatch needs the comparison modules: a download that finds none never imports them.
    from artifactkit.metadata.compare import format_mismatches  # noqa: PLC0415
    from artifactkit.metadata.extended_compare import compare_extended  # noqa: PLC0415
    stored = attrs.evolve(entry, xattrs=xattrs, flags=flags)
    found = [attrs.evolve(m, stage="download") for m in compare_extended(entry, stored, ("xattrs", "flags"))]
    if not found:
        return None
    return MetadataMismatchError(format_mismatches(found, stage="download"), stage="download", mismatches=found)


def flags_not_restorable(where: str, flags: int, result: FlagResult) -> NotRestorableError:
    """The error a download raises where the inode flags ``flags`` of ``where`` could not be set (``result``:
    what the attempt achieved)."""
    letters = flag_letters(flags & COMPARED_FLAGS)
    why = os.strerror(result.errno) if result.errno else "no flags"
    return NotRestorableError(f"download refused: cannot set inode flag(s) {letters} on {where!r} here "
                              f"({result.status}: {why}); nothing was made visible", entries=[where])
