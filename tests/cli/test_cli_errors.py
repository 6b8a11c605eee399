"""Every exception that reaches the CLI is one line on stderr and the exit code of its class, never a traceback.

A writer of the store chooses what a download meets (an xattr name the kernel refuses, a manifest over a
limit), so the error path is part of the attack surface: the handler itself must not crash on an
``OSError`` that names an fd, and whatever a command lets escape is still one line.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit.cli import store as store_cli
from artifactkit.cli.common import EXIT_FAILED, EXIT_SETUP, describe
from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import IntegrityError, ManifestLimitError, UnsafeStoreError
from artifactkit.store.store import Store
from tests.support.capability import require_real_root
from tests.support.hostile_store import forge_manifest, manifest_doc


def _published(tmp: Path) -> str:
    materialize("basic", tmp / "src")
    store = str(tmp / "store")
    assert main(["publish", str(tmp / "src"), "--store", store, "--name", "demo"]) == 0
    return store


def test_describe_names_an_fd_an_oserror_carries_instead_of_a_path() -> None:
    err = OSError(errno.ERANGE, os.strerror(errno.ERANGE), 7)
    assert describe(err) == f"fd 7: {os.strerror(errno.ERANGE)}"
    two = OSError(errno.EXDEV, os.strerror(errno.EXDEV), "/a", None, b"/b\xff")
    assert describe(two) == f"/a -> /b\udcff: {os.strerror(errno.EXDEV)}"


def test_describe_keeps_a_multi_line_message_on_one_line() -> None:
    text = describe(IntegrityError("download refused:\n  a: owner uid 5\n  b: owner uid 6"))
    assert "\n" not in text and "a: owner uid 5" in text and "b: owner uid 6" in text


def test_a_kernel_refused_xattr_from_a_forged_manifest_is_one_line_and_exit_2_without_traceback(
        fast_tmp: Path) -> None:
    """The real case: root's ``setxattr`` on the new file's fd is refused (``EINVAL``: a malformed file
    capability), an ``OSError`` whose ``filename`` was that fd; the CLI's own handler used to crash on it
    (exit 1, a traceback). The error now names the entry, not the fd (issue 48)."""
    require_real_root("set security.capability (a non-root download refuses it up front)")
    store_path = _published(fast_tmp)
    store = Store(store_path)
    ref = store.list()[-1]
    doc = manifest_doc(store, ref)
    entry = next(e for e in doc["entries"] if e["kind"] == "file")
    entry["xattrs"] = [["security.capability", base64.b64encode(b"xx").decode()]]
    forge_manifest(store, ref.name, ref.version, json.dumps(doc).encode())
    done = _cli("download", "demo", str(fast_tmp / "out"), "--store", store_path)
    assert done.returncode == EXIT_SETUP, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == f"artifactkit: error: {entry['path']}: setxattr: {os.strerror(errno.EINVAL)}\n", done.stderr
    assert not (fast_tmp / "out").exists()


def test_an_unexpected_exception_is_one_line_from_the_command_itself(fast_tmp: Path) -> None:
    """The process as a person runs it: a class no handler expects still ends in one line, exit 2."""
    code = ("import sys\nfrom artifactkit.store.store import Store\n"
            "def broken(self):\n    raise ZeroDivisionError('a bug')\n"
            "Store.list = broken\nfrom artifactkit.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, "ls", "--store", str(fast_tmp)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == EXIT_SETUP, done.stderr
    assert done.stderr == "artifactkit: error: internal error (ZeroDivisionError): a bug\n"


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "artifactkit.cli", *argv], capture_output=True, text=True,
                          check=False, timeout=60)


def test_an_unsafe_store_is_exit_2_naming_the_directory(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store = _published(fast_tmp)
    capsys.readouterr()

    def refuse(self: Store) -> None:
        raise UnsafeStoreError(f"{store}/blobs is a symbolic link, not a real directory",
                               path=f"{store}/blobs", why="a symbolic link")
    monkeypatch.setattr(Store, "list", refuse)
    assert main(["ls", "--store", store]) == EXIT_SETUP
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{store}/blobs" in err


@pytest.mark.parametrize("case", [
    (RuntimeError("an internal fault"), EXIT_SETUP, "internal error (RuntimeError): an internal fault"),
    (RecursionError("maximum recursion depth exceeded"), EXIT_SETUP, "RecursionError"),
    (MemoryError(), EXIT_SETUP, "MemoryError"),
    (TypeError("multi\nline"), EXIT_SETUP, "multi; line"),
    (OSError(errno.EPERM, os.strerror(errno.EPERM), 3), EXIT_SETUP, f"fd 3: {os.strerror(errno.EPERM)}"),
    (IntegrityError("blob x is corrupt"), EXIT_FAILED, "blob x is corrupt"),
    (ManifestLimitError("manifest over the limit", setting="ARTIFACTKIT_MAX_MANIFEST_BYTES"), EXIT_SETUP,
     "ARTIFACTKIT_MAX_MANIFEST_BYTES"),
], ids=["runtime", "recursion", "memory", "multi-line", "fd", "integrity", "manifest-limit"])
def test_any_exception_a_command_lets_escape_is_one_line_and_the_exit_code_of_its_class(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        case: tuple[BaseException, int, str]) -> None:
    """``main`` is the last line of defence: a command's handler that misses a class (or itself fails)
    still ends in one line. The command is replaced to raise exactly this: which class reaches ``main`` from
    where is not the point here, only that nothing it can be escapes as a traceback."""
    raised, code, shown = case

    def boom(args: object) -> int:
        raise raised
    monkeypatch.setattr(store_cli, "_ls", boom)
    assert main(["ls", "--store", str(fast_tmp)]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("artifactkit: error: ") and shown in err, err


def test_json_output_carries_the_error_as_one_document(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", "--store", str(fast_tmp / "typo"), "--json"]) == EXIT_SETUP
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["schema"] == "artifactkit.error/1" and doc["exit_code"] == EXIT_SETUP
    assert doc["type"] == "NotAStoreError" and "typo" in doc["message"] and captured.err.count("\n") == 1


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         fast_tmp: Path) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt
    monkeypatch.setattr(store_cli, "_ls", interrupted)
    assert main(["ls", "--store", str(fast_tmp)]) == 130
    assert capsys.readouterr().err == "artifactkit: error: interrupted\n"
