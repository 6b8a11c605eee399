"""Every filesystem a user may run artifactkit on: what each really is, and how to build one.

The expectations below come from the kernel sources (cited per row) and were confirmed on
Linux 6.18 by the experiments in ``tests/test_fs_matrix.py`` (and ``diagnostics/fs_matrix.py``,
whose run is kept in ``diagnostics/results/fs-matrix.json``). They are *never* copied from the
probe's own output: the probe is what is being checked. Every filesystem behaved as its sources
say; the one disagreement found was the probe's (btrfs: it measured the flag's effect on a file
that had not inherited it, so it reported "not effective"; fixed in ``artifactkit/probe.py``).

Also here, shared by the tests and ``diagnostics/fs_matrix.py``: the strict fixture's outcome and
a store round trip of a corpus tree, each run the same way in both places.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import attrs

from artifactkit.conformance.corpus import load_tree, materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import IsolationError, NotRestorableError, TimestampNotRepresentable
from artifactkit.isolation.time_range import TimeRange
from artifactkit.isolation.tree import private_noatime_tree
from artifactkit.metadata.compare import assert_metadata_equal
from artifactkit.store.store import Store
from tests.support.mounts import Mounts

NS_PER_S: Final = 1_000_000_000
S32_MIN: Final = -(2**31)
S32_MAX: Final = 2**31 - 1
#: ext4 with 256-byte inodes: 34-bit seconds from S32_MIN (fs/ext4/ext4.h EXT4_EXTRA_TIMESTAMP_MAX), 2446-05-10.
EXT4_EXTRA_MAX: Final = (1 << 34) - 1 + S32_MIN
#: xfs bigtime (default since xfsprogs 5.15): fs/xfs/libxfs/xfs_format.h XFS_BIGTIME_TIME_MAX, 2486-07-02.
XFS_BIGTIME_MAX: Final = 16_299_260_424
#: timespec64's signed 64-bit seconds (include/linux/time64.h TIME64_MIN/MAX): the range of tmpfs, ramfs, btrfs.
S64_RANGE: Final = (-(2**63), 2**63 - 1)
#: What the probe tries (artifactkit.isolation.probe PRE_1970_NS / POST_2038_NS), in seconds.
PROBE_PRE_1970_S: Final = -315_619_200
PROBE_POST_2038_S: Final = 4_102_444_800

Policy = Literal["strictatime", "relatime", "noatime"]
Flag = Literal["supported", "unsupported"]
#: The strict fixture's outcome: a flagged tree, a tree that needs no flag, or the refusal's ``failed``.
Outcome = Literal["flag", "noatime-mount", "IsolationError:unsupported", "IsolationError:inheritance"]


@attrs.frozen
class FsSpec:
    """One filesystem of the matrix and what it really is."""

    name: str                      #: test id and table row
    fs_type: str                   #: as /proc/self/mountinfo names it
    made_with: str                 #: how the row is built, for people
    build: Callable[[Mounts], Path] = attrs.field(repr=False)
    policy: Policy                 #: what reads do to atime
    flag: Flag                     #: FS_IOC_SETFLAGS with FS_NOATIME_FL
    inherited: bool | None         #: new dirs and files inside a flagged dir get the flag
    granularity_ns: int
    #: Seconds range (min, max) the kernel clamps to; None: 64-bit seconds, nothing a utime can exceed.
    range_s: tuple[int, int] | None
    fixture: Outcome
    evidence: str                  #: kernel source, or the observation that overrode it
    tool: tuple[str, str] | None = None  #: (mkfs program, Debian package) beyond e2fsprogs/util-linux
    xattrs: bool = True            #: user.* xattrs and POSIX ACLs can be set
    #: Whether a device node of ``(major, minor)`` can be made here (mknod answers EINVAL or EPERM otherwise).
    holds_device: Callable[[int, int], bool] = lambda major, minor: True

    @property
    def flag_effective(self) -> bool | None:
        """A read of a flagged inode leaves atime; unknowable where reads never move it (no control)."""
        if self.flag != "supported" or self.policy == "noatime":
            return None
        return True

    @property
    def pre_1970_ok(self) -> bool:
        return self.range_s is None or self.range_s[0] <= PROBE_PRE_1970_S

    @property
    def post_2038_ok(self) -> bool:
        return self.range_s is None or self.range_s[1] >= PROBE_POST_2038_S

    @property
    def time_range_s(self) -> tuple[int, int]:
        """The whole seconds held, ends included: what the probe's ``time_range`` must measure."""
        return self.range_s or S64_RANGE

    def holds(self, value_ns: int) -> bool:
        """Whether this filesystem stores ``value_ns`` exactly (granularity and range)."""
        seconds = value_ns // NS_PER_S
        in_range = self.range_s is None or self.range_s[0] <= seconds <= self.range_s[1]
        return in_range and value_ns % self.granularity_ns == 0

    def round_trip_outcome(self, corpus: str) -> str:
        """``exact`` when every supplied value fits, else the download must refuse, naming why."""
        entries = load_tree(corpus, TimeRange(*self.time_range_s, self.granularity_ns)).entries
        if (not self.xattrs and any(e.xattrs for e in entries)) or (
                self.flag != "supported" and any(e.flags for e in entries)) or any(
                e.rdev is not None and e.kind in ("char", "block") and not self.holds_device(*e.rdev) for e in entries):
            return "NotRestorableError"
        fits = all(self.holds(e.mtime_ns) and self.holds(e.atime_ns) for e in entries)
        return "exact" if fits else "TimestampNotRepresentable"

    def expected_probe(self) -> dict[str, object]:
        """The ``artifactkit.probe/1`` fields this filesystem must produce."""
        return {
            "fs_type": self.fs_type,
            "atime_policy": self.policy,
            "reads_move_historical_atime": self.policy != "noatime",
            "reads_move_future_atime": self.policy == "strictatime",
            "noatime_flag": self.flag,
            "flag_inherited": self.inherited,
            "flag_effective": self.flag_effective,
            "granularity_ns": self.granularity_ns,
            "pre_1970_ok": self.pre_1970_ok,
            "post_2038_ok": self.post_2038_ok,
            "time_range": list(self.time_range_s),
        }


_EXT4 = ("fs/ext4/ialloc.c __ext4_new_inode: ext4_mask_flags(mode, EXT4_I(dir)->i_flags & "
         "EXT4_FL_INHERITED), and EXT4_NOATIME_FL is in EXT4_FL_INHERITED")
_TMPFS = "mm/shmem.c __shmem_get_inode: info->fsflags = dir->fsflags & SHMEM_FL_INHERITED (since 6.0)"
_RANGE_EXT4 = (S32_MIN, EXT4_EXTRA_MAX)


def _ext4(options: str, mkfs: tuple[str, ...] = ()) -> Callable[[Mounts], Path]:
    return lambda mounts: mounts.ext4(options, mkfs_args=mkfs)


def _tmpfs(options: str) -> Callable[[Mounts], Path]:
    return lambda mounts: mounts.tmpfs(options, size="128m")


MATRIX: Final[tuple[FsSpec, ...]] = (
    FsSpec("ext4-relatime", "ext4", "mkfs.ext4; mount defaults (relatime)", _ext4(""),
           "relatime", "supported", True, 1, _RANGE_EXT4, "flag", _EXT4),
    FsSpec("ext4-strictatime", "ext4", "mkfs.ext4; -o strictatime", _ext4("strictatime"),
           "strictatime", "supported", True, 1, _RANGE_EXT4, "flag", _EXT4),
    FsSpec("ext4-noatime", "ext4", "mkfs.ext4; -o noatime", _ext4("noatime"),
           "noatime", "supported", True, 1, _RANGE_EXT4, "noatime-mount", _EXT4),
    # lazytime only delays writing atime to disk; stat sees the in-memory value, so reads still
    # "move" it exactly as under relatime (fs/inode.c: lazytime marks I_DIRTY_TIME, not skip).
    FsSpec("ext4-lazytime", "ext4", "mkfs.ext4; -o lazytime (relatime)", _ext4("lazytime"),
           "relatime", "supported", True, 1, _RANGE_EXT4, "flag", _EXT4),
    # 128-byte inodes have no extra time fields: whole seconds, signed 32-bit, clamped since 5.4
    # (fs/ext4/ext4.h EXT4_EINODE_SET_XTIME; super.c sets s_time_max = S32_MAX without extra isize).
    FsSpec("ext4-I128", "ext4", "mkfs.ext4 -I 128; relatime", _ext4("relatime", ("-I", "128")),
           "relatime", "supported", True, NS_PER_S, (S32_MIN, S32_MAX), "flag", _EXT4),
    FsSpec("tmpfs-strictatime", "tmpfs", "-o strictatime", _tmpfs("strictatime"),
           "strictatime", "supported", True, 1, None, "flag", _TMPFS),
    FsSpec("tmpfs-relatime", "tmpfs", "-o relatime", _tmpfs("relatime"),
           "relatime", "supported", True, 1, None, "flag", _TMPFS),
    FsSpec("tmpfs-noatime", "tmpfs", "-o noatime", _tmpfs("noatime"),
           "noatime", "supported", True, 1, None, "noatime-mount", _TMPFS),
    FsSpec("ramfs", "ramfs", "mount -t ramfs (relatime)", Mounts.ramfs,
           "relatime", "unsupported", None, 1, None, "IsolationError:unsupported",
           "fs/ramfs/file-mmu.c: no fileattr_get/set, so FS_IOC_GETFLAGS answers ENOTTY; no xattr handlers "
           "(user.*/ACL: EOPNOTSUPP)", xattrs=False),
    FsSpec("xfs", "xfs", "mkfs.xfs (bigtime); relatime", lambda mounts: mounts.xfs(),
           "relatime", "supported", True, 1, (S32_MIN, XFS_BIGTIME_MAX), "flag",
           "fs/xfs/xfs_inode.c xfs_inode_inherit_flags: XFS_DIFLAG_NOATIME to files and dirs "
           "while sysctl fs.xfs.inherit_noatime=1 (default)", ("mkfs.xfs", "xfsprogs"),
           # xfs keeps a device number in 32 bits (include/linux/kdev_t.h sysv_valid_dev: a minor below 2**18):
           # block 241,1048575 is EINVAL there (seen), 241,262143 is made.
           holds_device=lambda major, minor: major < 2**14 and minor < 2**18),
    FsSpec("btrfs", "btrfs", "mkfs.btrfs; relatime", lambda mounts: mounts.btrfs(),
           "relatime", "supported", False, 1, None, "IsolationError:inheritance",
           "fs/btrfs/inode.c btrfs_inherit_iflags: only NODATACOW/COMPRESS/NOCOMPRESS pass on; "
           "the flag works on an inode that carries it", ("mkfs.btrfs", "btrfs-progs")),
    # Flags and times are the upper layer's (fs/overlayfs/inode.c ovl_fileattr_set copies up and
    # sets on the real inode; new inodes are created in upper ext4): ext4's behaviour and range.
    FsSpec("overlay-on-ext4", "overlay", "overlay: lower, upper, work on ext4 (relatime)",
           lambda mounts: mounts.overlay(),
           "relatime", "supported", True, 1, _RANGE_EXT4, "flag",
           "fs/overlayfs: fileattr and timestamps go to the upper ext4 inode; " + _EXT4,
           # char 0,0 is overlayfs's own whiteout: a mknod of one through the overlay is EPERM (seen).
           holds_device=lambda major, minor: (major, minor) != (0, 0)),
)

BY_NAME: Final = {spec.name: spec for spec in MATRIX}


def build(spec: FsSpec, mounts: Mounts) -> Path:
    """The session's one mount of ``spec`` (built on first use)."""
    return mounts.shared(spec.name, spec.build)


def build_all(mounts: Mounts) -> dict[str, Path]:
    return {spec.name: build(spec, mounts) for spec in MATRIX}


def fixture_outcome(base: Path) -> str:
    """What ``private_noatime_tree`` does on ``base``: its mode, or ``IsolationError:<failed>``."""
    try:
        with private_noatime_tree(base) as tree:
            return tree.mode
    except IsolationError as err:
        return f"IsolationError:{err.context['failed']}"


def round_trip(corpus: str, work: Path, fallback: Path) -> str:
    """Publish ``corpus`` into a store in ``work`` and download it there, verified exactly.

    The source is made in ``work`` too, unless the filesystem cannot hold its values; then it
    is made in ``fallback`` (a tmpfs) so the download is what meets the limit. Returns ``exact``
    or ``TimestampNotRepresentable`` (the download refused and left nothing behind); any
    mismatch raises :class:`~artifactkit.errors.MetadataMismatchError`.
    """
    source = work / "src"
    try:
        supplied = materialize(corpus, source)
    except (TimestampNotRepresentable, OSError) as err:
        # EINVAL/EPERM of a mknod: a device number this filesystem cannot hold (xfs, overlay's whiteout).
        cannot_hold = (errno.ENOTSUP, errno.EOPNOTSUPP) + ((errno.EINVAL, errno.EPERM) if any(
            e.kind in ("char", "block") for e in load_tree(corpus).entries) else ())
        if isinstance(err, OSError) and err.errno not in cannot_hold:
            raise
        shutil.rmtree(source)
        source = Path(tempfile.mkdtemp(prefix="src-", dir=fallback)) / "src"
        supplied = materialize(corpus, source)
    try:
        store = Store(work / "store")
        ref = store.publish(source, corpus)
        assert_metadata_equal(supplied, store.manifest(ref).entries, stage="publish")
        dest = work / "dest"
        try:
            store.download(ref, dest)
        except (TimestampNotRepresentable, NotRestorableError) as refused:
            left = set(os.listdir(work))
            if left != {"store"} | ({"src"} if source.parent == work else set()):
                raise AssertionError(f"a refused download left {sorted(left)} beside the store") from None
            return type(refused).__name__
        assert_metadata_equal(supplied, capture_tree(dest), stage="download")
        return "exact"
    finally:
        if not source.is_relative_to(work):
            shutil.rmtree(source.parent)
