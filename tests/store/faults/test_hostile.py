"""Hostile input: crafted manifests, planted and racing symlinks, special and changing sources.

Every case gets its named error class, nothing is written outside the destination (a sibling
``outside`` directory and the destination's parent are checked), and the store is unchanged.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import artifactkit.engine.reference.create as restore_module
from artifactkit import IntegrityError, SourceChangedError, Store, UnsafePathError, UnsupportedFileType
from artifactkit.conformance.corpus import materialize
from artifactkit.engine.reference.scan import capture_tree
from tests.support.hostile_store import blob_bytes, forge_manifest, put_blob, remove_blob
from tests.support.read_race import changed_at_read
from tests.support.stores import STORE_KINDS, content_blob_names, is_bucket, plant_staging, store_snapshot

Doc = dict[str, Any]


@pytest.fixture
def site(fast_tmp: Path, any_store: Store) -> Path:
    """``any_store`` with ``demo@1``, an empty ``work`` dir for destinations and an ``outside`` dir to keep clean."""
    materialize("basic", fast_tmp / "src")
    Store(any_store.root).publish(fast_tmp / "src", "demo")
    (fast_tmp / "work").mkdir()
    (fast_tmp / "outside").mkdir()
    return fast_tmp


def entry(doc: Doc, path: str) -> Doc:
    return next(e for e in doc["entries"] if e["path"] == path)


def forge_bytes(store: Store, body: bytes) -> None:
    """Replace the only manifest by ``body``, named by its own digest (an attacker who knows the scheme)."""
    ref = store.list()[-1]
    forge_manifest(store, ref.name, ref.version, body)


def edited(store: Store, edit: Callable[[Doc], object]) -> bytes:
    doc = json.loads(store.manifest("demo").to_bytes())
    edit(doc)
    return json.dumps(doc).encode()


def _add(*entries: Doc) -> Callable[[Doc], object]:
    return lambda doc: doc["entries"].extend(entries)


T = 1_600_000_000_000_000_000
_FILE = {"kind": "file", "mode": 0o644, "mtime_ns": T, "atime_ns": T, "size": 0,
         "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
_DIR = {"kind": "dir", "mode": 0o755, "mtime_ns": T, "atime_ns": T}
_LINK = {"kind": "symlink", "mode": 0o777, "mtime_ns": T, "atime_ns": T}

MANIFEST_CASES: dict[str, tuple[Callable[[Doc], object], type[Exception]]] = {
    "dot-dot": (lambda d: entry(d, "README.txt").update(path="../x"), UnsafePathError),
    "absolute": (lambda d: entry(d, "README.txt").update(path="/tmp/x"), UnsafePathError),
    "nul": (lambda d: entry(d, "README.txt").update(path="a\x00b"), UnsafePathError),
    "double-slash": (lambda d: entry(d, "bin/tool").update(path="bin//tool"), UnsafePathError),
    "empty-name": (lambda d: entry(d, "README.txt").update(path=""), UnsafePathError),
    "trailing-slash": (lambda d: entry(d, "bin").update(path="bin/"), UnsafePathError),
    "duplicate-path": (lambda d: d["entries"].append(dict(entry(d, "README.txt"))), UnsafePathError),
    "file-and-dir-at-one-path": (_add({**_DIR, "path": "README.txt"}), UnsafePathError),
    "entry-under-a-symlink": (_add({**_LINK, "path": "ln", "target": "data"}, {**_FILE, "path": "ln/x"}),
                              UnsafePathError),
    "no-root-entry": (lambda d: d["entries"].remove(entry(d, ".")), UnsafePathError),
    "root-is-a-file": (lambda d: entry(d, ".").update(kind="file", size=0, sha256=_FILE["sha256"]),
                       UnsafePathError),
    "unknown-format": (lambda d: d.update(format="artifactkit.manifest/99"), IntegrityError),
    "unknown-kind": (lambda d: entry(d, "README.txt").update(kind="socket"), IntegrityError),
    "size-larger-than-blob": (lambda d: entry(d, "README.txt").update(size=1201), IntegrityError),
    "size-smaller-than-blob": (lambda d: entry(d, "README.txt").update(size=1199), IntegrityError),
    "digest-too-short": (lambda d: entry(d, "README.txt").update(sha256=entry(d, "README.txt")["sha256"][:63]),
                         IntegrityError),
    "digest-too-long": (lambda d: entry(d, "README.txt").update(sha256=entry(d, "README.txt")["sha256"] + "0"),
                        IntegrityError),
    "digest-uppercase": (lambda d: entry(d, "README.txt").update(sha256=entry(d, "README.txt")["sha256"].upper()),
                         IntegrityError),
    "digest-of-a-missing-blob": (lambda d: entry(d, "README.txt").update(sha256="0" * 64), IntegrityError),
    "mode-out-of-range": (lambda d: entry(d, "README.txt").update(mode=0o10000), IntegrityError),
    "mode-is-a-bool": (lambda d: entry(d, "README.txt").update(mode=True), IntegrityError),
    "time-is-a-float": (lambda d: entry(d, "README.txt").update(mtime_ns=1.5e18), IntegrityError),
    # The kernel's range ends at 2**63 s (timespec64): past it no file has a time, whatever a manifest says.
    "time-at-2-63-seconds": (lambda d: entry(d, "README.txt").update(mtime_ns=2**63 * 10**9), IntegrityError),
    "time-before-64-bit-seconds": (lambda d: entry(d, "bin").update(atime_ns=-(2**63) * 10**9 - 1), IntegrityError),
    "entries-not-a-list": (lambda d: d.update(entries={"a": 1}), IntegrityError),
    "name-of-another-artifact": (lambda d: d.update(name="other"), IntegrityError),
}
RAW_CASES: dict[str, Callable[[bytes], bytes]] = {
    "truncated-json": lambda body: body[: len(body) // 2],
    "garbled-json": lambda body: body.replace(b":", b";", 3),
    "not-utf8": lambda body: b"\xff\xfe" + body,
    "json-array": lambda body: b"[]",
    "empty-file": lambda body: b"",
}


def assert_nothing_escaped(site: Path, store: Store, store_before: dict[str, Any]) -> None:
    assert os.listdir(site / "work") == [], "no partial destination and no staging left behind"
    assert os.listdir(site / "outside") == []
    assert store_snapshot(store) == store_before, "the store is unchanged"


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_a_crafted_manifest_is_refused_with_its_named_error_and_nothing_escapes(
        site: Path, any_store: Store, case: str) -> None:
    store = Store(any_store.root)
    edit, error = MANIFEST_CASES[case]
    forge_bytes(store, edited(store, edit))
    before = store_snapshot(any_store)
    with pytest.raises(error):
        store.download("demo", site / "work" / "dest")
    assert_nothing_escaped(site, store, before)


#: Links whose targets leave the tree: refused here once, data now (links as they are, never followed). A
#: forged manifest holding them must restore each as the link it names and write nothing through it: the
#: targets aim at the ``outside`` directory the download lands beside, and at an absolute path in it.
LINK_CASES: dict[str, tuple[str, str]] = {
    "symlink-pointing-up-and-out": ("bin/up", "../../../outside/x"),
    "symlink-absolute": ("abs", "{outside}/passwd"),
    "symlink-through-a-name-then-up": ("bin/up", "x/../../../outside/y"),
    "symlink-to-the-outside-dir": ("out", "../../outside"),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_a_forged_manifest_with_links_leaving_the_tree_restores_them_as_links_and_nothing_escapes(
        site: Path, any_store: Store, case: str) -> None:
    store = Store(any_store.root)
    path, target = LINK_CASES[case]
    target = target.format(outside=site / "outside")
    forge_bytes(store, edited(store, _add({**_LINK, "path": path, "target": target})))
    store.download("demo", site / "work" / "dest")
    restored = os.lstat(site / "work" / "dest" / path)  # before readlink, which moves a link's atime
    assert stat.S_ISLNK(restored.st_mode) and (restored.st_atime_ns, restored.st_mtime_ns) == (T, T)
    assert os.readlink(site / "work" / "dest" / path) == target
    assert os.listdir(site / "outside") == [], "nothing written through the link"


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_unreadable_manifest_bytes_are_refused_as_an_integrity_error(
        site: Path, any_store: Store, case: str) -> None:
    store = Store(any_store.root)
    forge_bytes(store, RAW_CASES[case](store.manifest("demo").to_bytes()))
    before = store_snapshot(any_store)
    with pytest.raises(IntegrityError):
        store.download("demo", site / "work" / "dest")
    assert_nothing_escaped(site, store, before)
    assert store.verify().unreadable, "verify names it too"


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-dir", "dangling"])
def test_a_destination_that_is_a_planted_symlink_is_refused(
        site: Path, any_store: Store, dangling: bool) -> None:
    store = Store(any_store.root)
    os.symlink(site / ("nowhere" if dangling else "outside"), site / "work" / "dest")
    before = store_snapshot(any_store)
    with pytest.raises(FileExistsError):
        store.download("demo", site / "work" / "dest")
    assert os.listdir(site / "work") == ["dest"] and os.listdir(site / "outside") == []
    assert store_snapshot(any_store) == before


def _racing(site: Path, monkeypatch: pytest.MonkeyPatch, attack: Callable[[], None]) -> threading.Thread:
    """Start a thread that attacks once the download's staging dir exists; the download waits for it."""
    attacked = threading.Event()
    real_create = restore_module._create

    def wait_for_attack(entry: Any, dir_fd: int, blob_path: Any) -> None:
        assert attacked.wait(timeout=30), "the racing thread never struck"
        real_create(entry, dir_fd, blob_path)

    def racer() -> None:
        for _ in range(10_000_000):  # spin (bounded) until the writer has made its staging dir
            if any(name.startswith(".dest.artifactkit-") for name in os.listdir(site / "work")):
                break
        attack()
        attacked.set()

    monkeypatch.setattr(restore_module, "_create", wait_for_attack)
    thread = threading.Thread(target=racer)
    thread.start()
    return thread


def test_a_symlink_swapped_in_at_the_destination_during_the_download_is_refused(
        site: Path, any_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(any_store.root)
    before = store_snapshot(any_store)
    thread = _racing(site, monkeypatch, lambda: os.symlink(site / "outside", site / "work" / "dest"))
    try:
        with pytest.raises(FileExistsError, match="appeared during the download"):
            store.download("demo", site / "work" / "dest")
    finally:
        thread.join()
    assert os.listdir(site / "work") == ["dest"] and os.listdir(site / "outside") == []
    assert store_snapshot(any_store) == before


def test_a_destination_parent_swapped_for_a_symlink_during_the_download_receives_nothing(
        site: Path, any_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(any_store.root)

    def swap_parent() -> None:
        os.rename(site / "work", site / "work-moved")
        os.symlink(site / "outside", site / "work")

    thread = _racing(site, monkeypatch, swap_parent)
    try:
        store.download("demo", site / "work" / "dest")
    finally:
        thread.join()
    # Every write went through the fd of the directory the download started in, never the new link.
    assert os.listdir(site / "outside") == []
    assert capture_tree(site / "work-moved" / "dest") == capture_tree(site / "src")


def _special(kind: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(str(path))
        else:
            # 0:0 is the overlay whiteout: any user may create it (vfs_mknod, Linux >= 5.8), so no root gate.
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    return make


@pytest.mark.parametrize("kind", ["socket"])  # FIFOs and devices are kept since issue 27
def test_a_source_holding_a_special_file_is_refused_before_the_store_is_touched(
        site: Path, any_store: Store, kind: str) -> None:
    materialize("basic", site / "src2")
    _special(kind)(site / "src2" / "data" / "special")
    before = store_snapshot(any_store)
    with pytest.raises(UnsupportedFileType, match="data/special"):
        Store(any_store.root).publish(site / "src2", "demo")
    assert store_snapshot(any_store) == before


def test_a_source_symlink_pointing_out_of_the_tree_is_published_as_is_and_refused_when_contained(
        site: Path, any_store: Store) -> None:
    materialize("basic", site / "src2")
    os.symlink("../../outside", site / "src2" / "data" / "escape")
    before = store_snapshot(any_store)
    with pytest.raises(UnsafePathError, match="escape"):
        Store(any_store.root).publish(site / "src2", "demo", links="contained")
    assert store_snapshot(any_store) == before
    Store(any_store.root).publish(site / "src2", "demo")
    entry = next(e for e in Store(any_store.root).manifest("demo").entries if e.path == "data/escape")
    assert entry.target == "../../outside"


@pytest.mark.parametrize("change", ["grow", "shrink"])
@pytest.mark.parametrize("size", [4000, (8 << 20) + 1], ids=["in-memory", "streamed"])
def test_a_source_file_that_changes_size_while_read_is_refused(
        site: Path, any_store: Store, change: str, size: int) -> None:
    materialize("basic", site / "src2")
    victim = site / "src2" / "data" / "victim.bin"
    victim.write_bytes(os.urandom(size))

    def mutate() -> None:
        if change == "grow":
            with victim.open("ab") as handle:
                handle.write(b"more")
        else:
            os.truncate(victim, size // 2)

    before = store_snapshot(any_store)
    # A real writer, at the instant the publish's first read of the file begins (after its open and fstat):
    # a small file's one pread, a large one's first copy_file_range, on either engine. "while": the change
    # landed during the read, not before the open.
    refused = pytest.raises(SourceChangedError, match=r"victim\.bin' changed while")
    with changed_at_read(victim, mutate) as reads, refused:
        Store(any_store.root).publish(site / "src2", "demo")
    assert reads
    assert store_snapshot(any_store) == before


def run_verify_cli(store: str | Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``artifactkit verify --store S --json`` through the store subcommands' own parser."""
    import argparse

    from artifactkit.cli import store as cli_store

    parser = argparse.ArgumentParser(prog="artifactkit")
    cli_store.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["verify", "--store", str(store), "--json"])
    code = int(args.func(args))
    return code, json.loads(capsys.readouterr().out)


def _corrupt_blob(store: Store) -> None:
    sha = content_blob_names(store)[0]
    put_blob(store, sha, blob_bytes(store, sha) + b"!")


VERIFY_FINDINGS: dict[str, tuple[Callable[[Store], object], str]] = {
    "corrupt-blob": (_corrupt_blob, "corrupt"),
    "missing-blob": (lambda s: remove_blob(s, content_blob_names(s)[0]), "missing"),
    "orphaned-staging": (lambda s: plant_staging(s, "publish-1-00000000deadbeef"), "orphaned"),
    "unreadable-manifest": (lambda s: forge_bytes(s, b'{"format": "artifactkit.manifest/1", "entr'), "unreadable"),
}


@pytest.mark.parametrize(("any_store", "finding"), [
    (kind, finding) for kind in STORE_KINDS for finding in sorted(VERIFY_FINDINGS)], indirect=["any_store"])
def test_the_verify_command_reports_each_finding_with_exit_1_and_changes_nothing(
        site: Path, any_store: Store, capsys: pytest.CaptureFixture[str], finding: str) -> None:
    store = Store(any_store.root)
    assert run_verify_cli(store.root, capsys)[0] == 0
    damage, field = VERIFY_FINDINGS[finding]
    damage(store)
    before = store_snapshot(store, times=True)
    code, report = run_verify_cli(store.root, capsys)
    if finding == "orphaned-staging" and is_bucket(store):
        # A bucket's upload begun just now is younger than gc's grace (an hour): gc keeps it, and verify says
        # so (it once called it orphaned, exit 1, and sent the user to a gc that would not remove it).
        assert code == 0 and report["clean"] is True and report["orphaned"] == []
        field = "kept"
    else:
        assert code == 1 and report["clean"] is False
    assert len(report[field]) == 1, report
    assert store_snapshot(store, times=True) == before, "verify never repairs"
