"""``download --path`` and ``diff`` over format-3 versions (issue 52): a subtree comes back exact with the
directories on its way and nothing else, a diff names every entry added, removed and changed with each field and
its diagnosis; each reads only the objects it needs, which the tests prove by deleting the others first. On a
local store and a bucket (``any_store``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from artifactkit import ArtifactRef, IntegrityError, Store, assert_metadata_equal, capture_tree
from artifactkit.cli.main import main
from artifactkit.metadata.compare import FIELDS, compare
from artifactkit.metadata.model import FileMeta
from tests.support.hostile_store import remove_blob
from tests.support.stores import store_snapshot
from tests.support.tree_objects import directory_objects


def _tree(src: Path) -> Path:
    for path, data in {"a/b/c/f": b"deep\n", "a/b/g": b"g\n", "a/h": b"h\n", "x/y": b"y\n", "x/z/w": b"w\n",
                       "top": b"top\n", "a/first": b"one inode, three names\n"}.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(data)
    os.link(src / "a/first", src / "x/second")
    os.link(src / "a/first", src / "x/z/third")
    os.symlink("../a/h", src / "x/link")
    (src / "empty").mkdir()
    os.chmod(src / "a/b", 0o700)  # a mode of its own, to be restored on the way to a subtree
    os.utime(src / "a/b", ns=(1_100_000_000_000_000_001, 1_000_000_000_000_000_001))
    os.utime(src / "a", ns=(1_100_000_000_000_000_002, 1_000_000_000_000_000_002))
    return src


def _recorded(store: Store, ref: ArtifactRef, paths: set[str]) -> dict[str, FileMeta]:
    return {e.path: e for e in store.manifest(ref).entries if e.path in paths}


def _names(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(("chosen", "kept"), [
    (["a/b"], [".", "a", "a/b", "a/b/c", "a/b/c/f", "a/b/g"]),
    (["a/b/c/f"], [".", "a", "a/b", "a/b/c", "a/b/c/f"]),
    (["a/b/c", "x/link", "empty"], [".", "a", "a/b", "a/b/c", "a/b/c/f", "empty", "x", "x/link"]),
], ids=["a-directory", "one-file", "several"])
def test_a_subtree_comes_back_exact_with_the_directories_on_its_way_and_nothing_else(
        any_store: Store, fast_tmp: Path, chosen: list[str], kept: list[str]) -> None:
    ref = any_store.publish(_tree(fast_tmp / "src"), "demo")
    assert any_store.download(ref, fast_tmp / "out", paths=chosen) == ref
    # Every field as recorded (the directories on the way too: a/b's mode and a's times were set apart).
    assert_metadata_equal(_recorded(any_store, ref, set(kept)), capture_tree(fast_tmp / "out"), stage="download")
    assert _names(fast_tmp / "out") == [p for p in kept if p != "."]


def test_the_root_as_a_path_is_the_whole_tree(any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    ref = any_store.publish(src, "demo")
    any_store.download(ref, fast_tmp / "out", paths=["."])
    assert_metadata_equal(any_store.manifest(ref).entries, capture_tree(fast_tmp / "out"), stage="download")


def test_hard_links_whose_first_name_was_left_out_are_still_one_inode(any_store: Store, fast_tmp: Path) -> None:
    ref = any_store.publish(_tree(fast_tmp / "src"), "demo")
    any_store.download(ref, fast_tmp / "out", paths=["x"])
    out = fast_tmp / "out"
    assert not (out / "a").exists()
    second, third = os.stat(out / "x/second"), os.stat(out / "x/z/third")
    assert second.st_ino == third.st_ino and second.st_nlink == 2
    wanted = {".", "x", "x/y", "x/z", "x/z/w", "x/second", "x/z/third", "x/link"}
    fields = [f for f in FIELDS if f != "hardlink"]  # the first name kept is the group's first now
    assert_metadata_equal(_recorded(any_store, ref, wanted), capture_tree(out), stage="download", fields=fields)
    assert (out / "x/second").read_bytes() == b"one inode, three names\n"  # after the capture: a read moves atime
    any_store.download(ref, fast_tmp / "alone", paths=["x/z/third"])  # a later name alone: a plain file
    assert os.stat(fast_tmp / "alone/x/z/third").st_nlink == 1
    assert (fast_tmp / "alone/x/z/third").read_bytes() == b"one inode, three names\n"


@pytest.mark.parametrize("missing", ["nope", "a/b/nope", "top/under-a-file", "a/b/c/f/g"])
def test_a_path_the_version_lacks_is_a_lookup_error_and_the_cli_says_so_in_one_line(
        any_store: Store, fast_tmp: Path, capsys: pytest.CaptureFixture[str], missing: str) -> None:
    ref = any_store.publish(_tree(fast_tmp / "src"), "demo")
    before = store_snapshot(any_store)
    with pytest.raises(LookupError, match=missing):
        any_store.download(ref, fast_tmp / "out", paths=["a/b", missing])
    assert not os.path.lexists(fast_tmp / "out")
    capsys.readouterr()
    code = main(["download", "demo", str(fast_tmp / "out"), "--store", str(any_store.root), "--path", missing])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and missing in captured.err and "internal error" not in captured.err
    assert not os.path.lexists(fast_tmp / "out")
    assert store_snapshot(any_store) == before


def test_a_subtree_reads_only_the_objects_on_its_way(any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    ref = any_store.publish(src, "demo")
    unrelated = directory_objects(any_store, ref)["x"]
    remove_blob(any_store, unrelated)
    any_store.download(ref, fast_tmp / "part", paths=["a/b"])
    assert _names(fast_tmp / "part") == ["a", "a/b", "a/b/c", "a/b/c/f", "a/b/g"]
    with pytest.raises(IntegrityError, match=unrelated):
        any_store.download(ref, fast_tmp / "whole")
    assert not os.path.lexists(fast_tmp / "whole")


def _changed(src: Path) -> None:
    """Every kind of change: added (a file, a directory with a file), removed, mode, content, a link's target."""
    (src / "new").write_bytes(b"new\n")
    (src / "a/newdir").mkdir()
    (src / "a/newdir/n").write_bytes(b"n\n")
    (src / "top").unlink()
    os.chmod(src / "a/h", 0o600)
    (src / "x/y").write_bytes(b"y, longer now\n")
    (src / "x/link").unlink()
    os.symlink("../top", src / "x/link")


def test_diff_names_every_entry_added_removed_and_changed_with_each_field_and_its_diagnosis(
        any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    first = any_store.publish(src, "demo")
    _changed(src)
    second = any_store.publish(src, "demo")
    changes = any_store.diff(first, second)
    # The oracle: the shared assertion's comparison of the two whole manifests, field for field.
    assert changes == compare(any_store.manifest(first).entries, any_store.manifest(second).entries)
    assert [(m.path, m.diagnosis) for m in changes if m.field == "presence"] == [
        ("a/newdir", "unexpected"), ("a/newdir/n", "unexpected"), ("new", "unexpected"), ("top", "missing")]
    fields = {(m.path, m.field): (m.expected, m.actual, m.diagnosis) for m in changes}
    assert fields[("a/h", "mode")] == (0o644, 0o600, "mode-differs")
    assert fields[("x/y", "size")] == (2, 14, "content-differs")
    assert fields[("x/link", "target")] == ("../a/h", "../top", "content-differs")
    assert ("x/y", "sha256") in fields and ("x/y", "mtime_ns") in fields
    unchanged = {"a/b", "a/b/c", "a/b/c/f", "a/b/g", "a/first", "x/second", "x/z", "x/z/w", "x/z/third", "empty"}
    assert not {m.path for m in changes} & unchanged
    assert any_store.diff(second, first) == compare(any_store.manifest(second).entries,
                                                    any_store.manifest(first).entries)
    assert any_store.diff(first, first) == []


def test_diff_reads_no_directory_whose_object_is_the_same_in_both(any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    first = any_store.publish(src, "demo")
    _changed(src)
    second = any_store.publish(src, "demo")
    expected = any_store.diff(first, second)
    objects, objects_after = directory_objects(any_store, first), directory_objects(any_store, second)
    for same in ("a/b", "x/z", "empty"):
        assert objects_after[same] == objects[same]
        remove_blob(any_store, objects[same])
    assert any_store.diff(first, second) == expected
    remove_blob(any_store, objects["."])
    assert any_store.diff(first, first) == []  # the same root: not one object read
    with pytest.raises(IntegrityError, match=objects["."]):
        any_store.diff(first, second)


def test_diff_json_has_its_schema_and_each_change_as_data(any_store: Store, fast_tmp: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = _tree(fast_tmp / "src")
    any_store.publish(src, "demo")
    _changed(src)
    any_store.publish(src, "demo")
    capsys.readouterr()
    assert main(["diff", "--store", str(any_store.root), "demo@1", "demo@2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"schema", "a", "b", "added", "removed", "changed"}
    assert (doc["schema"], doc["a"], doc["b"]) == ("artifactkit.diff/1", "demo@1", "demo@2")
    assert (doc["added"], doc["removed"]) == (["a/newdir", "a/newdir/n", "new"], ["top"])
    assert all(set(item) == {"path", "field", "a", "b", "delta_ns", "diagnosis"} for item in doc["changed"])
    assert {"path": "a/h", "field": "mode", "a": 0o644, "b": 0o600, "delta_ns": None,
            "diagnosis": "mode-differs"} in doc["changed"]
    mtime = next(item for item in doc["changed"] if (item["path"], item["field"]) == ("x/y", "mtime_ns"))
    assert mtime["delta_ns"] == mtime["b"] - mtime["a"]
    assert main(["diff", "--store", str(any_store.root), "demo@1", "demo@2"]) == 0
    text = capsys.readouterr().out
    assert "added    new" in text and "removed  top" in text and "changed  a/h: mode" in text
    assert text.rstrip().splitlines()[-1].startswith("demo@1 -> demo@2: 3 added, 1 removed, ")


def test_diff_of_an_entry_that_changed_kind_lists_the_subtree_it_had_or_has(any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    first = any_store.publish(src, "demo")
    for path in ("x/z/w", "x/z/third"):
        (src / path).unlink()
    (src / "x/z").rmdir()
    (src / "x/z").write_bytes(b"a file where a directory was\n")
    (src / "top").unlink()
    (src / "top").mkdir()
    (src / "top/inside").write_bytes(b"i\n")
    second = any_store.publish(src, "demo")
    changes = any_store.diff(first, second)
    assert changes == compare(any_store.manifest(first).entries, any_store.manifest(second).entries)
    assert {(m.path, m.field, m.expected, m.actual) for m in changes if m.field in ("kind", "presence")} == {
        ("x/z", "kind", "dir", "file"), ("x/z/w", "presence", "file", None), ("x/z/third", "presence", "file", None),
        ("top", "kind", "file", "dir"), ("top/inside", "presence", None, "file")}
