"""The content-addressed store: its layout at the bottom, then locks, publish, download, verify and gc, with
:class:`~artifactkit.store.store.Store` as the face.

It may import ``engine`` (the per-file work, below it), ``manifest``, ``metadata``, ``errors`` and ``_syscalls``; it
never imports isolation, trace, conformance or cli (they build on it).
"""
