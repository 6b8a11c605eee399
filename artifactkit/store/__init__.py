"""The content-addressed store: layout and refs at the bottom, then paths, manifest, content, locks,
scan, publish, download, verify and gc, with :class:`~artifactkit.store.store.Store` as the face.

It may import ``metadata``, ``errors`` and ``_syscalls``; it never imports isolation, trace,
conformance or cli (they build on it).
"""
