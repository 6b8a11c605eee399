"""Info-ZIP ``zip``/``unzip`` (the ``zip`` adapter): archive ``{src}``, unpack into ``{dst}``.

Commands::

    (cd {src} && zip -r -y -q {tmp}/a.zip .)
    unzip -q {tmp}/a.zip -d {dst}

Every option, and why (zip(1), unzip(1)):

* ``-r``: recurse into directories; ``.`` from inside ``{src}`` keeps the paths relative.
* ``-y`` (``--symlinks``): store symbolic links as links instead of the files they point to.
* ``-q``: quiet; errors still go to stderr.
* ``unzip -d {dst}``: extract there (created). No ``-K``/``-X``: unzip's defaults, so setuid, setgid
  and sticky bits and owners are not restored; ``unzip -K -X`` is what keeps them.
* zip keeps times in the "UT" extra field: whole seconds, unsigned 32-bit; the DOS time begins 1980.
"""

from __future__ import annotations

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's zip and unzip (apt-get install zip unzip)"


def zip_tree(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``zip -r -y`` then ``unzip``."""
    zip_exe, unzip_exe = find("zip", PACKAGE), find("unzip", PACKAGE)
    with steps(src, dst, "zip", log) as run:
        run.run([zip_exe, "-r", "-y", "-q", f"{run.tmp}/a.zip", "."], cwd=run.src)
        run.run([unzip_exe, "-q", f"{run.tmp}/a.zip", "-d", run.dst])


VERSION = ("zip", "-v")
VERSION_LINE = "This is Zip"
