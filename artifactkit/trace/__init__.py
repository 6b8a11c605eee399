"""Traced diagnostic cycles: the ``diagnose`` engine (``engine``), its inotify ``watcher``, attribution of
outside readers with fanotify (:mod:`artifactkit._fanotify` the kernel interface, shared with conformance;
``holder`` the process that keeps an opener waiting until ``procnames`` has named it, ``tracer`` its parent
side, ``attribution`` the accounting and grouping), and sanitized JSON ``evidence``.

It may import ``metadata``, ``store``, ``isolation`` and ``conformance.corpus``; only the cli
imports it. Nothing here is loaded by ``import artifactkit``.
"""
