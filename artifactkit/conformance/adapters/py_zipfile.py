"""Python's ``zipfile`` (the ``zipfile`` adapter): ``ZipFile.write`` every entry, then ``extractall``.

Calls::

    with zipfile.ZipFile("{tmp}/a.zip", "w", zipfile.ZIP_DEFLATED, strict_timestamps=False) as zf:
        zf.write(path, arcname)          # every directory and file under {src}, os.walk order
    zipfile.ZipFile("{tmp}/a.zip").extractall("{dst}")

Every option, and why (Python docs, ``zipfile``):

* ``ZIP_DEFLATED``: the compression people use; it changes no metadata.
* ``strict_timestamps=False``: without it ``write`` raises ``ValueError`` for a time before 1980;
  with it such times are stored as 1980-01-01 (and after 2107 as 2107-12-31).
* zipfile has no symlinks: ``write`` follows a link (stores the target's bytes); a dangling link
  cannot be written (``FileNotFoundError``), so it is left out and reported missing.
* ``extractall`` restores neither times nor modes (documented), which is what its users get.
"""

from __future__ import annotations

import os
import zipfile

from artifactkit.conformance.adapters._tool import steps


def zipfile_tree(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """Archive with ``zipfile`` and extract with ``extractall``."""
    with steps(src, dst, "zipfile", log) as run:
        archive = f"{run.tmp}/a.zip"
        run.log.append("zipfile.ZipFile('{tmp}/a.zip', 'w', ZIP_DEFLATED, strict_timestamps=False)"
                       ".write(path, arcname) for each dir and file of {src}")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, strict_timestamps=False) as zf:
            for root, dirs, files in os.walk(run.src):
                dirs.sort()
                rel = os.path.relpath(root, run.src)
                for name in sorted(dirs) + sorted(files):
                    path = os.path.join(root, name)
                    if os.path.islink(path) and not os.path.exists(path):
                        continue  # dangling: ZipFile.write would raise FileNotFoundError
                    zf.write(path, name if rel == "." else f"{rel}/{name}")
        run.log.append("zipfile.ZipFile('{tmp}/a.zip').extractall('{dst}')")
        os.mkdir(run.dst)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(run.dst)
