"""The user's own cache directory: what artifactkit keeps between runs where no writer of a store can reach it.

Where: ``$ARTIFACTKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/artifactkit`` (an absolute ``XDG_CACHE_HOME`` only, as
the XDG spec says), else ``~/.cache/artifactkit``. It holds

* ``private-dir.key``: 32 random bytes, the key of the markers that prove a private directory beside a download
  was made by this user's artifactkit (:mod:`~artifactkit.store.private_dir`: only a proven one is ever swept);
* ``local-stat-cache/<digest>/`` and ``s3-stat-cache/<digest>/``: a store's stat cache, one directory per store
  (:mod:`~artifactkit.store.stat_cache_file`).

Both say what this user may trust, so nobody else may be able to change them: the directory (its path is the
user's setting, links and all, as a store's root is) and every directory below it (opened ``O_NOFOLLOW``) must be
a real directory owned by the effective uid that neither group nor others can write, or it is
:class:`UnsafeCacheError` naming it (a key or a cache planted by whoever could write there would be trusted).
What does not exist is made ``0700``. Where it cannot be made (no home, a read-only home, a path through a file)
there is no cache: the stat cache only loses its hint, and no leftover of a killed download can be proven ours,
so none is swept (they stay beside the destination, for the user to remove).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from typing import Final

from artifactkit.errors import UnsafeCacheError

#: The user's cache directory when set (an absolute path, or one relative to the working directory).
CACHE_DIR_SETTING: Final = "ARTIFACTKIT_CACHE_DIR"
#: The key of the private directories' markers, and its length.
KEY_NAME: Final = "private-dir.key"
KEY_BYTES: Final = 32
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def cache_base() -> str | None:
    """The user's cache directory by the settings above, or ``None`` when there is no absolute home to put it in
    (``~`` unexpanded: no ``HOME`` and no password entry)."""
    setting = os.environ.get(CACHE_DIR_SETTING)
    if setting:
        return os.path.abspath(setting)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "artifactkit")
    home = os.path.expanduser("~")
    return os.path.join(home, ".cache", "artifactkit") if os.path.isabs(home) else None


def _refusal(where: str, why: str) -> UnsafeCacheError:
    return UnsafeCacheError(
        f"{where} {why}: artifactkit keeps this user's stat caches and the key that proves a download's leftovers "
        f"its own in it, so it must be a real directory of uid {os.geteuid()} that no group or other user can "
        f"write; nothing was read from it (fix its owner or mode, or set {CACHE_DIR_SETTING} to another "
        "directory)", path=where, why=why)


def _check(fd: int, where: str) -> None:
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        raise _refusal(where, "is not a directory")
    if st.st_uid != os.geteuid():
        raise _refusal(where, f"is owned by uid {st.st_uid}, not by uid {os.geteuid()}")
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else "its group" if mode & 0o020 else "other users"
        raise _refusal(where, f"is writable by {who} (mode {mode:o})")


def _open_base(base: str, create: bool) -> int | None:
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as err:
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.stat(base).st_mode):
                raise _refusal(base, "is not a directory") from err
        if err.errno not in (errno.ENOENT, errno.ENOTDIR) or not create:
            return None  # cannot be searched (EACCES), or not there and not asked to make it
        try:
            os.makedirs(base, 0o700, exist_ok=True)
            fd = os.open(base, _DIR_FLAGS)
        except OSError:
            return None  # no usable home: no cache
    return fd


def _open_below(parent_fd: int, name: str, where: str, create: bool) -> int | None:
    for _ in range(2):  # made by a concurrent process between our open and our mkdir: open it then
        try:
            return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as err:  # ELOOP, ENOTDIR: a symbolic link or a file where a directory of ours should be
            raise _refusal(where, "is not a real directory (a symbolic link or a file)") from err
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            continue
        except OSError:
            return None  # a full or read-only filesystem: no cache
    return None


@contextlib.contextmanager
def opened(*parts: str, create: bool = True) -> Iterator[int | None]:
    """An fd of the user's cache directory, or of ``parts`` below it, each level checked (:class:`UnsafeCacheError`)
    and made ``0700`` where it is missing (``create``); ``None`` where a level is missing and cannot be made (or
    ``create`` is false). Closed when the block ends."""
    base = cache_base()
    fd = None if base is None else _open_base(base, create)
    try:
        if fd is not None and base is not None:
            _check(fd, base)
            where = base
            for part in parts:
                where = os.path.join(where, part)
                below = _open_below(fd, part, where, create)
                os.close(fd)
                fd = below
                if fd is None:
                    break
                _check(fd, where)
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def path_of(*parts: str) -> str | None:
    """The path of ``parts`` below the user's cache directory (``None``: there is none); for messages, and for
    re-opening a file whose identity the caller then checks."""
    base = cache_base()
    return None if base is None else os.path.join(base, *parts)


def _read_key(dir_fd: int, where: str) -> tuple[bytes | None, os.stat_result | None]:
    """The key, or ``None`` and what is under its name: nothing yet, or a private file of ours that is not
    :data:`KEY_BYTES` long (torn: written without a flush, so a power cut can leave it so), to be replaced.
    :class:`UnsafeCacheError` for anything else: not a regular file, or one that others could have read or
    written (not used, and not replaced: that is for the user to look at)."""
    try:
        fd = os.open(KEY_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None
    except OSError as err:
        raise _refusal(where, f"is not a regular file ({err.strerror})") from err
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise _refusal(where, f"is not a private file of uid {os.geteuid()} (uid {st.st_uid}, "
                           f"mode {stat.S_IMODE(st.st_mode):o})")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return (key, None) if len(key) == KEY_BYTES else (None, st)


def _make_key(dir_fd: int, torn: os.stat_result | None) -> None:
    """Write a new key whole under a temporary name and link it in: a concurrent maker's key, if it came first,
    is the one (``link`` never replaces), and no reader ever sees a partial key. Not flushed: a first download
    should not wait for a disk (and the suite counts flushes per file); what a power cut tears is replaced."""
    temp = f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(8)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with open(fd, "wb", closefd=False) as out:
            out.write(secrets.token_bytes(KEY_BYTES))
        if torn is not None:
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.lstat(KEY_NAME, dir_fd=dir_fd), torn):  # not a new key made meanwhile
                    os.unlink(KEY_NAME, dir_fd=dir_fd)
        with contextlib.suppress(FileExistsError):
            os.link(temp, KEY_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(fd)
        os.unlink(temp, dir_fd=dir_fd)


#: Keys read by this process, by the cache directory's path: the directory's checks and the key's read were ~10
#: system calls, 50-100 us of every download (Python 3.11, tmpfs). A key once read stays good for this process:
#: its markers were made with it, and whoever replaces the file later cannot make this process forge one.
_KEYS: dict[str, bytes] = {}


def private_dir_key() -> bytes | None:
    """This user's key for private-directory markers, made on first use and read once per process; ``None`` (no
    marker is written, nothing is swept) when the cache directory or the key cannot be used: a download never
    fails for it."""
    base = cache_base()
    if base is None:
        return None
    key = _KEYS.get(base)
    if key is not None:
        return key
    try:
        with opened() as fd:
            if fd is None:
                return None
            where = os.path.join(base, KEY_NAME)
            key, torn = _read_key(fd, where)
            if key is None:
                _make_key(fd, torn)
                key, _ = _read_key(fd, where)
    except (UnsafeCacheError, OSError):
        return None
    if key is not None:
        _KEYS[base] = key
    return key
