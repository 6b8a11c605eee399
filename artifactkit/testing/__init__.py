"""Real filesystems for tests, shipped with the kit: mount helpers (``mounts``), the filesystem matrix
(``fs_matrix``), the kill-point crash harness (``crash``), its workers (``fault_workers``) and the
strace durability-order check (``durability``). The project's tests and ``diagnostics/`` share them.

Root (or a user namespace that may mount) is needed to use most of it; importing it needs nothing.
It may import every other subpackage but the cli.
"""
