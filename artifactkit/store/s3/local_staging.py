"""A bucket publish's local staging: the private directory in the temp dir where files too large to hold in memory
are copied while hashed, until their upload.

It was a :class:`tempfile.TemporaryDirectory`: a publish killed (SIGKILL, a crash, a power cut) left its
``artifactkit-s3-publish-*`` in the temp dir for good, and a second Ctrl-C cut its removal short (issue 53). Now
it is a :class:`~artifactkit.store.private_dir.PrivateDir`, as a download's hidden directories are: marked as ours,
flocked while the publish runs, removed within the cleanup's bound (:mod:`artifactkit.store.cleanup`) however many
Ctrl-Cs come, and whatever a killed or cut-short publish left is swept by the next bucket publish of this user.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Final

from artifactkit.store.private_dir import PrivateDir

#: The staging's name in the temp dir: this prefix and 16 hex digits.
STAGING_PREFIX: Final = "artifactkit-s3-publish-"


@contextlib.contextmanager
def local_staging() -> Iterator[tuple[str, int]]:
    """The staging's path and fd for the block (what is inside is reached through either); removed after it."""
    private = PrivateDir(tempfile.gettempdir(), STAGING_PREFIX, hex_digits=16)
    try:
        yield private.read_path(), private.fd
    finally:
        private.close()
