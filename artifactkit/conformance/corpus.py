"""The declarative tree corpus: TOML trees with historical ns timestamps, materialized exactly.

A tree file (``fixtures/<name>.toml``) lists ``[[entry]]`` tables (path, kind, mode, mtime_ns, atime_ns; a
name TOML cannot hold, bytes that are not UTF-8, is ``path_bytes``, a literal string whose ``\\xNN`` escapes
are bytes; files add ``size`` and ``seed``, symlinks ``target``, devices (``char``/``block``) ``rdev = [major,
minor]``; ``fifo`` is a kind too) and optional ``[[generate]]`` tables for many similar files. A time may
name an end of the filesystem's range instead (``"highest"``, ``"inside lowest"``: :meth:`TimeRange.value_ns`),
resolved against the range measured where the tree is built. :func:`materialize` builds it and returns the
:class:`FileMeta` values *as supplied* — the ground truth every later stage is checked against.

A device node other than the whiteout (0,0) needs CAP_MKNOD to be made: where this process lacks it,
:func:`materialize` builds the tree without them and :func:`devices_left_out` says so, so the rest of the
tree (FIFOs, the whiteout) is still checked and the devices are "not run", never a failure.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib.resources
import os
import random
import tempfile
import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from artifactkit.isolation.probe import granularity_of
from artifactkit.isolation.time_range import STORE_RANGE, TimeRange, measure_range
from artifactkit.manifest.paths import check_tree_shape
from artifactkit.metadata.flags import FLAG_LETTERS, restore_flags_fd
from artifactkit.metadata.model import DEVICE_KINDS, KIND_IFMT, ROOT, SPECIAL_KINDS, Extents, FileMeta, Xattrs
from artifactkit.metadata.render import ACL_NAMES, acl_bytes, acl_text
from artifactkit.metadata.times import deepest_first, set_times_exact


@attrs.frozen
class TreeSpec:
    """A corpus tree: its name, a sentence on what it exercises, and entries with content seeds."""

    name: str
    description: str
    entries: tuple[FileMeta, ...]
    seeds: dict[str, int] = attrs.field(eq=False)
    #: Whether a time names an end of the range: then the tree is built for the filesystem it is built on.
    names_range_ends: bool = False


def content(seed: int, size: int) -> bytes:
    """Deterministic bytes for a file: the same seed and size give the same content everywhere."""
    return random.Random(seed).randbytes(size)  # noqa: S311 - reproducible test data, not secrets


def corpus_names() -> list[str]:
    """Every tree bundled with the package, sorted."""
    files = importlib.resources.files("artifactkit.fixtures")
    return sorted(item.name.removesuffix(".toml") for item in files.iterdir() if item.name.endswith(".toml"))


def load_tree(name: str, time_range: TimeRange = STORE_RANGE) -> TreeSpec:
    """Load a bundled tree by name (``basic``, ``edge-times``, ...), its range ends those of ``time_range``."""
    resource = importlib.resources.files("artifactkit.fixtures") / f"{name}.toml"
    if not resource.is_file():
        raise LookupError(f"no corpus tree {name!r}; bundled trees: {', '.join(corpus_names())}")
    return parse_tree(name, tomllib.loads(resource.read_text(encoding="utf-8")), time_range)


def parse_tree(name: str, doc: dict[str, Any], time_range: TimeRange = STORE_RANGE) -> TreeSpec:
    """Turn a parsed TOML document into a validated :class:`TreeSpec`."""
    entries: list[FileMeta] = []
    seeds: dict[str, int] = {}
    for raw in doc.get("entry", []):
        entries.append(_entry(raw, seeds, time_range))
    for gen in doc.get("generate", []):
        for index in range(int(gen["count"])):
            raw = {
                "path": gen["pattern"].format(i=index, group=index // int(gen.get("per_dir", gen["count"]))),
                "kind": "file", "mode": gen["mode"], "size": gen["size"], "seed": int(gen["seed"]) + index,
                "mtime_ns": gen["mtime_ns"] + index * gen.get("step_ns", 0),
                "atime_ns": gen["atime_ns"] + index * gen.get("step_ns", 0),
            }
            entries.append(_entry(raw, seeds, time_range))
    check_tree_shape(entries, where=f"corpus tree {name!r}")
    ends = any(isinstance(raw[key], str) for raw in doc.get("entry", []) for key in ("mtime_ns", "atime_ns"))
    return TreeSpec(name=name, description=str(doc.get("description", "")), entries=tuple(entries), seeds=seeds,
                    names_range_ends=ends)


def _path(raw: dict[str, Any]) -> str:
    """``path``, or ``path_bytes`` (``'caf\\xe9'``: TOML strings are UTF-8, a Linux name is any bytes) as the kit
    names every path: :func:`os.fsdecode`, non-UTF-8 bytes as surrogate escapes."""
    if "path_bytes" not in raw:
        return str(raw["path"])
    return os.fsdecode(str(raw["path_bytes"]).encode("ascii").decode("unicode_escape").encode("latin-1"))


def _entry(raw: dict[str, Any], seeds: dict[str, int], time_range: TimeRange) -> FileMeta:
    kind = raw["kind"]
    raw = {**raw, "path": _path(raw)}
    sha256, size = None, 0
    extents = tuple((int(a), int(b)) for a, b in raw["extents"]) if "extents" in raw else None
    if kind == "file":
        size = int(raw.get("size", 0))
        seeds[raw["path"]] = int(raw.get("seed", 0))
        sha256 = hashlib.sha256(logical_content(seeds[raw["path"]], size, extents)).hexdigest()
    rdev = (int(raw["rdev"][0]), int(raw["rdev"][1])) if kind in DEVICE_KINDS else None
    return FileMeta(path=raw["path"], kind=kind, mode=int(raw["mode"]), size=size,
                    mtime_ns=_time(raw["mtime_ns"], time_range), atime_ns=_time(raw["atime_ns"], time_range),
                    sha256=sha256, target=raw.get("target"), uid=raw.get("uid"), gid=raw.get("gid"),
                    xattrs=_xattrs(raw["xattrs"]) if "xattrs" in raw else None, hardlink=raw.get("hardlink"),
                    extents=extents, flags=_flags(raw["flags"]) if "flags" in raw else None, rdev=rdev)


def _time(value: int | str, time_range: TimeRange) -> int:
    return time_range.value_ns(value) if isinstance(value, str) else int(value)


def time_range_at(directory: str) -> TimeRange:
    """The range a scratch file in ``directory`` holds (the probe's experiment, without the rest of the probe)."""
    fd, path = tempfile.mkstemp(prefix=".artifactkit-range-", dir=directory)
    os.close(fd)
    try:
        return measure_range(path, granularity_of(path))
    finally:
        os.unlink(path)


def logical_content(seed: int, size: int, extents: Extents | None) -> bytes:
    """A file's bytes as a reader sees them: the seeded content, zeros in the holes between data runs."""
    data = content(seed, size)
    if extents is None:
        return data
    sparse = bytearray(size)
    for start, length in extents:
        sparse[start:start + length] = data[start:start + length]
    return bytes(sparse)


def _xattrs(raw: dict[str, str]) -> Xattrs:
    # An ACL is written as getfacl-like text after "acl:"; any other value is UTF-8 text.
    return tuple(sorted((name, acl_bytes(value[4:]) if value.startswith("acl:") else value.encode())
                        for name, value in raw.items()))


def _flags(letters: str) -> int:
    known = {letter: int(flag) for flag, letter in FLAG_LETTERS.items()}
    return sum(known[letter] for letter in letters)


#: Why a corpus tree is left out for a user who cannot read what it holds.
NEEDS_ROOT = "not run: needs root"


def _allowed_on_a_scratch_file(mode: int, attempt: Callable[[str], object]) -> bool:
    """Whether ``attempt(path)`` works on a new file of ``mode`` this process owns: privilege found by
    trying, never guessed from euid (a user namespace makes euid 0 with few of root's powers)."""
    with tempfile.TemporaryDirectory(prefix="artifactkit-probe-") as scratch:
        path = os.path.join(scratch, "probe")
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        try:
            attempt(path)
        except OSError:  # EPERM/EACCES for a user, EINVAL for an id a user namespace cannot map
            return False
        return True


@functools.cache
def can_read_unreadable() -> bool:
    """Whether this process can open a mode-000 file it owns (CAP_DAC_OVERRIDE: root)."""
    return _allowed_on_a_scratch_file(0o000, lambda path: os.close(os.open(path, os.O_RDONLY)))


def needs_root(spec: TreeSpec | str) -> str | None:
    """``NEEDS_ROOT`` when ``spec`` holds an entry its owner cannot read and this process is not root.

    Such a tree can be built, but no copier (and no capture of ours) can read it back without
    CAP_DAC_OVERRIDE: for an ordinary user it is "not run", never a failure of the copier.
    """
    tree = load_tree(spec) if isinstance(spec, str) else spec
    locked = any((e.kind == "file" and not e.mode & 0o400) or (e.kind == "dir" and e.mode & 0o500 != 0o500)
                 for e in tree.entries)
    privileged = any(e.uid is not None or e.gid is not None
                     or any(name.startswith(("trusted.", "security.")) for name, _ in e.xattrs or ())
                     for e in tree.entries)
    named_acl = any(_names_other_ids(name, value) for e in tree.entries for name, value in e.xattrs or ())
    if ((locked and not can_read_unreadable()) or (privileged and not can_chown_to_others())
            or (named_acl and not can_name_other_ids_in_acls())):
        return NEEDS_ROOT
    return None


def _names_other_ids(name: str, value: bytes) -> bool:
    text = acl_text(value) if name in ACL_NAMES else None
    return text is not None and any(part.split(":")[1] for part in text.split(","))


#: overlayfs's whiteout: the one device node any user may make (vfs_mknod, Linux >= 5.8).
_WHITEOUT = (0, 0)


def _needs_mknod(entry: FileMeta) -> bool:
    return entry.kind in DEVICE_KINDS and entry.rdev != _WHITEOUT


@functools.cache
def can_make_devices() -> bool:
    """Whether this process can make a device node (CAP_MKNOD in the initial namespace), found by trying one
    in a scratch directory (char 240,0: the kernel's experimental range, which no driver answers)."""
    with tempfile.TemporaryDirectory(prefix="artifactkit-probe-") as scratch:
        try:
            os.mknod(os.path.join(scratch, "device"), KIND_IFMT["char"] | 0o600, os.makedev(240, 0))
        except OSError:  # EPERM for a user or inside a user namespace
            return False
        return True


def devices_left_out(spec: TreeSpec | str) -> str | None:
    """Why :func:`materialize` leaves ``spec``'s device nodes out here, or ``None`` when it builds them all."""
    tree = load_tree(spec) if isinstance(spec, str) else spec
    if can_make_devices() or not any(_needs_mknod(e) for e in tree.entries):
        return None
    return f"not run on the device nodes of {tree.name}: needs root"


def buildable(spec: TreeSpec | str) -> TreeSpec:
    """``spec`` as this process can build it: without device nodes (except the whiteout) if it cannot make them."""
    tree = load_tree(spec) if isinstance(spec, str) else spec
    if devices_left_out(tree) is None:
        return tree
    return attrs.evolve(tree, entries=tuple(e for e in tree.entries if not _needs_mknod(e)))


@functools.cache
def can_name_other_ids_in_acls() -> bool:
    """Whether an ACL entry may name uid 1234 here: any owner may, except in a user namespace that maps
    only its own id (the kernel answers EINVAL for an id it cannot map)."""
    acl = acl_bytes("u::rw-,u:1234:r--,g::---,m::r--,o::---")
    return _allowed_on_a_scratch_file(0o600, lambda path: os.setxattr(path, ACL_NAMES[0], acl))


@functools.cache
def can_chown_to_others() -> bool:
    """Whether this process can give a file another owner (real root)."""
    return _allowed_on_a_scratch_file(0o600, lambda path: os.chown(path, 1234, 1234))


def materialize(spec: TreeSpec | str, dest: str | os.PathLike[str], *,
                left_out: dict[str, str] | None = None, time_range: TimeRange | None = None) -> list[FileMeta]:
    """Build ``spec`` at ``dest`` (must not exist) and return the metadata originally supplied.

    Times are set last — files and links first, then directories deepest first, each read back
    (a filesystem that cannot hold a value raises :class:`TimestampNotRepresentable`). Device nodes this
    process cannot make are left out of the tree and of the result (:func:`devices_left_out`). With
    ``left_out``, a device number this filesystem cannot hold (xfs: ``mknod`` answers ``EINVAL`` for a minor
    past its 18 bits) is left out too, its path and why recorded there; without it, that ``OSError`` is raised.
    A tree named by ``spec`` whose times name range ends gets those of ``time_range``, else of the range measured
    beside ``dest`` (:func:`time_range_at`): a filesystem is never asked for a time it cannot hold.
    """
    root = os.fspath(dest)
    if isinstance(spec, str) and load_tree(spec).names_range_ends:
        spec = load_tree(spec, time_range or time_range_at(os.path.dirname(os.path.abspath(root))))
    tree = buildable(spec)
    os.mkdir(root, 0o700)
    ordered = [entry for entry in sorted(tree.entries, key=lambda e: e.path)
               if left_out is None or not _unholdable_device(root, entry, left_out)]
    for entry in ordered:
        full = os.path.join(root, entry.path)
        if entry.kind == "dir" and entry.path != ROOT:
            os.makedirs(full, 0o700, exist_ok=True)  # made already where a device node inside was made first
        elif entry.kind == "file" and entry.hardlink is None:
            _write_file(full, entry, tree.seeds[entry.path])
        elif entry.kind == "symlink":
            assert entry.target is not None
            os.symlink(entry.target, full)
        elif entry.kind in SPECIAL_KINDS and entry.hardlink is None and not os.path.lexists(full):
            # mknod makes FIFOs too; never opened, here or anywhere in the kit
            os.mknod(full, KIND_IFMT[entry.kind] | 0o600, os.makedev(*entry.rdev) if entry.rdev else 0)
    for entry in ordered:
        if entry.hardlink is not None:
            os.link(os.path.join(root, entry.hardlink), os.path.join(root, entry.path))
    for entry in ordered:
        if entry.kind != "dir":
            _set_extended(os.path.join(root, entry.path), entry)
            set_times_exact(os.path.join(root, entry.path), atime_ns=entry.atime_ns, mtime_ns=entry.mtime_ns,
                            follow_symlinks=entry.kind != "symlink")
    by_path = {entry.path: entry for entry in ordered}
    for path in deepest_first(e.path for e in ordered if e.kind == "dir"):
        entry, full = by_path[path], os.path.join(root, path)
        _set_extended(full, entry)
        set_times_exact(full, atime_ns=entry.atime_ns, mtime_ns=entry.mtime_ns)
    return [entry for entry in tree.entries if entry.path in by_path]


def _unholdable_device(root: str, entry: FileMeta, left_out: dict[str, str]) -> bool:
    """Make a device node (or a second name of one left out) ahead of the rest: ``True`` when this filesystem
    cannot hold it, with why in ``left_out``. Its parent directories are made as the tree's own."""
    if entry.kind not in DEVICE_KINDS or entry.rdev is None:
        return False
    if entry.hardlink is not None:
        if entry.hardlink in left_out:
            left_out[entry.path] = f"a second name of {entry.hardlink}, which was left out"
        return entry.path in left_out
    full = os.path.join(root, entry.path)
    os.makedirs(os.path.dirname(full), 0o700, exist_ok=True)
    try:
        os.mknod(full, KIND_IFMT[entry.kind] | 0o600, os.makedev(*entry.rdev))
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EOVERFLOW):
            raise
        left_out[entry.path] = (f"this filesystem cannot hold device {entry.rdev[0]},{entry.rdev[1]} "
                                f"(mknod: {err.strerror})")
        return True
    return False


def _write_file(full: str, entry: FileMeta, seed: int) -> None:
    fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        data = content(seed, entry.size)
        if entry.extents is None:
            os.write(fd, data)
        else:  # only the data runs are written: the rest stays a hole
            os.ftruncate(fd, entry.size)
            for start, length in entry.extents:
                os.pwrite(fd, data[start:start + length], start)
    finally:
        os.close(fd)


def _set_extended(full: str, entry: FileMeta) -> None:
    """Owner, xattrs and flags a tree supplies, in the order a restore uses (chown clears setuid)."""
    if entry.uid is not None or entry.gid is not None:
        os.chown(full, -1 if entry.uid is None else entry.uid, -1 if entry.gid is None else entry.gid,
                 follow_symlinks=False)
    for name, value in entry.xattrs or ():
        os.setxattr(full, name, value, follow_symlinks=False)
    if entry.kind != "symlink":
        os.chmod(full, entry.mode)
    if entry.flags:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            result = restore_flags_fd(fd, entry.flags, full)
        finally:
            os.close(fd)
        if result.flags is None or int(result.flags) & entry.flags != entry.flags:
            raise OSError(errno.EOPNOTSUPP, f"cannot set inode flags {entry.flags:#x} here ({result.status})", full)


