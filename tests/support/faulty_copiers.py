"""Copiers for the conformance kit's own tests, importable as ``tests.support.faulty_copiers:NAME``.

``exact`` copies a tree with every piece of metadata the checks look at and touches nothing on the
source (``O_NOATIME`` for file reads and directory listings). Every other copier here is ``exact``
with one real-world bug class switched on, so each must fail exactly the checks that bug breaks.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import struct
import subprocess
from collections.abc import Callable

import attrs

from artifactkit._syscalls import open_noatime
from artifactkit.engine.reference.scan import scan_tree

NS = 1_000_000_000
Times = Callable[[os.stat_result, str], tuple[int, int]]


def _exact_times(st: os.stat_result, _dst: str) -> tuple[int, int]:
    return st.st_atime_ns, st.st_mtime_ns


@attrs.frozen
class Bugs:
    """Which bug a copy has; the default is none."""

    times: Times = _exact_times
    dir_times: bool = True
    dir_times_first: bool = False
    link_times: bool = True
    follow_symlinks: bool = False
    links_as_files: bool = False
    stat_after_read: bool = False
    hole_block: int = 0
    noatime_reads: bool = True
    mode_mask: int = 0o7777
    umask: int = 0
    drop_devices: bool = False


def _open_source(path: str, flags: int, bugs: Bugs) -> int:
    if bugs.noatime_reads:
        return open_noatime(path, flags)[0]
    return os.open(path, flags | os.O_CLOEXEC)


def _set_times(st: os.stat_result, dst: str, bugs: Bugs, *, follow: bool) -> None:
    atime, mtime = bugs.times(st, dst)
    os.utime(dst, ns=(atime, mtime), follow_symlinks=follow)


def _copy_file(src: str, dst: str, st: os.stat_result, bugs: Bugs) -> None:
    fd = _open_source(src, os.O_RDONLY, bugs)
    try:
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if bugs.hole_block:
                _copy_skipping_zero_blocks(fd, out, st.st_size, bugs.hole_block)
            else:
                while chunk := os.read(fd, 1 << 20):
                    os.write(out, chunk)
            os.fchmod(out, stat.S_IMODE(st.st_mode) & bugs.mode_mask & ~bugs.umask)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    if bugs.stat_after_read:
        st = os.lstat(src)  # the atime its own read just moved is what it records
    _set_times(st, dst, bugs, follow=True)


def _copy_skipping_zero_blocks(fd: int, out: int, size: int, block: int) -> None:
    """Holes wherever a whole ``block`` is zeros, data (zeros included) elsewhere: ``cp --sparse=always``
    with a coarse block, or an archive that stores holes in its own unit."""
    os.ftruncate(out, size)
    for offset in range(0, size, block):
        chunk = os.pread(fd, block, offset)
        if chunk.count(0) != len(chunk):
            os.pwrite(out, chunk, offset)


def _link_as_file(link: str, dst: str, st: os.stat_result, bugs: Bugs) -> None:
    """A link stored as a file holding its target's text, with the link's own times (a dangling one
    is dropped): only the kind is wrong, so nothing but the kind can show it."""
    if not os.path.exists(link):
        return
    with open(dst, "xb") as out:
        out.write(os.fsencode(os.readlink(link)))
    os.chmod(dst, 0o644)
    _set_times(st, dst, bugs, follow=True)


def _copy_special(dst: str, st: os.stat_result, bugs: Bugs, made: dict[tuple[int, int], str]) -> None:
    """A FIFO or device node made again with ``mknod`` (never opened); a second name of one is linked."""
    if (st.st_dev, st.st_ino) in made:
        os.link(made[st.st_dev, st.st_ino], dst)
        return
    if bugs.drop_devices and (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        return  # what a copier without CAP_MKNOD, or without rsync's -D, leaves behind
    os.mknod(dst, stat.S_IFMT(st.st_mode) | 0o600, st.st_rdev)
    os.chmod(dst, stat.S_IMODE(st.st_mode) & bugs.mode_mask & ~bugs.umask)
    _set_times(st, dst, bugs, follow=False)
    made[st.st_dev, st.st_ino] = dst


def copy_tree(src: str, dst: str, bugs: Bugs = Bugs(), made: dict[tuple[int, int], str] | None = None) -> None:
    """Copy ``src`` to ``dst`` (absent): every ``stat`` before the read it could be moved by."""
    made = {} if made is None else made
    st = os.lstat(src)  # taken before the listing below could move the directory's atime
    os.mkdir(dst, 0o700)
    if bugs.dir_times_first:
        _set_times(st, dst, bugs, follow=True)  # creating the children below moves mtime again
    fd = _open_source(src, os.O_RDONLY | os.O_DIRECTORY, bugs)
    try:
        names = sorted(os.listdir(fd))
    finally:
        os.close(fd)
    for name in names:
        child, target = os.path.join(src, name), os.path.join(dst, name)
        child_st = os.lstat(child)
        if stat.S_ISLNK(child_st.st_mode) and bugs.follow_symlinks:
            if not os.path.exists(child):
                continue  # like shutil.copytree(ignore_dangling_symlinks=True)
            child_st = os.stat(child)
        if stat.S_ISDIR(child_st.st_mode):
            copy_tree(os.path.realpath(child) if bugs.follow_symlinks else child, target, bugs, made)
        elif stat.S_ISREG(child_st.st_mode):
            _copy_file(os.path.realpath(child) if bugs.follow_symlinks else child, target, child_st, bugs)
        elif stat.S_ISLNK(child_st.st_mode) and bugs.links_as_files:
            _link_as_file(child, target, child_st, bugs)
        elif stat.S_ISLNK(child_st.st_mode):
            os.symlink(os.readlink(child), target)
            if bugs.link_times:
                _set_times(child_st, target, bugs, follow=False)
        elif not stat.S_ISSOCK(child_st.st_mode):
            _copy_special(target, child_st, bugs, made)
    # Mode and times last: children are in, so nothing later changes this directory's mtime.
    os.chmod(dst, stat.S_IMODE(st.st_mode) & bugs.mode_mask & ~bugs.umask)
    if bugs.dir_times and not bugs.dir_times_first:
        _set_times(st, dst, bugs, follow=True)


def exact(src: str, dst: str) -> None:
    """The control: passes every check."""
    copy_tree(src, dst)


def drops_devices(src: str, dst: str) -> None:
    """Copies FIFOs but leaves device nodes out (rsync ``-a --no-devices``, a copier without CAP_MKNOD)."""
    copy_tree(src, dst, Bugs(drop_devices=True))


def drops_atime(src: str, dst: str) -> None:
    """Sets mtime and keeps the atime the copy itself left (rsync without ``--atimes``)."""
    copy_tree(src, dst, Bugs(times=lambda st, d: (os.lstat(d).st_atime_ns, st.st_mtime_ns)))


def truncates_to_seconds(src: str, dst: str) -> None:
    """Sets times from whole seconds (``int(st.st_mtime)``, ``touch -d @S``, old tar formats)."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (st.st_atime_ns // NS * NS, st.st_mtime_ns // NS * NS)))


def float_round_trip(src: str, dst: str) -> None:
    """Sets times through float seconds: what ``os.utime(p, (st.st_atime, st.st_mtime))`` stores."""
    def times(st: os.stat_result, dst_path: str) -> tuple[int, int]:
        # Let the kernel store exactly what the float API would, then read the stored value back.
        os.utime(dst_path, (st.st_atime, st.st_mtime), follow_symlinks=False)
        stored = os.lstat(dst_path)
        return stored.st_atime_ns, stored.st_mtime_ns
    copy_tree(src, dst, Bugs(times=times))


def forgets_directory_times(src: str, dst: str) -> None:
    """Never sets directory times (``cp -r`` with ``--preserve`` applied to files only)."""
    copy_tree(src, dst, Bugs(dir_times=False))


def sets_directory_times_before_children(src: str, dst: str) -> None:
    """Sets each directory's times right after ``mkdir`` (a pre-order walk): children move mtime."""
    copy_tree(src, dst, Bugs(dir_times_first=True))


def forgets_symlink_times(src: str, dst: str) -> None:
    """Creates links but never ``utime(follow_symlinks=False)`` on them."""
    copy_tree(src, dst, Bugs(link_times=False))


def follows_symlinks(src: str, dst: str) -> None:
    """Copies what links point to instead of the links (``shutil.copytree`` defaults)."""
    copy_tree(src, dst, Bugs(follow_symlinks=True))


def links_become_files(src: str, dst: str) -> None:
    """Stores each link as a regular file of its target's text with the link's times; drops dangling ones
    (archivers without a link type, object stores)."""
    copy_tree(src, dst, Bugs(links_as_files=True))


def floors_to_100ns(src: str, dst: str) -> None:
    """Sets times floored to 100 ns: Windows FILETIME, 7-Zip's timestamps."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (st.st_atime_ns // 100 * 100, st.st_mtime_ns // 100 * 100)))


def _wrap(value_ns: int, signed: bool) -> int:
    seconds, frac = divmod(value_ns, NS)
    wrapped = (seconds + 2**31) % 2**32 - 2**31 if signed else seconds % 2**32
    return wrapped * NS + frac


def wraps_to_unsigned_32_bit_seconds(src: str, dst: str) -> None:
    """Keeps seconds in a ``uint32`` (ns kept): a 1966 time comes back in 2102."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (_wrap(st.st_atime_ns, False), _wrap(st.st_mtime_ns, False))))


def wraps_to_signed_32_bit_seconds(src: str, dst: str) -> None:
    """Keeps seconds in an ``int32`` (ns kept): a 2100 time comes back in 1963."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (_wrap(st.st_atime_ns, True), _wrap(st.st_mtime_ns, True))))


def _i64_ns(ns: int, wrap: bool) -> int:
    return (ns + 2**63) % 2**64 - 2**63 if wrap else max(-(2**63), min(ns, 2**63 - 1))


def clamps_to_i64_ns(src: str, dst: str) -> None:
    """Keeps a time as one ``int64`` of ns, saturating: a 2400 time comes back on 2262-04-11, the count's end."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (_i64_ns(st.st_atime_ns, False), _i64_ns(st.st_mtime_ns, False))))


def _s32_seconds(ns: int) -> int:
    return ns if -(2**31) <= ns // NS <= 2**31 - 1 else max(-(2**31), min(ns // NS, 2**31 - 1)) * NS


def clamps_to_32_bit_seconds(src: str, dst: str) -> None:
    """Keeps seconds in an ``int32``, saturating as the kernel does on a 32-bit filesystem (the edge's whole
    second, its ns dropped): a 2100 time comes back on 2038-01-19."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (_s32_seconds(st.st_atime_ns), _s32_seconds(st.st_mtime_ns))))


def wraps_to_i64_ns(src: str, dst: str) -> None:
    """Keeps a time as one ``int64`` of ns, overflowing (C's ``sec * 1000000000``): 2400 comes back in 1815."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (_i64_ns(st.st_atime_ns, True), _i64_ns(st.st_mtime_ns, True))))


def sets_atime_to_floored_mtime(src: str, dst: str) -> None:
    """An archive with whole-second mtimes and no atime: atime := mtime, both floored; directory times are
    set when the directory is made, so its children move its mtime afterwards."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (st.st_mtime_ns // NS * NS, st.st_mtime_ns),
                             dir_times_first=True))


def records_atime_after_reading(src: str, dst: str) -> None:
    """Reads each file plainly, then stats it: the atime it stores is the one its read just moved."""
    copy_tree(src, dst, Bugs(noatime_reads=False, stat_after_read=True))


def coarsens_holes(src: str, dst: str) -> None:
    """Keeps holes only where a whole 64 KiB block is zeros: fewer hole bytes than the source had."""
    copy_tree(src, dst, Bugs(hole_block=65536))


def verifies_after_restore(src: str, dst: str) -> None:
    """Exact copy, then a checksum pass over its own output after the times were set (``rsync -c``-like
    verify steps, backup tools' post-restore check): every file and directory it reads shows that read."""
    copy_tree(src, dst)
    _after_a_clock_tick(dst)
    for dirpath, _dirs, files in os.walk(dst):  # os.walk lists plainly, and follows links to see dirs
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                with open(path, "rb") as handle:
                    handle.read()


def _after_a_clock_tick(dst: str) -> None:
    """Return once the filesystem's clock has passed the copy's last ctime.

    Atimes come from the kernel's coarse clock while ctimes may be fine-grained (multigrain timestamps,
    Linux 6.13+): a read within the same tick as the ``utime`` can leave atime *below* ctime, which no
    timestamp can tell from the copy time ("omitted", still a failure). A real verify pass over a tree
    starts later than that; this one waits for the tick instead of racing it (bounded: one second).
    """
    newest = max(os.lstat(os.path.join(d, n)).st_ctime_ns for d, ds, fs in os.walk(dst) for n in (*ds, *fs, "."))
    marker = os.path.join(os.path.dirname(dst), ".tick")
    for _ in range(100_000):
        with open(marker, "wb"):
            pass
        stamped = os.lstat(marker).st_mtime_ns
        os.unlink(marker)
        if stamped > newest:
            return
    raise RuntimeError("the filesystem clock did not pass the copy's ctime within 100,000 file creations")


# include/uapi/linux/fs.h: FS_IOC_GETFLAGS / FS_IOC_SETFLAGS transfer a C int (x86-64 numbers).
_GETFLAGS, _SETFLAGS = 0x80086601, 0x40086602


def _flags_word(path: str, value: int | None = None) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOATIME)
    try:
        if value is not None:
            fcntl.ioctl(fd, _SETFLAGS, struct.pack("i", value))
        return int(struct.unpack("i", fcntl.ioctl(fd, _GETFLAGS, struct.pack("i", 0)))[0])
    finally:
        os.close(fd)


def restores_source_flags(src: str, dst: str) -> None:
    """Exact copy that also sets each file's and directory's whole flags word to the source's, as
    ``bsdtar --fflags`` does: whatever the destination gave a new inode (an inherited ``A``) is gone."""
    copy_tree(src, dst)
    for entry in scan_tree(src, read_links=False).entries:
        if entry.kind in ("file", "dir"):
            _flags_word(os.path.join(dst, entry.path), _flags_word(os.path.join(src, entry.path)))


def drops_special_bits(src: str, dst: str) -> None:
    """Keeps ``rwx`` bits only (``chmod(st.st_mode & 0o777)``): setuid, setgid and sticky lost."""
    copy_tree(src, dst, Bugs(mode_mask=0o777))


def applies_umask(src: str, dst: str) -> None:
    """Creates with the source mode minus a 022 umask, as ``open(..., mode)`` does."""
    copy_tree(src, dst, Bugs(umask=0o022))


def reads_source_plainly(src: str, dst: str) -> None:
    """Exact output, but reads and lists the source without ``O_NOATIME`` (``cp -a``)."""
    copy_tree(src, dst, Bugs(noatime_reads=False))


def copies_elsewhere_then_renames_in(src: str, dst: str) -> None:
    """Exact output built outside the private tree (its parent's parent) and renamed in.

    A renamed inode keeps the flags it was created with, so nothing protects its atime afterwards.
    """
    staging = os.path.join(os.path.dirname(os.path.dirname(dst)), "staging-" + os.path.basename(dst))
    copy_tree(src, staging)
    os.rename(staging, dst)


def fails_after_partial_copy(src: str, dst: str) -> None:
    """Copies only the top directory and exits non-zero, like a tool hitting an error half-way."""
    os.mkdir(dst, 0o700)
    subprocess.run(["false"], check=True)


def refuses_symlinks(src: str, dst: str) -> None:
    """Exits non-zero before creating ``dst`` on a tree that holds a link (an archiver without a link
    type); copies any other tree exactly."""
    # Looked at with lstat and O_NOATIME listings only: the refusal itself must move no source time.
    if any(entry.kind == "symlink" for entry in scan_tree(src, read_links=False).entries):
        subprocess.run(["sh", "-c", "echo 'refusing to archive a symlink' >&2; exit 4"], check=True,
                       capture_output=True, text=True)
    copy_tree(src, dst)


def rewrites_source_times_and_modes(src: str, dst: str) -> None:
    """Exact output, then "normalizes" the source: its file mtimes to whole seconds (atime kept exactly) and
    group write flipped on its files, as a tool that touches what it archived would."""
    copy_tree(src, dst)
    for entry in scan_tree(src, read_links=False).entries:
        if entry.kind == "file":
            path = os.path.join(src, entry.path)
            os.utime(path, ns=(entry.atime_ns, entry.mtime_ns // NS * NS))
            os.chmod(path, entry.mode ^ 0o020)


def removes_source(src: str, dst: str) -> None:
    """``mv``: a perfect destination and no source left."""
    copy_tree(src, dst)
    shutil.rmtree(src)
