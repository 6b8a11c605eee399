"""Manifests are untrusted input: every malformed field is a named error, never a KeyError."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifactkit import FileMeta, IntegrityError, UnsafePathError
from artifactkit.manifest import paths
from artifactkit.manifest.encode import FORMAT, Manifest
from artifactkit.manifest.paths import check_relpath, check_symlink_target
from tests.support.both_parses import parse_both

ROOT = FileMeta(path=".", kind="dir", mode=0o755, mtime_ns=1, atime_ns=2)
FILE = FileMeta(path="a", kind="file", mode=0o644, size=1, mtime_ns=-5, atime_ns=2**40, sha256="ab" * 32,
                ctime_ns=7)


def doc_with(**changes: object) -> bytes:
    doc = json.loads(Manifest(name="demo", entries=(ROOT, FILE)).to_bytes())
    doc["entries"][1].update(changes)
    return json.dumps(doc).encode()


def test_a_manifest_round_trips_through_its_canonical_bytes() -> None:
    body = Manifest(name="demo", entries=(FILE, ROOT)).to_bytes()
    parsed = parse_both(body, where="t")
    assert parsed.entries == (ROOT, FILE) and parsed.to_bytes() == body
    assert json.loads(body)["format"] == FORMAT


@pytest.mark.parametrize(("change", "error"), [
    ({"path": "../x"}, UnsafePathError), ({"path": "/etc/x"}, UnsafePathError), ({"path": ""}, UnsafePathError),
    ({"path": "a/"}, UnsafePathError), ({"path": "./a"}, UnsafePathError), ({"path": "b/a"}, UnsafePathError),
    ({"kind": "socket"}, IntegrityError), ({"mode": 0o10000}, IntegrityError), ({"mode": "0644"}, IntegrityError),
    ({"size": -1}, IntegrityError), ({"sha256": "ab"}, IntegrityError), ({"sha256": "AB" * 32}, IntegrityError),
    ({"mtime_ns": 1.5}, IntegrityError), ({"atime_ns": 2**63 * 10**9}, IntegrityError),
    ({"mtime_ns": True}, IntegrityError),
])
def test_each_malformed_entry_field_is_refused_by_name(change: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_both(doc_with(**change), where="t")


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b"\xff\xfe", json.dumps({"format": "other/9"}).encode(),
                                  json.dumps({"format": FORMAT, "name": "demo"}).encode()])
def test_garbled_or_foreign_documents_are_integrity_errors(body: bytes) -> None:
    with pytest.raises(IntegrityError):
        parse_both(body, where="t")


def test_duplicates_and_entries_under_a_file_or_link_are_refused() -> None:
    link = FileMeta(path="l", kind="symlink", mode=0o777, mtime_ns=1, atime_ns=1, target="a")
    under_link = FileMeta(path="l/x", kind="file", mode=0o644, mtime_ns=1, atime_ns=1, sha256="ab" * 32)
    for entries in ((ROOT, FILE, FILE), (ROOT, FILE, link, under_link), (FILE,)):
        body = Manifest(name="demo", entries=entries).to_bytes()
        with pytest.raises(UnsafePathError):
            parse_both(body, where="t")


@pytest.mark.parametrize(("link", "target", "ok"), [
    ("a", "b", True), ("d/a", "../b", True), ("d/a", "../../b", True), ("a", "/etc", True),
    ("a", "x/../../b", True), ("a", "L/../etc", True), ("d/e/a", "../../x/y", True), ("a", "./b/./c", True),
    ("a", "", False), ("a", "x\x00y", False), ("a", None, False),
])
def test_a_symlink_target_is_data_refused_only_when_no_link_could_hold_it(link: str, target: str,
                                                                          ok: bool) -> None:
    # Targets leaving the tree used to be refused here; they are data now (tests/store/test_links_as_data.py
    # holds the links="contained" rule that still tells them apart).
    if ok:
        assert check_symlink_target(link, target, where="t") == target
    else:
        with pytest.raises(UnsafePathError):
            check_symlink_target(link, target, where="t")


def test_a_clean_relative_path_passes() -> None:
    assert check_relpath("a/b c/ünï-cødé", where="t") == "a/b c/ünï-cødé"


def _detailed_rules(path: str) -> bool:
    """check_relpath's rules spelled out component by component, as they were before its fast test."""
    if path == ".":
        return True
    parts = path.split("/")
    return bool(path) and "\x00" not in path and not any(part in ("", ".", "..") for part in parts)


@given(st.text(alphabet="a./\x00", max_size=12))
@example("./.")
@example("a/./b")
@example("a/..")
@example("..a/b..")
@example("a//b")
@example("/a")
@example("a/")
@example("")
def test_the_fast_clean_path_test_accepts_exactly_what_the_detailed_rules_accept(path: str) -> None:
    assert paths._clean(path) is _detailed_rules(path)
    if _detailed_rules(path):
        assert check_relpath(path, where="t") == path
    else:
        with pytest.raises(UnsafePathError):
            check_relpath(path, where="t")
