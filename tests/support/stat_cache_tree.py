"""The source tree the stat cache tests publish: one of each kind of entry, historical times, settled."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.inode_clock import settle

OLD = 1_000_000_000_123_456_789


def rich_tree(root: Path, *, hard_link: bool = True) -> Path:
    """Files, a file and a dir with xattrs, a mode-0700 dir, a symlink, a sparse file and (``hard_link``) a
    two-name hard link, whose listings are always decided entry by entry; every time historical."""
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "c.bin").write_bytes(bytes(range(256)) * 8)
    (root / "sub" / "deep" / "d.txt").write_bytes(b"delta\n")
    (root / "link").symlink_to("a.txt")
    if hard_link:
        (root / "h1").write_bytes(b"linked\n")
        os.link(root / "h1", root / "sub" / "h2")
    with open(root / "sparse", "wb") as handle:
        handle.truncate(1 << 20)
        handle.seek(512 << 10)
        handle.write(b"data")
    os.setxattr(root / "a.txt", "user.origin", b"build 42")
    os.setxattr(root / "sub", "user.role", b"dir")
    os.chmod(root / "sub" / "deep", 0o700)
    for path in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
        os.utime(path, ns=(OLD, OLD + 7), follow_symlinks=False)
    os.utime(root, ns=(OLD, OLD + 7))
    settle(root)
    return root
