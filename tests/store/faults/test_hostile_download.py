"""A writer of the store or of the destination's parent, against download, verify and publish.

Sizes a manifest claims are checked against the real blob before a byte is hashed; a blob that is not a
regular file is never read; a blob planted under the right name is not trusted by a publish; the private
directory beside DEST cannot be swapped for anything that would then land at DEST.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store, assert_metadata_equal, capture_tree
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import ManifestLimitError, UnsafePathError
from tests.support.capability import require_real_root
from tests.support.crash import snapshot
from tests.support.hostile_store import STORE_KINDS, blob_bytes, forge_manifest, manifest_doc, put_blob, store_of_kind

RACE_RUNS = 200


@pytest.fixture(params=STORE_KINDS)
def published(request: pytest.FixtureRequest, fast_tmp: Path) -> tuple[Store, Path]:
    """``demo@1`` of the ``basic`` tree in a local store and in a bucket; ``work/`` for destinations."""
    materialize("basic", fast_tmp / "src")
    store = store_of_kind(request.param, request, fast_tmp)
    store.publish(fast_tmp / "src", "demo")
    (fast_tmp / "work").mkdir()
    return store, fast_tmp


def _victim(store: Store) -> tuple[str, int]:
    entry = next(e for e in store.manifest("demo").entries if e.path == "bin/tool")
    assert entry.sha256 is not None
    return entry.sha256, entry.size


def test_a_blob_longer_than_its_manifest_size_fails_download_and_verify_names_the_version(
        published: tuple[Store, Path]) -> None:
    store, tmp = published
    sha, _ = _victim(store)
    put_blob(store, sha, blob_bytes(store, sha) + b"appended by a writer of the store")
    with pytest.raises(IntegrityError, match="corrupt"):
        store.download("demo", tmp / "work" / "dest")
    assert os.listdir(tmp / "work") == []
    report = store.verify()
    assert not report.ok and any(sha in item and "demo@1:bin/tool" in item for item in report.corrupt), report


def test_a_manifest_claiming_2_62_bytes_of_holes_is_refused_at_once_not_hashed_for_centuries(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # The single-file limit (1 TiB by default) refuses this claim at the parse (test_hostile_sizes.py); set as high
    # as a Linux file goes, the blob's size is what refuses it.
    monkeypatch.setenv("ARTIFACTKIT_MAX_FILE_BYTES", str(2**63 - 1))
    store, tmp = published
    doc = manifest_doc(store, store.resolve("demo"))
    victim = next(e for e in doc["entries"] if e["path"] == "bin/tool")
    victim.update(size=2**62 - 1, extents=[[0, victim["size"]]])
    forge_manifest(store, "demo", 2, json_bytes(doc))
    # In a child with a deadline: before the check, this download hashed zeros until killed.
    code = textwrap.dedent(f"""
        import sys
        from artifactkit import Store, IntegrityError
        store = Store({store.root!r})
        try:
            store.download("demo@2", {str(tmp / "work" / "dest")!r})
        except IntegrityError as err:
            print("refused:", err)
            sys.exit(0)
        sys.exit("downloaded a manifest that claims 2**62 bytes")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env=os.environ)
    assert done.returncode == 0 and "refused:" in done.stdout, done.stderr
    assert os.listdir(tmp / "work") == []


def test_a_publish_over_a_truncated_blob_stores_its_own_bytes_so_its_version_downloads(
        published: tuple[Store, Path]) -> None:
    store, tmp = published
    sha, size = _victim(store)
    put_blob(store, sha, blob_bytes(store, sha)[: size // 2])  # planted or truncated under the right name
    ref = store.publish(tmp / "src", "demo")
    assert len(blob_bytes(store, sha)) == size
    store.download(ref, tmp / "work" / "dest")
    assert_metadata_equal(store.manifest(ref).entries, capture_tree(tmp / "work" / "dest"), stage="download")


def test_a_manifest_over_the_size_limit_is_refused_before_it_is_read(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, tmp = published
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", "100")
    with pytest.raises(ManifestLimitError, match="ARTIFACTKIT_MAX_MANIFEST_BYTES"):
        store.download("demo", tmp / "work" / "dest")
    report = store.verify()
    assert not report.ok and any("ARTIFACTKIT_MAX_MANIFEST_BYTES" in item for item in report.unreadable), report


@pytest.mark.parametrize("text", ["demo@\N{FULLWIDTH DIGIT ONE}", "demo@\N{SUPERSCRIPT ONE}",
                                  "demo@1\N{ARABIC-INDIC DIGIT ZERO}"])
def test_a_version_written_in_other_digits_is_not_a_version(published: tuple[Store, Path], text: str) -> None:
    store, _ = published
    with pytest.raises(ValueError, match="must be a positive integer"):
        store.resolve(text)


def json_bytes(doc: object) -> bytes:
    return json.dumps(doc).encode()


# -- local only: blob kinds, and the private directory beside DEST ----------------------------------------------

@pytest.fixture
def local(fast_tmp: Path) -> tuple[Store, Path]:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    store.publish(fast_tmp / "src", "demo")
    (fast_tmp / "work").mkdir()
    (fast_tmp / "canary").mkdir()
    (fast_tmp / "canary" / "precious.txt").write_text("the victim's own file\n")
    return store, fast_tmp


def test_a_character_device_under_a_blob_name_is_never_read(local: tuple[Store, Path]) -> None:
    require_real_root("make a device node in the store")
    store, tmp = local
    sha, _ = _victim(store)
    blob = Path(store.layout.blob_path(sha))
    blob.unlink()
    os.mknod(blob, stat.S_IFCHR | 0o444, os.makedev(1, 5))  # /dev/zero: reading it never ends
    with pytest.raises(IntegrityError, match="not a regular file"):
        store.download("demo", tmp / "work" / "dest")
    report = store.verify()
    assert not report.ok and any(sha in item and "not a regular file" in item for item in report.corrupt), report


#: The attacker in the destination's parent, in a process of its own: every private dir a download makes
#: there is renamed away and replaced by a symlink to the victim's canary, as fast as it appears.
_STEAL = """
import os, sys
parent, canary = sys.argv[1], sys.argv[2]
os.write(1, b"+")
for count in range(20_000_000):
    for name in os.listdir(parent):
        if name.startswith(".dest.artifactkit-") and not os.path.islink(os.path.join(parent, name)):
            try:
                os.rename(os.path.join(parent, name), os.path.join(parent, f"stolen-{count}"))
                os.symlink(canary, os.path.join(parent, name))
            except OSError:
                pass
"""


@pytest.fixture
def thief(local: tuple[Store, Path]) -> Iterator[None]:
    _, tmp = local
    process = subprocess.Popen([sys.executable, "-c", _STEAL, str(tmp / "work"), str(tmp / "canary")],
                               stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.read(1) == b"+"
    yield
    process.kill()
    process.wait()


def test_a_download_racing_a_swap_of_its_private_directory_never_lands_anything_but_the_verified_tree(
        local: tuple[Store, Path], thief: None) -> None:
    store, tmp = local
    expected = store.manifest("demo").entries
    before = snapshot(tmp / "canary", times=True)
    done = refused = 0
    for i in range(RACE_RUNS):
        dest = tmp / "work" / "dest"
        try:
            store.download("demo", dest)
        except (UnsafePathError, FileExistsError, FileNotFoundError):
            refused += 1
            assert not os.path.lexists(dest), f"run {i}: a refused download left {dest}"
            continue
        done += 1
        assert dest.is_dir() and not dest.is_symlink(), f"run {i}: dest is not the restored tree"
        assert_metadata_equal(expected, capture_tree(dest), stage=f"download {i}")
        subprocess.run(["rm", "-rf", str(dest)], check=True)
    assert done + refused == RACE_RUNS
    assert snapshot(tmp / "canary", times=True) == before
    assert os.listdir(tmp / "canary") == ["precious.txt"]
