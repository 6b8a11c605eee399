"""The probe past client caches, on local filesystems made to behave like a caching client (no FUSE needed).

The real networked and FUSE rows are in tests/test_fs_matrix_fuse.py; here a stand-in for the cache
(a ``stat`` that never sees reads, or a filesystem without ``link``) shows each verdict is reached
for its reason, and that the fixture and the CLI say so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit._mounts import may_cache_attributes
from artifactkit.cli.probe import render
from artifactkit.errors import IsolationError
from artifactkit.isolation import client_cache, probe
from artifactkit.isolation.client_cache import UNVERIFIED, look_past_caches
from artifactkit.isolation.probe import HISTORICAL_NS, POST_2038_NS, PRE_1970_NS, probe_atime, write_file
from artifactkit.isolation.tree import private_noatime_tree
from tests.support.mounts import Mounts

Times = tuple[int, int]


def test_network_and_fuse_types_are_the_ones_that_may_cache() -> None:
    assert all(map(may_cache_attributes, ("fuse", "fuse.sshfs", "fuse.s3fs", "nfs", "nfs4", "cifs", "smb3", "9p",
                                          "ceph", "virtiofs")))
    assert not any(map(may_cache_attributes, ("ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "fuseblk-not")))


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_cache, "WAIT_S", 0)  # the stand-ins below have no timeout to wait out


def _run(directory: Path) -> client_cache.LookedPast:
    return look_past_caches(str(directory), HISTORICAL_NS, HISTORICAL_NS * 2, (PRE_1970_NS, POST_2038_NS), write_file)


def test_on_a_filesystem_without_a_cache_nothing_is_seen_and_the_moves_are_the_plain_probes(
        tmpfs_relatime: Path, fast: None) -> None:
    found = _run(Path(os.path.realpath(tmpfs_relatime)) / _fresh(tmpfs_relatime))
    assert (found.verdict, found.historical_moved, found.future_moved) == ("not seen", True, False)
    assert (found.historical_mtime_ns, found.extremes_kept) == (HISTORICAL_NS, (PRE_1970_NS, POST_2038_NS))


def _fresh(base: Path) -> str:
    return os.path.basename(tempfile.mkdtemp(dir=base))


def _stale_plain(real: Callable[[str], Times]) -> Callable[[str], Times]:
    """A client cache that never sees reads: the name in use keeps answering what it first answered after a utime."""
    cache: dict[str, Times] = {}

    def plain(path: str) -> Times:
        if ".look-" in path:
            return real(path)  # a new name: the server's answer
        now = real(path)
        if path not in cache or cache[path][1] != now[1]:  # a utime (new mtime) refreshes the entry
            cache[path] = now
        return cache[path]
    return plain


def test_a_cache_that_hides_a_read_is_seen_and_looked_past(
        tmpfs_relatime: Path, fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_cache, "_plain", _stale_plain(client_cache._plain))
    found = _run(tmpfs_relatime / _fresh(tmpfs_relatime))
    assert (found.verdict, found.historical_moved) == ("seen", True)


def test_where_no_second_name_can_be_made_what_a_cache_could_fake_is_unverified(
        mounts: Mounts, fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "may_cache_attributes", lambda fs_type: True)
    monkeypatch.setattr(client_cache, "linked_times", lambda path: None)
    noatime = mounts.shared("client-cache-noatime", lambda m: m.tmpfs("noatime", size="8m"))
    found = probe_atime(noatime)
    assert found.client_cache == "cannot tell"
    assert found.atime_policy == UNVERIFIED, "no read moved atime, but only a cache was asked"
    assert found.unverified == ("atime_policy", "granularity_ns", "pre_1970_ok", "post_2038_ok")
    assert json.loads(json.dumps(found.to_json()))["atime_policy"] == UNVERIFIED
    shown = dict(line.split(None, 1) for line in render(found).splitlines()[2:] if line.strip() and " " in line)
    assert {key: shown[key] for key in ("atime_policy", "reads_move_historical_atime", "granularity_ns")} == \
        dict.fromkeys(("atime_policy", "reads_move_historical_atime", "granularity_ns"), UNVERIFIED)
    with pytest.raises(IsolationError, match=r"unverified .client-cached attributes.*remedy: mount it with the "
                                             r"client.s attribute caches off") as info:
        private_noatime_tree(noatime, probe=found)
    assert info.value.context["failed"] == "client-cache"
    assert [name for name in os.listdir(noatime) if name.startswith("artifactkit-")] == []


def test_a_move_seen_is_proof_even_where_nothing_else_can_be_verified(
        tmpfs_relatime: Path, fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "may_cache_attributes", lambda fs_type: True)
    monkeypatch.setattr(client_cache, "linked_times", lambda path: None)
    found = probe_atime(tmpfs_relatime)
    assert (found.atime_policy, found.client_cache) == ("relatime", "cannot tell")
    assert "atime_policy" not in found.unverified and not found.attributes_trusted


def test_a_cache_seen_makes_the_fixture_error_with_the_remedy_and_leave_nothing(
        tmpfs_relatime: Path, fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "may_cache_attributes", lambda fs_type: True)
    monkeypatch.setattr(client_cache, "_plain", _stale_plain(client_cache._plain))
    base = tmpfs_relatime / _fresh(tmpfs_relatime)
    found = probe_atime(base)
    assert (found.client_cache, found.atime_policy, found.unverified) == ("seen", "relatime", ())
    with pytest.raises(IsolationError, match=r"under a new name, showed other times.*remedy: mount it") as info:
        private_noatime_tree(base, probe=found)
    assert info.value.context["failed"] == "client-cache"
    assert os.listdir(base) == []
