"""borg (BorgBackup 1.2): ``create`` into a fresh unencrypted repository, ``extract`` into ``{dst}``.

Commands (repository and borg's own state in ``{tmp}``)::

    BORG_BASE_DIR={tmp}/base BORG_PASSPHRASE= BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes
    borg init --encryption=none {tmp}/repo
    (cd {src} && borg create [--atime] {tmp}/repo::a .)
    mkdir {dst} && (cd {dst} && borg extract {tmp}/repo::a)

Every option, and why (borg docs, "borg init", "borg create", "borg extract", "Environment Variables"):

* ``--encryption=none``: no key and no passphrase to manage for a throw-away repository;
  ``BORG_PASSPHRASE=`` makes an inherited passphrase moot.
* ``BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes``: pre-answers the one prompt an unencrypted
  repository can raise (stdin is /dev/null, so any other prompt fails instead of hanging).
* ``BORG_BASE_DIR``: keys, cache and security records stay in ``{tmp}``, not in ``~``.
* ``create ... .`` inside ``{src}``: archive paths relative to ``{src}``; ``extract`` always writes
  into its working directory, hence ``cd {dst}``.
* ``--atime`` (``borg-atime`` only): borg 1.2 does not store atime by default (``--noatime`` is the
  default); without it the extract sets atime to the mtime (``set-to-mtime``). Both variants clamp
  times to 0 ... 2**31-1 minus 48 h (``MAX_S`` in borg/helpers/time.py): pre-1970 and post-2038
  values come back ``clamped``.
"""

from __future__ import annotations

import os

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "Debian's borgbackup (apt-get install borgbackup)"


def _borg(src: str, dst: str, create_options: list[str], log: list[str] | None) -> None:
    exe = find("borg", PACKAGE)
    with steps(src, dst, "borg", log) as run:
        env = {"BORG_BASE_DIR": f"{run.tmp}/base", "BORG_PASSPHRASE": "",
               "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes"}
        repo = f"{run.tmp}/repo"
        run.run([exe, "init", "--encryption=none", repo], env=env)
        run.run([exe, "create", *create_options, f"{repo}::a", "."], cwd=run.src, env=env)
        os.mkdir(run.dst)
        run.run([exe, "extract", f"{repo}::a"], cwd=run.dst, env=env)


def borg(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """borg's defaults (atime not stored)."""
    _borg(src, dst, [], log)


def borg_atime(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``borg create --atime``: what borg users who need atime should run."""
    _borg(src, dst, ["--atime"], log)


VERSION = ("borg", "--version")
