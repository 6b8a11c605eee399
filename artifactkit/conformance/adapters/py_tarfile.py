"""Python's ``tarfile`` (the ``tarfile`` adapter): a PAX archive, ``extractall(filter="fully_trusted")``.

Calls::

    tarfile.open("{tmp}/a.tar", "w", format=tarfile.PAX_FORMAT).add("{src}", arcname=".")
    tarfile.open("{tmp}/a.tar").extractall("{dst}", filter="fully_trusted")

Every option, and why (Python docs, ``tarfile``, PEP 706):

* ``PAX_FORMAT``: the format that can hold more than whole seconds; ``add`` recurses and stores
  symlinks as symlinks (``dereference=False`` is the default).
* ``filter="fully_trusted"``: the ``"data"`` (3.14's default) and ``"tar"`` filters clear setuid,
  setgid, sticky and group/other write; only ``fully_trusted`` keeps modes and owners. Passing it
  also silences 3.12's deprecation warning. Before 3.11.4 there is no filter (same behaviour).
* ``TarInfo`` has one time, ``mtime``, taken from the *float* ``st_mtime``: mtimes come back
  ``float-rounded``, atimes are set to that mtime, symlink times and xattrs are not restored.
"""

from __future__ import annotations

import os
import tarfile

from artifactkit.conformance.adapters._tool import steps


def tarfile_tree(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """Archive with ``tarfile`` (PAX) and extract with the one filter that keeps metadata."""
    with steps(src, dst, "tarfile", log) as run:
        archive = f"{run.tmp}/a.tar"
        run.log.append("tarfile.open('{tmp}/a.tar', 'w', format=tarfile.PAX_FORMAT).add('{src}', arcname='.')")
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tf:
            tf.add(run.src, arcname=".")
        run.log.append("tarfile.open('{tmp}/a.tar').extractall('{dst}', filter='fully_trusted')")
        os.mkdir(run.dst)
        with tarfile.open(archive) as tf:
            if hasattr(tarfile, "fully_trusted_filter"):
                tf.extractall(run.dst, filter="fully_trusted")  # noqa: S202 - our own archive
            else:  # Python < 3.11.4: no filters, and the behaviour fully_trusted names
                tf.extractall(run.dst)  # noqa: S202 - our own archive
