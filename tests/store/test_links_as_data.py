"""Symlinks are data: every target is published as it is and restored as the same link, never followed.

The restore is fd-relative with ``O_NOFOLLOW`` all the way down, so a link whose target leaves the tree
is harmless to restore: these tests prove nothing is written through one (a sibling ``outside`` directory
stays empty) and that the opt-in ``links="contained"`` policy refuses them all at once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from artifactkit import Store, UnsafePathError
from artifactkit.cli.main import main
from artifactkit.manifest.paths import link_leaves_tree
from tests.support.stores import nothing_stored

T = 1_600_000_000_123_456_789

#: link path -> target: inside, leaving by '..', absolute, dangling, through a name then up, at the root.
LINKS = {
    "snapshots/abc/model.bin": "../../../blobs/0123abcd",  # a hub-style cache snapshot, published alone
    "snapshots/abc/config": "../../blobs/0123abcd",  # the same, its blob inside the tree
    "alt/editor": "/etc/alternatives/editor",
    "inside": "snapshots/abc",
    "dangling": "no/such/thing",
    "snapshots/through": "x/../../../outside",
    "up": "..",
    "abs-dir": "/",
}
LEAVING = sorted(["snapshots/abc/model.bin", "alt/editor", "snapshots/through", "up", "abs-dir"])


def _tree(root: Path) -> Path:
    (root / "snapshots" / "abc").mkdir(parents=True)
    (root / "alt").mkdir()
    (root / "blobs").mkdir()
    (root / "blobs" / "0123abcd").write_bytes(b"weights")
    for number, (path, target) in enumerate(sorted(LINKS.items())):
        os.symlink(target, root / path)
        os.utime(root / path, ns=(T + number, T - number), follow_symlinks=False)
    return root


def _links(root: Path) -> dict[str, tuple[str, int, int]]:
    """Each link's target and times; read once, at the end of a test (readlink moves a link's atime)."""
    found = {}
    for path in LINKS:
        st = os.lstat(root / path)
        found[path] = (os.readlink(root / path), st.st_atime_ns, st.st_mtime_ns)
    return found


def _expected(root: Path) -> dict[str, tuple[str, int, int]]:
    """What a publish of ``root`` must record and a download restore: ``lstat`` only, nothing moved."""
    return {path: (target, os.lstat(root / path).st_atime_ns, os.lstat(root / path).st_mtime_ns)
            for path, target in LINKS.items()}


@pytest.fixture
def site(fast_tmp: Path) -> Path:
    _tree(fast_tmp / "src")
    (fast_tmp / "outside").mkdir()
    return fast_tmp


def test_every_symlink_target_round_trips_as_the_same_link_with_its_own_times(site: Path, any_store: Store) -> None:
    expected = _expected(site / "src")
    store = any_store
    store.publish(site / "src", "demo")
    recorded = {e.path: e.target for e in store.manifest("demo").entries if e.kind == "symlink"}
    assert recorded == LINKS, "every target recorded as it is"
    store.download("demo", site / "out")
    assert _links(site / "out") == expected
    assert all((site / "out" / path).is_symlink() for path in LINKS)


def test_a_download_of_links_leaving_the_tree_writes_nothing_through_them(site: Path, any_store: Store) -> None:
    # Links that point at the sibling directory the download lands beside: a restore that followed one
    # would create or touch something there.
    os.symlink("../outside", site / "src" / "out-link")
    os.symlink(str(site / "outside"), site / "src" / "abs-out-link")
    store = any_store
    store.publish(site / "src", "demo")
    (site / "work").mkdir()
    before = os.stat(site / "outside")
    store.download("demo", site / "work" / "dest")
    assert os.listdir(site / "outside") == []
    after = os.stat(site / "outside")
    assert (after.st_mtime_ns, after.st_ctime_ns) == (before.st_mtime_ns, before.st_ctime_ns)
    assert os.readlink(site / "work" / "dest" / "out-link") == "../outside"
    assert os.readlink(site / "work" / "dest" / "abs-out-link") == str(site / "outside")


@pytest.mark.parametrize(("link", "target", "leaves"), [
    ("a", "b", False), ("d/a", "../b", False), ("d/a", "../../b", True), ("a", "/etc", True),
    ("a", "x/../../b", True), ("a", "L/../etc", True), ("d/e/a", "../../x/y", False), ("a", "./b/./c", False),
    ("a", "..", True),
])
def test_the_contained_rule_only_lets_a_link_climb_as_far_as_its_own_depth(link: str, target: str,
                                                                          leaves: bool) -> None:
    assert link_leaves_tree(link, target) is leaves


def test_links_contained_refuses_every_link_that_leaves_the_tree_at_once_and_creates_no_store(
        site: Path, any_store: Store) -> None:
    with pytest.raises(UnsafePathError) as caught:
        Store(any_store.root).publish(site / "src", "demo", links="contained")
    assert sorted(getattr(caught.value, "links", [])) == LEAVING
    for path in LEAVING:
        assert repr(path) in str(caught.value)
    assert nothing_stored(any_store)


def test_links_contained_publishes_a_tree_whose_links_stay_inside(site: Path, any_store: Store) -> None:
    for path in LEAVING:
        os.unlink(site / "src" / path)
    ref = Store(any_store.root).publish(site / "src", "demo", links="contained")
    assert ref.version == 1


def test_an_unknown_links_policy_is_refused_before_anything_is_read(site: Path, any_store: Store) -> None:
    with pytest.raises(ValueError, match="links"):
        Store(any_store.root).publish(site / "src", "demo", links="follow")  # type: ignore[arg-type]
    assert nothing_stored(any_store)


def test_cli_publish_keeps_links_by_default_and_refuses_them_with_links_contained(
        site: Path, any_store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(any_store.root)
    assert main(["publish", str(site / "src"), "--store", store, "--name", "demo", "--links", "contained",
                 "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["type"] == "UnsafePathError" and sorted(doc["fields"]["links"]) == LEAVING
    expected = _expected(site / "src")  # after that scan's readlinks (they move a link's atime)
    assert main(["publish", str(site / "src"), "--store", store, "--name", "demo", "--links", "as-is"]) == 0
    assert main(["download", "demo@1", str(site / "out"), "--store", store]) == 0
    assert _links(site / "out") == expected
    assert main(["publish", str(site / "src"), "--store", store, "--name", "demo"]) == 0, "as-is is the default"
