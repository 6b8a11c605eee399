"""DVC 3 with a local remote: ``dvc add`` + ``dvc push``, then a fresh ``git clone`` + ``dvc pull``.

Commands (all in ``{tmp}``; a throw-away git identity; ``HOME={tmp}``)::

    git init -q {tmp}/work && cd {tmp}/work && dvc init -q
    dvc add {src} --out data
    dvc remote add -d local {tmp}/remote
    git add -A && git commit -q -m data && dvc push
    git clone -q {tmp}/work {tmp}/clone && cd {tmp}/clone && dvc pull
    mv {tmp}/clone/data {dst}

Every option, and why (DVC docs, "Get Started: Data Versioning", ``dvc add``, ``dvc remote add``):

* The documented way to share data: ``dvc add`` -> commit the ``.dvc`` file -> ``dvc push``; on
  another checkout ``git clone`` -> ``dvc pull``. ``dvc add <outside> --out data`` is DVC's way to bring
  a tree in from outside the workspace; the cache type is DVC's default (reflink, else copy).
* ``remote add -d``: make the local directory the default remote.
* ``DVC_NO_ANALYTICS=1``: no usage report is sent; ``HOME`` and ``GIT_CONFIG_NOSYSTEM``: neither
  this user's nor the system's git/dvc configuration takes part.
* The final ``mv`` is a rename: it changes no metadata.
"""

from __future__ import annotations

import os

from artifactkit.conformance.adapters._tool import find, steps

PACKAGE = "PyPI's dvc (pip install dvc) and Debian's git"


def dvc(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """Push ``src`` through a DVC local remote and pull it into a fresh clone."""
    exe, git = find("dvc", PACKAGE), find("git", PACKAGE)
    with steps(src, dst, "dvc", log) as run:
        work, clone = f"{run.tmp}/work", f"{run.tmp}/clone"
        env = {"DVC_NO_ANALYTICS": "1", "HOME": run.tmp, "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_AUTHOR_NAME": "artifactkit", "GIT_AUTHOR_EMAIL": "artifactkit@invalid",
               "GIT_COMMITTER_NAME": "artifactkit", "GIT_COMMITTER_EMAIL": "artifactkit@invalid"}
        run.run([git, "init", "-q", work], env=env)
        run.run([exe, "init", "-q"], cwd=work, env=env)
        run.run([exe, "add", run.src, "--out", "data"], cwd=work, env=env)
        run.run([exe, "remote", "add", "-d", "local", f"{run.tmp}/remote"], cwd=work, env=env)
        run.run([git, "add", "-A"], cwd=work, env=env)
        run.run([git, "commit", "-q", "-m", "data"], cwd=work, env=env)
        run.run([exe, "push"], cwd=work, env=env)
        run.run([git, "clone", "-q", work, clone], env=env)
        run.run([exe, "pull"], cwd=clone, env=env)
        run.log.append("mv {tmp}/clone/data {dst}")
        os.rename(f"{clone}/data", run.dst)


VERSION = ("dvc", "--version")
