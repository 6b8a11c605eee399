"""Making atime deterministic: the inode-flag ioctl (``flags``), the filesystem experiment (``probe``),
the verified private noatime tree (``tree``), and the competing readers that test it (``reading`` —
the one way to read like an ordinary program — ``readers`` in threads, ``reader_processes`` in
spawned processes).

It may import ``metadata``, ``errors`` and ``_syscalls``; trace, conformance, cli and the pytest
plugin build on it.
"""
