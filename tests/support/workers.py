"""Top-level functions for ``spawn`` child processes (spawn imports them by module name)."""

from __future__ import annotations

from artifactkit import Store


def publish_many(store_root: str, src: str, name: str, count: int) -> list[tuple[int, str]]:
    """Publish ``src`` as ``name`` ``count`` times; return (version, digest) of each."""
    store = Store(store_root)
    return [(ref.version, ref.digest) for ref in (store.publish(src, name) for _ in range(count))]
