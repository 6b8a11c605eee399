"""A version's manifest: read out of a local store (checked open, bounded read, digest), and verified from
its bytes for every backend."""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from artifactkit.engine.content import open_regular
from artifactkit.engine.protocol import Engine
from artifactkit.engine.select import engine_for
from artifactkit.engine.values import Parsed
from artifactkit.errors import IntegrityError, IntegrityFailure, ManifestLimitError
from artifactkit.manifest.artifact_ref import ArtifactRef, check_manifest_digest
from artifactkit.manifest.encode import Manifest
from artifactkit.manifest.limits import manifest_size_limit
from artifactkit.store.store_dirs import StoreDirs


def verified_manifest(ref: ArtifactRef, body: bytes, where: str) -> Manifest:
    """The manifest of ``ref`` from its bytes, read by any backend from ``where``: they must hash to the digest
    that names the version, parse as a manifest and name this artifact."""
    parsed = verified_entries(ref, body, where)
    return Manifest(name=parsed.name, entries=tuple(parsed), source_read_noatime=parsed.source_read_noatime)


def verified_entries(ref: ArtifactRef, body: bytes, where: str, engine: Engine | None = None) -> Parsed:
    """The entries of :func:`verified_manifest` of the same bytes, with the same checks and errors, as ``engine``
    (``None``: the one selected now) parsed them, for a download: its restore lays them out itself."""
    with contextlib.ExitStack() as stack:
        if engine is None:
            engine = stack.enter_context(contextlib.closing(engine_for(None, "parse")))
        parsed = engine.parse(ref, body, where=where)
    check_name(ref, parsed.name, where)
    return parsed


def check_name(ref: ArtifactRef, name: str, where: str) -> None:
    """:class:`IntegrityError` unless the manifest of ``ref`` (read at ``where``) names ``ref``'s artifact."""
    if name != ref.name:
        # A manifest copied (and renamed by its digest) from another artifact is not this one.
        raise IntegrityError(f"manifest of {ref} names another artifact, {name!r}", path=where,
                             expected=ref.name, actual=name, failed=IntegrityFailure.CORRUPT)


def read_manifest_bytes(dirs: StoreDirs, ref: ArtifactRef, *, check_digest: bool = True) -> bytes:
    """The bytes of a version's manifest, a regular file of at most :func:`manifest_size_limit` bytes that
    hashes to the digest naming it (``check_digest``: else left to the caller, which checks it), else
    :class:`IntegrityError` / :class:`ManifestLimitError` (or the ``OSError`` of a missing one). Reached through
    the name's directory fd, never by path."""
    path = dirs.layout.manifest_path(ref)
    name_fd = dirs.name_dir(ref.name)
    if name_fd is None:
        raise FileNotFoundError(errno.ENOENT, f"manifest of {ref} is missing", path)
    try:
        # O_NONBLOCK: a FIFO planted as a manifest is refused below rather than hanging the open.
        fd = os.open(f"{ref.version}.{ref.digest}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=name_fd)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise IntegrityError(f"manifest of {ref} is a symlink; manifests are plain files", path=path,
                             failed=IntegrityFailure.CORRUPT) from err
    finally:
        os.close(name_fd)
    with open(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IntegrityError(f"manifest of {ref} is not a regular file", path=path,
                                 failed=IntegrityFailure.CORRUPT)
        limit = manifest_size_limit()
        # Refused before a byte is read: read whole, a 3 GiB manifest was a MemoryError. The read asks for the
        # size fstat gave + 1, never the limit: BufferedReader.read(n) allocates n bytes first (a 128 MiB
        # mmap per manifest made gc of 300 versions 2x slower); a file that grew meanwhile fails its digest.
        if st.st_size > limit or len(body := handle.read(st.st_size + 1)) > limit:
            raise ManifestLimitError(
                f"manifest of {ref} has {st.st_size} bytes, more than the limit of {limit}; raise "
                "ARTIFACTKIT_MAX_MANIFEST_BYTES if it is genuine", path=path, limit=limit, actual=st.st_size,
                setting="ARTIFACTKIT_MAX_MANIFEST_BYTES")
    if check_digest:
        check_manifest_digest(ref, body, path)
    return body


def read_tree_object(blobs_fd: int, digest: str, *, where: str) -> bytes:
    """The bytes of the tree object ``digest`` in a local store's ``blobs/`` (its digest is the reader's to check): a
    regular file (nothing else under the name is ever opened) of at most :func:`manifest_size_limit` bytes."""
    path = f"{where}/blobs/{digest}"
    try:
        fd, st = open_regular(digest, dir_fd=blobs_fd)
    except FileNotFoundError as err:
        raise IntegrityError(f"tree object {digest} is missing from {where}", path=path, blob=digest,
                             failed=IntegrityFailure.MISSING) from err
    if fd is None:
        raise IntegrityError(f"tree object {digest} in {where} is not a regular file", path=path, blob=digest,
                             failed=IntegrityFailure.CORRUPT)
    with open(fd, "rb") as handle:
        check_object_size(digest, st.st_size, path)
        return handle.read(st.st_size + 1)  # one that grew meanwhile fails its digest


def check_object_size(digest: str, size: int, where: str) -> None:
    """:class:`ManifestLimitError` for a tree object larger than any manifest may be, before a byte is read."""
    if size > (limit := manifest_size_limit()):
        raise ManifestLimitError(
            f"tree object {digest} has {size} bytes, more than the limit of {limit}; raise "
            "ARTIFACTKIT_MAX_MANIFEST_BYTES if it is genuine", path=where, limit=limit, actual=size,
            setting="ARTIFACTKIT_MAX_MANIFEST_BYTES")
