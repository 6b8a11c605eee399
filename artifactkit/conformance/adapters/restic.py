"""restic: ``backup`` into a fresh local repository, then ``restore latest`` into ``{dst}``.

Commands (repository and cache in the adapter's scratch directory ``{tmp}``)::

    RESTIC_REPOSITORY={tmp}/repo RESTIC_PASSWORD=<throw-away> RESTIC_CACHE_DIR={tmp}/cache
    restic init
    (cd {src} && restic backup --host artifactkit .)
    restic restore latest --target {dst}

Every option, and why (restic docs, "Preparing a new repository", "Backing up", "Restoring"):

* ``RESTIC_PASSWORD``: a repository always has a password before restic 0.17 (``--insecure-no-password``
  arrived in 0.17.0; Debian 12 ships 0.14.0), so a throw-away one is passed in the environment.
* ``RESTIC_CACHE_DIR``: keeps ``~/.cache/restic`` untouched.
* ``backup .`` run inside ``{src}``: the snapshot holds ``{src}``'s contents at its root, so ``restore
  latest --target {dst}`` needs no ``latest:<subfolder>`` (that syntax is 0.17+ too). The root
  directory itself is not a node in 0.14: ``{dst}`` is created by the restore (mode 0700, times now).
* ``--host artifactkit``: the snapshot does not record this machine's host name.
* No ``--with-atime``: restic's default, what its users run. Without it the restore sets every atime
  to the entry's mtime (``set-to-mtime``); with it atime is kept.
"""

from __future__ import annotations

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's restic (apt-get install restic)"
_PASSWORD = "artifactkit-throw-away"  # noqa: S105 - a throw-away repository in a scratch dir


def restic(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """Back ``src`` up with restic's defaults and restore it into ``dst``."""
    exe = find("restic", PACKAGE)
    with steps(src, dst, "restic", log) as run:
        env = {"RESTIC_REPOSITORY": f"{run.tmp}/repo", "RESTIC_PASSWORD": _PASSWORD,
               "RESTIC_CACHE_DIR": f"{run.tmp}/cache"}
        run.run([exe, "init"], env=env)
        run.run([exe, "backup", "--host", "artifactkit", "."], cwd=run.src, env=env)
        run.run([exe, "restore", "latest", "--target", run.dst], env=env)


VERSION = ("restic", "version")
