"""Exception hierarchy: one base, leaves that also subclass the fitting builtin.

Every exception keeps its context as attributes and pickles cleanly, because the
diagnostic and the fault suite move them across ``multiprocessing`` boundaries.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any


class ArtifactkitError(Exception):
    """Base class of every error artifactkit raises on purpose."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only context would be lost by the default BaseException pickling; so would notes
        # (context added on the way up: the S3 download adds one).
        return (_rebuild, (type(self), self.message, self.context, getattr(self, "__notes__", None)))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[ArtifactkitError], message: str, context: dict[str, Any],
             notes: list[str] | None = None) -> ArtifactkitError:
    error = cls(message, **context)
    for note in notes or ():
        error.add_note(note)
    return error


class UnsupportedFileType(ArtifactkitError, ValueError):  # noqa: N818 - public name fixed by DESIGN.md
    """A source entry is a FIFO, socket or device node, which an artifact cannot hold."""


class UnsafePathError(ArtifactkitError, ValueError):
    """A path or link target would escape the tree, or a manifest path is malformed."""


class UnsafeStoreError(UnsafePathError):
    """A store's layout directory is not a real directory owned by the store's owner (or root), or a private
    directory an operation made was swapped: ``path`` names it, ``why`` says what it is. Nothing was changed."""


class UnsafeCacheError(UnsafePathError):
    """The user's cache directory (stat caches, the key of download markers) or a directory or file in it is not
    a real one of the effective uid closed to others' writes: ``path`` names it, ``why`` says what it is."""


class ManifestLimitError(ArtifactkitError, ValueError):
    """A manifest is over a documented bound (``limit``: bytes, nesting depth or extents), checked before it
    is read whole or parsed deeply, or the setting of a bound holds no usable value; ``setting`` names it
    where one can be changed. Nothing was changed."""


class IntegrityFailure(enum.StrEnum):
    """What an :class:`IntegrityError` found (its ``failed`` attribute): ``verify`` sorts by it."""

    CORRUPT = "corrupt"
    MISSING = "missing"


class IntegrityError(ArtifactkitError):
    """Stored content or a manifest does not match its sha256 digest, or is unreadable."""


class SourceChangedError(ArtifactkitError):
    """A source file changed between its capture and the end of its read."""


class TimestampNotRepresentable(ArtifactkitError, ValueError):  # noqa: N818 - public name fixed by DESIGN.md
    """The filesystem stored a different timestamp than the one set (too coarse or out of range)."""


class IsolationError(ArtifactkitError):
    """Implicit atime updates could not be provably switched off for a private tree."""


class NotInPrivateTreeError(ArtifactkitError, PermissionError):
    """A flag change was aimed at a path outside the private tree it is allowed to touch."""


class CopierSetupError(ArtifactkitError, RuntimeError):
    """A copier cannot run here: its tool is missing or one of its steps failed (a setup error, exit 2)."""


class ToolMissingError(CopierSetupError, FileNotFoundError):
    """The program or module a named adapter drives is not installed (``tool``, ``package`` to install)."""


class ToolFailedError(CopierSetupError):
    """A step of a named adapter exited non-zero (``command``, ``returncode`` and the whole ``stderr``)."""


class StoreNotConfiguredError(CopierSetupError):
    """A named adapter's remote store is not configured: ``variables`` lists what to set."""


class MetadataMismatchError(ArtifactkitError, AssertionError):
    """Actual metadata differs from what was originally supplied."""


class NotAStoreError(ArtifactkitError, FileNotFoundError):
    """A path given as a store holds no artifactkit store (a typo must not read as an empty store)."""


class CopierCannotRunError(CopierSetupError):
    """A copier under test could not run at all (missing program, import error, failure before ``{dst}``)."""


class NotRestorableError(ArtifactkitError, PermissionError):
    """A download cannot restore some metadata here (an owner, a privileged xattr, an inode flag, xattrs on a
    filesystem without them); ``entries`` lists each path and what. Nothing was made visible."""


class TreeTooDeepError(ArtifactkitError, OSError):
    """A source tree is nested deeper than a path the kernel accepts (``PATH_MAX``); ``path`` is where."""


class ReownedWarning(UserWarning):
    """A download with ``owners="current"`` gave entries the downloader's ownership (and cleared their
    setuid/setgid bits and privileged xattrs): ``entries`` lists every one and what changed, the message the
    first few."""

    def __init__(self, message: str, entries: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.entries = list(entries)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.entries))


class RepairedBlobsWarning(UserWarning):
    """A publish found blobs in the store holding other bytes than their names say (planted, or rotted) and stored
    its own bytes over them: ``blobs`` lists their digests. Its version and every earlier one naming them download
    again; someone or something wrote those bytes."""

    def __init__(self, message: str, blobs: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.blobs = list(blobs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.blobs))


class SourceAtimesMovedWarning(UserWarning):
    """A publish's reads moved atimes in its source (:mod:`artifactkit.store.source_atimes`): ``symlinks`` read by
    ``readlink``, which moves a link's atime where the mount moves atimes; ``files`` and ``directories`` it could
    not open with ``O_NOATIME`` (refused to a user who does not own them); ``total``, their sum."""

    def __init__(self, message: str, symlinks: int = 0, files: int = 0, directories: int = 0) -> None:
        super().__init__(message)
        self.symlinks, self.files, self.directories = symlinks, files, directories
        self.total = symlinks + files + directories

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.symlinks, self.files, self.directories))


class UnreadableManifestWarning(UserWarning):
    """``list()`` left out a version whose manifest it could not read (corrupt, over the size limit): the
    message names its key and why; ``name``, ``version``, ``path``, ``reason`` and ``kind`` (the error's class)
    say it as data. ``verify`` reports it too."""

    def __init__(self, message: str, *, name: str = "", version: int = 0, path: str = "", reason: str = "",
                 kind: str = "") -> None:
        super().__init__(message)
        self.name, self.version, self.path, self.reason, self.kind = name, version, path, reason, kind

    def __reduce__(self) -> tuple[Any, ...]:
        context = {"name": self.name, "version": self.version, "path": self.path, "reason": self.reason,
                   "kind": self.kind}
        return (_unreadable, (str(self), context))


def _unreadable(message: str, context: dict[str, Any]) -> UnreadableManifestWarning:
    return UnreadableManifestWarning(message, **context)


class VersionInUseError(ArtifactkitError):
    """``forget`` removed nothing: a running download holds one of the versions (``versions`` names them)."""


class RemoteStoreError(ArtifactkitError):
    """A request to an object store failed; ``url`` and the server's ``code`` say where and why."""


class RemoteUnavailableError(RemoteStoreError, ConnectionError):
    """The object store could not be reached, dropped the connection or did not answer in time."""


class RemoteAuthError(RemoteStoreError, PermissionError):
    """The object store refused the credentials from the AWS environment/config chain, or found none."""


class BucketNotFoundError(RemoteStoreError, FileNotFoundError):
    """The bucket named by an ``s3://`` store does not exist."""


class StoreBusyError(RemoteStoreError):
    """A shared store's lock stayed taken (by gc, or by publishers) for longer than the wait allowed."""


class ListingLimitError(RemoteStoreError):
    """A bucket's listing crossed a documented bound (``limit``: keys, time, pages without a key) or did not
    advance (a repeated continuation token, keys out of order): a broken or hostile server. ``url`` names the
    bucket and prefix listed; a bound that can be changed names its ``setting``. Nothing was changed."""


class LeaseLostError(RemoteStoreError):
    """Our lock on a shared store expired or was broken; the operation stopped before changing what is visible."""


class MissingExtraError(ArtifactkitError, ImportError):
    """A feature needs an optional extra that is not installed (``extra``: what to ``pip install``)."""
