"""A version's manifest: read out of a local store (checked open, bounded read, digest), and verified from
its bytes for every backend."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from artifactkit.engine.select import engine_name
from artifactkit.errors import IntegrityError, IntegrityFailure, ManifestLimitError
from artifactkit.metadata.model import FileMeta
from artifactkit.store.layout import ArtifactRef
from artifactkit.store.manifest import Manifest, digest_of, manifest_size_limit, parse_manifest
from artifactkit.store.store_dirs import StoreDirs


def verified_manifest(ref: ArtifactRef, body: bytes, where: str) -> Manifest:
    """The manifest of ``ref`` from its bytes, read by any backend from ``where``: they must hash to the digest
    that names the version, parse as a manifest and name this artifact."""
    check_manifest_digest(ref, body, where)
    manifest = _parse(body, where=f"manifest of {ref}")
    _check_name(ref, manifest.name, where)
    return manifest


def verified_entries(ref: ArtifactRef, body: bytes, where: str) -> Sequence[FileMeta]:
    """The entries of :func:`verified_manifest` of the same bytes, with the same checks and errors, for a
    download: on the native engine the core's parse kept in the core
    (:class:`~artifactkit.engine._native_tree.CoreTree`, each ``FileMeta`` made when the restore asks for it)."""
    if engine_name() != "native":
        return verified_manifest(ref, body, where).entries
    from artifactkit.engine._native_tree import parse  # noqa: PLC0415 - only where the core is built

    tree = parse(body, ref.digest)  # the digest checked alongside, on a thread of the core's
    if tree is None:  # declined: another digest, or the reference's parse refuses it or reads a shape left to it
        return verified_manifest(ref, body, where).entries
    _check_name(ref, tree.name, where)
    return tree


def check_manifest_digest(ref: ArtifactRef, body: bytes, where: str) -> None:
    """:class:`IntegrityError` (``CORRUPT``) unless ``body`` hashes to ``ref.digest``: read at ``where``."""
    if (actual := digest_of(body)) != ref.digest:
        raise IntegrityError(f"manifest of {ref} is corrupt: its bytes hash to {actual}, not {ref.digest}",
                             path=where, expected=ref.digest, actual=actual, failed=IntegrityFailure.CORRUPT)


def _check_name(ref: ArtifactRef, name: str, where: str) -> None:
    if name != ref.name:
        # A manifest copied (and renamed by its digest) from another artifact is not this one.
        raise IntegrityError(f"manifest of {ref} names another artifact, {name!r}", path=where,
                             expected=ref.name, actual=name, failed=IntegrityFailure.CORRUPT)


def _parse(body: bytes, *, where: str) -> Manifest:
    """:func:`~artifactkit.store.manifest.parse_manifest`, in the native core where the native engine is chosen
    (:mod:`~artifactkit.engine._native_manifest`: the same manifest, the same refusals)."""
    if engine_name() == "native":  # only where the core imports: then this import cannot fail
        from artifactkit.engine._native_manifest import parse  # noqa: PLC0415 - only where the core is built

        return parse(body, where=where)
    return parse_manifest(body, where=where)


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
