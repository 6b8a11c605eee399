"""Claims a manifest makes that no download may drop silently (issue 48, classes 8 and 9): half an owner (a
``uid`` without its ``gid``, or the other way round), and a hard-link group whose names disagree about their one
inode. Before, a foreign ``gid`` alone left the group root's and a later name's capability was never set, while
the download said "every entry verified exact". Each is now an :class:`IntegrityError` naming the entry (and,
for a hard link, both names and the field) before anything is written, on both engines and both stores.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from artifactkit import IntegrityError, Store
from artifactkit.metadata.flags import InodeFlag
from tests.support.hostile_manifest import DATA, SHA, T, body, doc, file_entry
from tests.support.hostile_store import STORE_KINDS, forge_manifest, put_blob, store_of_kind

FOREIGN = 4242
#: The owner every entry claims where the test is not about owners: the downloader's own, so a user without
#: CAP_CHOWN restores it (0 made every such download NotRestorableError for a normal user).
OWN = {"uid": os.geteuid(), "gid": os.getegid()}
#: security.capability of cap_setuid=ep (VFS_CAP_REVISION_2): what a later name claimed, and was dropped.
CAPABILITY = base64.b64encode(bytes.fromhex("01000002" "80000000" "00000000" "00000000" "00000000")).decode()


@pytest.fixture
def store(request: pytest.FixtureRequest, fast_tmp: Path) -> Store:
    made = store_of_kind(request.param, request, fast_tmp)
    put_blob(made, SHA, DATA)
    forge_manifest(made, "demo", 1, body(doc(file_entry(**OWN))))
    return made


def _refused(store: Store, fast_tmp: Path, entries: list[dict[str, Any]]) -> IntegrityError:
    """The download's and verify's refusal of version 2 made of ``entries``; version 1 still downloads."""
    forge_manifest(store, "demo", 2, body(doc(*entries)))
    with pytest.raises(IntegrityError) as caught:
        store.download("demo", fast_tmp / "out", version=2)
    assert not (fast_tmp / "out").exists()
    report = store.verify()
    assert not report.ok and [item for item in report.unreadable if "demo@2" in item], report
    store.download("demo", fast_tmp / "good", version=1)
    return caught.value


# --- 8. half an owner -------------------------------------------------------------------------------------

@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("field", ["uid", "gid"])
def test_an_entry_with_half_an_owner_is_refused_naming_the_entry(store: Store, fast_tmp: Path, field: str) -> None:
    # Downloaded as root, a foreign gid alone left the file root's group and said "verified exact".
    err = _refused(store, fast_tmp, [file_entry(**{field: FOREIGN})])
    other = "gid" if field == "uid" else "uid"
    assert "'a'" in str(err) and f"a {field} without a {other}" in str(err), err


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("kind", ["dir", "symlink"])
def test_half_an_owner_is_refused_on_every_kind(store: Store, fast_tmp: Path, kind: str) -> None:
    entry = {"path": "a", "kind": kind, "mode": 0o777 if kind == "symlink" else 0o755, "mtime_ns": T, "atime_ns": T,
             "gid": FOREIGN, **({"target": "x"} if kind == "symlink" else {})}
    assert "'a'" in str(_refused(store, fast_tmp, [entry]))


# --- 9. a hard-link group whose names disagree -----------------------------------------------------------

FIRST = file_entry(**OWN, xattrs=[])
#: What a later name may claim about the inode it shares with its first name: each differs from FIRST's.
DISAGREEING: dict[str, dict[str, Any]] = {
    "xattrs": {"xattrs": [["security.capability", CAPABILITY]]},
    "mode": {"mode": 0o4755},
    "uid": {"uid": FOREIGN},
    "gid": {"gid": FOREIGN},
    "mtime_ns": {"mtime_ns": T + 1},
    "atime_ns": {"atime_ns": T - 1},
    "flags": {"flags": int(InodeFlag.FS_NOATIME_FL)},
    "extents": {"extents": [[0, 6]]},
}


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("field", sorted(DISAGREEING))
def test_a_later_name_claiming_other_inode_metadata_is_refused_naming_both_names_and_the_field(
        store: Store, fast_tmp: Path, field: str) -> None:
    later = {**FIRST, "path": "b", "hardlink": "a", **DISAGREEING[field]}
    err = _refused(store, fast_tmp, [FIRST, later])
    assert "'a'" in str(err) and "'b'" in str(err) and field in str(err), err


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
def test_a_later_name_that_agrees_in_every_field_downloads_as_one_inode(store: Store, fast_tmp: Path) -> None:
    later = {**FIRST, "path": "b", "hardlink": "a"}
    forge_manifest(store, "demo", 2, body(doc(FIRST, later)))
    store.download("demo", fast_tmp / "out", version=2)
    assert os.stat(fast_tmp / "out" / "a").st_ino == os.stat(fast_tmp / "out" / "b").st_ino


@pytest.mark.parametrize("store", STORE_KINDS, indirect=True)
def test_a_read_between_the_captures_of_two_names_of_one_inode_still_publishes_a_version_that_downloads(
        store: Store, fast_tmp: Path) -> None:
    # Each name is lstat'ed as its directory is scanned; a reader between the two moves the inode's atime (not
    # its ctime, so nothing else notices). One inode has one capture: the first name's, recorded for every name.
    src = fast_tmp / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_bytes(b"one inode")
    os.link(src / "a", src / "sub" / "b")
    os.utime(src / "a", ns=(T, T + 10))  # atime before mtime: under relatime the next read moves it
    read: list[int] = []

    def read_between(progress: Any) -> None:
        if progress.phase == "scan" and progress.entries and not read:  # the top directory is captured
            assert (src / "a").read_bytes() == b"one inode"
            read.append(os.stat(src / "a").st_atime_ns)
    ref = store.publish(src, "linked", workers=1, progress=read_between)
    assert read and read[0] != T, "the read between the two captures did not move atime (a noatime mount?)"
    recorded = {entry.path: entry for entry in store.manifest(ref).entries}
    assert recorded["sub/b"].atime_ns == recorded["a"].atime_ns == T
    store.download(ref, fast_tmp / "out")
    assert os.stat(fast_tmp / "out" / "sub" / "b").st_atime_ns == T
