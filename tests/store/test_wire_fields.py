"""A batch crosses the pipe as tuples and is rebuilt positionally: every field must land in its own place."""

from __future__ import annotations

import attrs

from artifactkit.metadata.model import FileMeta
from artifactkit.store import download, stage

# Every value distinct, so a swap of any two fields shows.
ENTRY = FileMeta(path="d/f", kind="file", mode=0o640, mtime_ns=11, atime_ns=12, size=13, sha256="ab" * 32,
                 target=None, ctime_ns=14, uid=15, gid=16, xattrs=(("user.k", b"v"),), hardlink=None, nlink=1,
                 extents=((0, 4096),), flags=17)


def test_a_download_entry_comes_back_from_the_wire_with_every_field_it_carries() -> None:
    back = download._from_wire(download.to_wire(ENTRY))
    # ctime_ns, hardlink and nlink do not cross: a created file needs none of them.
    assert attrs.asdict(back) == {**attrs.asdict(ENTRY), "ctime_ns": None, "hardlink": None, "nlink": None}


def test_a_publish_item_comes_back_from_the_wire_with_what_the_read_checks() -> None:
    index, entry, identity = stage.from_wire(stage.to_wire((7, ENTRY, (21, 22))))
    assert (index, identity) == (7, (21, 22))
    assert (entry.path, entry.kind, entry.size, entry.mtime_ns, entry.ctime_ns) == ("d/f", "file", 13, 11, 14)
