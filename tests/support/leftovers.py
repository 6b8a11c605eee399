"""What a killed download leaves beside its destination, made for real: a child process SIGKILLed mid-way.

The sweep before each download removes only what it can prove a download made (docs/store.md): a directory
planted under the same name is not such a leftover, so the tests of the sweep make theirs the one way a user
gets one, by killing a process of this very code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from artifactkit import Store

_KILLED_MID_DOWNLOAD = textwrap.dedent("""
    import os, signal, sys
    from artifactkit import Store
    from artifactkit.store import download

    def die(*args):  # every entry restored and verified, just before the rename into place
        os.kill(os.getpid(), signal.SIGKILL)  # a kill point in the child only: the code under test ships as is

    download._rename_into_place = die
    Store(sys.argv[1]).download(sys.argv[2], sys.argv[3])
""")

_KILLED_WITH_A_PRIVATE_DIR = textwrap.dedent("""
    import os, signal, sys
    from artifactkit.store.private_dir import PrivateDir

    made = PrivateDir(sys.argv[1], sys.argv[2], hex_digits=int(sys.argv[3]))
    fd = os.open("half", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=made.fd)
    os.write(fd, b"partial")
    print(made.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # a download killed mid-way: its directory is abandoned
""")


def killed_download(store: Store, name: str, dest: Path) -> list[str]:
    """Download ``name`` to ``dest`` in a child SIGKILLed once the tree is verified, before it is renamed into
    place; the names it left beside ``dest`` (its private directory; from a bucket also the fetched blobs')."""
    before = set(os.listdir(dest.parent))
    done = subprocess.run([sys.executable, "-c", _KILLED_MID_DOWNLOAD, str(store.root), name, str(dest)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    return sorted(set(os.listdir(dest.parent)) - before)


def killed_private_dir(parent: Path, prefix: str, hex_digits: int) -> Path:
    """A private directory (``prefix`` + ``hex_digits`` hex) made in ``parent`` by a child that wrote a file
    into it and was SIGKILLed: an abandoned one, as a killed download leaves it."""
    done = subprocess.run([sys.executable, "-c", _KILLED_WITH_A_PRIVATE_DIR, str(parent), prefix, str(hex_digits)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    return parent / done.stdout.strip()
