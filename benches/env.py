"""Where, on what and over which trees the benchmarks run: locations (a tmpfs mounted here), the machine, the
code, the command line, the conditions every measured operation gets (CPU set, source atimes), and the corpora.

The corpora: deterministic content, historical ns times, built with ``artifactkit.conformance.corpus`` (so a
tree is the same bytes and times on every machine). ``small`` 128 x 16 KiB in 4 dirs, ``many`` 10,000 x 1 KiB
in 100 dirs, ``large`` one 256 MiB file; ``scale`` (issue 28) 100,000 x 256 B in 1,000 dirs of 100, published
and downloaded by whole CLI processes.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any, Final

MIB: Final = 1 << 20
# The corpus's historical times (what a user hands us: atime older than ctime, so under relatime the
# first read of each file moves its atime, and that inode update is part of what a copy costs).
CORPUS_TIMES: Final = {"mtime_ns": 1_300_000_000_123_456_789, "atime_ns": 1_300_000_100_987_654_321}


def cpu_set(cores: int) -> list[str]:
    """``taskset -c 0,...,cores-1`` for a child; every peer and every artifactkit op gets the same set."""
    if cores > (os.cpu_count() or 1):
        raise SystemExit(f"--cores {cores}: this machine has {os.cpu_count()} cores")
    return ["taskset", "-c", ",".join(str(c) for c in range(cores))]


def reset_source_atimes(src: str) -> None:
    """Give every source entry its corpus atime (and mtime) back, untimed, before a measurement.

    ``utime`` sets ctime to now, so afterwards atime <= ctime: relatime moves the atime on the next read
    of every file, as it does on a user's tree the first time a tool reads it. artifactkit reads with
    ``O_NOATIME`` and never pays that; ``cp``/``rsync``/``copytree`` do.
    """
    times = (CORPUS_TIMES["atime_ns"], CORPUS_TIMES["mtime_ns"])
    for dirpath, dirs, files in os.walk(src, topdown=False):
        for name in (*files, *dirs):
            os.utime(os.path.join(dirpath, name), ns=times, follow_symlinks=False)
    os.utime(src, ns=times)


def _mount_info(path: str) -> dict[str, Any]:
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,OPTIONS", "-T", path],
                         capture_output=True, text=True, check=False).stdout.split()
    return {"fs_type": out[0] if out else "unknown", "mount_options": out[1].split(",") if len(out) > 1 else []}


@contextlib.contextmanager
def tmpfs_base(size: str = "4g") -> Iterator[tuple[str, str]]:
    """(directory, note): a tmpfs mounted here when root (sized for the scale corpus's trees, each file a page;
    inodes unbounded: three trees of a million files pass tmpfs's default, half the RAM's pages), else a private
    directory on /dev/shm; removed afterwards."""
    if os.geteuid() == 0 and shutil.which("mount") is not None:
        mountpoint = tempfile.mkdtemp(prefix="ak-bench-tmpfs-")
        options = f"size={size},nr_inodes=0,mode=0700"
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "ak-bench", mountpoint], check=True)
        try:
            yield mountpoint, "mounted by this script"
        finally:
            subprocess.run(["umount", mountpoint], check=False)
            os.rmdir(mountpoint)
        return
    with scratch_on_tmpfs() as root:
        if _mount_info(root)["fs_type"] != "tmpfs":
            raise SystemExit(f"{root} is not on a tmpfs: the benchmark measures tmpfs (run as root to mount one)")
        yield root, "a directory on /dev/shm (not root: no tmpfs of its own)"


#: Settings a child must not inherit: with ``PYTHONDONTWRITEBYTECODE`` (this workplace's shells set it) every
#: child compiled each module it imported from source, in the timed operation too (its lazy imports: 7 ms of a
#: first publish), where an installed package reads its bytecode; the warm-up writes it for the rounds.
_DROPPED_SETTINGS: Final = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


def child_env(engine: str) -> dict[str, str]:
    """The environment of a measured child: this one's, on ``engine``, with Python's bytecode cache as a user has it."""
    return {**{k: v for k, v in os.environ.items() if k not in _DROPPED_SETTINGS}, "ARTIFACTKIT_ENGINE": engine}


def environment(tmpfs: str, note: str) -> dict[str, Any]:
    def first_line(cmd: list[str]) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return (done.stdout or done.stderr).splitlines()[0] if (done.stdout or done.stderr) else "unavailable"

    with open("/proc/meminfo", encoding="utf-8") as handle:
        mem_kib = int(next(line for line in handle if line.startswith("MemTotal")).split()[1])
    rsync_help = subprocess.run(["rsync", "--help"], capture_output=True, text=True, check=False).stdout
    return {
        "code_under_test": code_state(),
        "nproc": os.cpu_count(), "mem_gib": round(mem_kib / MIB, 1), "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "tools": {"cp": first_line(["cp", "--version"]), "rsync": first_line(["rsync", "--version"]),
                  "strace": first_line(["strace", "-V"]), "rsync_has_atimes": "--atimes" in rsync_help},
        "tmpfs": {**_mount_info(tmpfs), "note": note},
        "cpu": _cpu(),
        "children_drop": [k for k in _DROPPED_SETTINGS if k in os.environ],
    }


#: Where a Linux guest with virtio-balloon free page reporting says how it hands freed memory back to its host.
PAGE_REPORTING: Final = "/sys/module/page_reporting/parameters"


def page_reporting() -> dict[str, str] | None:
    """The guest's free page reporting settings and its ``reported_kib`` counter (None where the kernel has
    none): memory freed during a run may go back to the host, which must supply it again when next written."""
    if not os.path.isdir(PAGE_REPORTING):
        return None
    found = {}
    for name in sorted(os.listdir(PAGE_REPORTING)):
        with contextlib.suppress(OSError), open(os.path.join(PAGE_REPORTING, name), encoding="ascii") as handle:
            found[name] = handle.read().strip()
    return found


def _cpu() -> dict[str, Any]:
    # sha_ni decides what hashlib.sha256 (OpenSSL) and the core's sha2 can do per byte: the large-file floor.
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        info = dict(line.split(":", 1) for line in handle.read().split("\n\n", 1)[0].splitlines() if ":" in line)
    return {"model": info.get("model name\t", "unknown").strip(), "sha_ni": "sha_ni" in info.get("flags\t\t", "")}


def code_state() -> dict[str, Any]:
    # Several people work in this tree: record exactly which store code was measured.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--", "artifactkit").splitlines()
    return {"commit": git("rev-parse", "HEAD"), "artifactkit_changes_uncommitted": dirty,
            "native_core": _native_build(root, git("status", "--porcelain", "--", "native", "Cargo.toml",
                                                   "Cargo.lock").splitlines())}


def _native_build(root: str, dirty: list[str]) -> dict[str, Any]:
    """The built core next to the package, and whether it is older than a Rust source (a stale build)."""
    built = [os.path.join(root, "artifactkit", n) for n in os.listdir(os.path.join(root, "artifactkit"))
             if n.startswith("_native") and n.endswith(".so")]
    if not built:
        return {"built": False}
    sources = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(root, "native")) for n in names]
    newest = max((os.stat(p).st_mtime_ns for p in sources), default=0)
    return {"built": True, "file": os.path.basename(built[0]), "older_than_a_source": os.stat(built[0]).st_mtime_ns
            < newest, "native_changes_uncommitted": dirty}


def command_line(argv: list[str], script: str = "store") -> str:
    """How ``benches/<script>.py`` was run (``python -m``, from the repository root). Evidence is sanitized:
    absolute paths (home, temp dirs) become their base names."""
    args = [os.path.basename(a) if os.path.isabs(a) else a for a in argv]
    return " ".join(["python", "-m", f"benches.{script}", *args])


@contextlib.contextmanager
def scratch_on_tmpfs() -> Iterator[str]:
    """A private directory on /dev/shm where there is one (the filesystem is not what is measured),
    removed afterwards."""
    shm = "/dev/shm"  # noqa: S108 - a private mkdtemp directory under it
    root = tempfile.mkdtemp(prefix="artifactkit-bench-", dir=shm if os.path.isdir(shm) else None)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: name -> (files, bytes per file, directories)
CORPORA: Final = {"small": (128, 16 << 10, 4), "many": (10_000, 1 << 10, 100), "large": (1, 256 << 20, 0)}
#: ``--quick``: the same shapes, small enough for a smoke run of seconds.
QUICK_CORPORA: Final = {"small": (32, 16 << 10, 4), "many": (500, 1 << 10, 10), "large": (1, 16 << 20, 0)}
SCALE_FILES: Final = 100_000
SCALE_FILES_QUICK: Final = 2_000
SCALE_BYTES: Final = 256
SCALE_PER_DIR: Final = 100


def scale_shape(files: int) -> tuple[int, int, int]:
    """``files`` x 256 B in directories of 100 (the issue's 1,000 dirs x 100 for 100,000 files)."""
    return files, SCALE_BYTES, max(1, files // SCALE_PER_DIR)


def build_corpus(dest: str, name: str, files: int, size: int, dirs: int) -> None:
    from artifactkit.conformance.corpus import content, materialize, parse_tree  # noqa: PLC0415
    from artifactkit.metadata.times import set_times_exact  # noqa: PLC0415

    times = dict(CORPUS_TIMES)
    if size > 64 * MIB:
        # corpus.content() is random.randbytes, which cannot make 256 MiB at once (a C int of bits):
        # the same deterministic bytes, 1 MiB per seed, and times set and read back exactly.
        os.mkdir(dest, 0o755)
        path = os.path.join(dest, "f00000.bin")
        with open(path, "wb") as handle:
            for chunk in range(size // MIB):
                handle.write(content(1000 + chunk, MIB))
        set_times_exact(path, **times)
        set_times_exact(dest, **times)
        return
    entries: list[dict[str, Any]] = [{"path": ".", "kind": "dir", "mode": 0o755, **times}]
    entries += [{"path": f"d{g:03d}", "kind": "dir", "mode": 0o755, **times} for g in range(dirs)]
    pattern = "d{group:03d}/f{i:05d}.bin" if dirs else "f{i:05d}.bin"
    generate = {"count": files, "per_dir": max(1, files // max(dirs, 1)), "pattern": pattern, "mode": 0o644,
                "size": size, "seed": 1000, "step_ns": 1_000_003, **times}
    materialize(parse_tree(f"bench-{name}", {"entry": entries, "generate": [generate]}), dest)


#: ``mixed`` (benches/s3.py): (share of the files, smallest, largest size), sizes drawn from a fixed seed.
MIXED_SIZES: Final = ((0.90, 1 << 10, 16 << 10), (0.09, 32 << 10, 256 << 10), (0.01, 1 * MIB, 4 * MIB))


def build_mixed(dest: str, files: int, dirs: int) -> None:
    """The ``mixed`` corpus: ``files`` of the sizes of :data:`MIXED_SIZES` in ``dirs`` directories, the content
    of ``artifactkit.conformance.corpus.content`` (deterministic), every time the corpus time."""
    import random  # noqa: PLC0415

    from artifactkit.conformance.corpus import content  # noqa: PLC0415

    draw = random.Random(53)  # reproducible sizes, not secrets
    sizes = [draw.randint(low, high) for share, low, high in MIXED_SIZES for _ in range(round(share * files))]
    sizes += [MIXED_SIZES[0][1]] * (files - len(sizes))
    draw.shuffle(sizes)
    for index, size in enumerate(sizes[:files]):
        folder = os.path.join(dest, f"d{index % dirs:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{index:05d}.bin"), "wb") as handle:
            handle.write(content(2000 + index, size))
    reset_source_atimes(dest)


def tree_size(root: str) -> tuple[int, int]:
    files = total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            files += 1
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return files, total


def settle_atimes(src: str) -> None:
    """Read every file and list every directory once (untimed): relatime has then moved each atime to now, and
    moves none again within a day, whichever tool reads the tree next (the source of versions to compare)."""
    for top, _dirs, names in os.walk(src):
        for name in names:
            with open(os.path.join(top, name), "rb") as handle:
                handle.read()


def tool_env(endpoint: Any, base: str, engine: str = "") -> dict[str, dict[str, str]]:
    """Each S3 tool's environment (``benches/s3.py``): the standard AWS variables for the server and nothing of this
    machine's; ``engine``: artifactkit's as :func:`child_env` gives it."""
    from artifactkit.conformance.adapters.rclone_s3 import is_plain_http_loopback  # noqa: PLC0415

    common = {**(child_env(engine) if engine else os.environ), **endpoint.env(), "AWS_EC2_METADATA_DISABLED": "true",
              "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
              "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    common.pop("AWS_PROFILE", None)
    rclone = {**common, "RCLONE_CONFIG": os.path.join(base, "rclone.conf"), "RCLONE_CONFIG_S3T_TYPE": "s3",
              "RCLONE_CONFIG_S3T_PROVIDER": "SeaweedFS", "RCLONE_CONFIG_S3T_ENV_AUTH": "true",
              "RCLONE_CONFIG_S3T_ENDPOINT": endpoint.url, "RCLONE_CONFIG_S3T_REGION": endpoint.region}
    if is_plain_http_loopback(endpoint.url):
        rclone.pop("AWS_CA_BUNDLE", None)  # plain http: no TLS; Debian's rclone 1.60 refuses any bundle
    return {"artifactkit": common, "aws": common, "rclone": rclone}


def tool_versions(bins: dict[str, str]) -> dict[str, str]:
    """The interpreter, kernel, library and S3 tools of a ``benches/s3.py`` run."""
    def first(cmd: list[str]) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return (done.stdout or done.stderr).strip().splitlines()[0]

    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {"python": platform.python_version(), "kernel": platform.release(), "nproc": str(os.cpu_count()),
            "artifactkit": version("artifactkit"), "obstore": installed("obstore"), "boto3": installed("boto3"),
            "weed": first([bins["weed"], "version"]), "rclone": first([bins["rclone"], "version"]),
            "aws": first([bins["aws"], "--version"])}
