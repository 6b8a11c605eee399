"""Traced diagnostic cycles: the ``diagnose`` engine (``engine``), its inotify ``watcher``, ``fanotify``
attribution of foreign readers, and sanitized JSON ``evidence``.

It may import ``metadata``, ``store``, ``isolation`` and ``conformance.corpus``; only the cli
imports it. Nothing here is loaded by ``import artifactkit``.
"""
