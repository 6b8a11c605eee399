"""A real ``EINTR`` for every other call of one C library function, in a child process: an ``LD_PRELOAD`` shim.

A local filesystem never interrupts these calls, but FUSE and network filesystems do when a signal reaches the
calling thread (CPython installs its handlers without ``SA_RESTART``, and a process-directed signal may land on
any of the core's threads). CPython retries where PEP 475 says it does (``os.open``, ``os.fstat``,
``os.fchmod``, ``os.fchown``, ``os.ftruncate``, reads and writes), so the reference engine goes on; the core
must too. The shim interposes the symbols both engines call (the Rust core links the same ``libc.so.6``
functions), and fails the first call after arming, lets its retry through, fails the next and so on: every call
site must retry, not only the first one reached. It is armed by the child once its imports are done, so the
interpreter's start-up never sees it. ``AK_EINTR_STUCK=NAME`` instead fails every open of a file named ``NAME``,
armed or not: a call a signal interrupts for ever, which only a stop may end.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from tests.support.capability import skip_or_fail

#: The functions the shim can interrupt: (name in ``AK_EINTR``, the C symbols it covers).
INTERRUPTIBLE: Final = {
    "open": ("open", "open64", "openat", "openat64"),
    "openat2": ("syscall(SYS_openat2)",),
    "fstat": ("fstat", "fstat64"),
    "fchmod": ("fchmod",),
    "fchown": ("fchown",),
    "ftruncate": ("ftruncate", "ftruncate64"),
}

_SOURCE: Final = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int armed;
static unsigned long calls, failed;

void ak_eintr_arm(int on) { armed = on; }
unsigned long ak_eintr_failed(void) { return failed; }

/* Every open of a name whose last component is AK_EINTR_STUCK, armed or not: 1 = fail it with EINTR, always
   (a call a signal keeps interrupting; only a stop may end its retries). */
static int stuck(const char *path) {
    const char *name = getenv("AK_EINTR_STUCK"), *last = path ? strrchr(path, '/') : NULL;
    if (name == NULL || path == NULL)
        return 0;
    if (strcmp(last ? last + 1 : path, name) != 0)
        return 0;
    errno = EINTR;
    return 1;
}

/* Every other call of the chosen function, from the first after arming: 1 = fail it with EINTR. */
static int interrupt(const char *name) {
    const char *chosen = getenv("AK_EINTR");
    if (!armed || chosen == NULL || strcmp(chosen, name) != 0)
        return 0;
    if ((__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED) & 1) != 0)
        return 0;
    __atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED);
    errno = EINTR;
    return 1;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static mode_t mode_of(int flags, va_list args) {
    return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}
#define OPEN_AT(name) int name(int dir, const char *path, int flags, ...) { \
    va_list args; va_start(args, flags); mode_t mode = mode_of(flags, args); va_end(args); \
    if (stuck(path) || interrupt("open")) return -1; return NEXT(name)(dir, path, flags, mode); }
#define OPEN(name) int name(const char *path, int flags, ...) { \
    va_list args; va_start(args, flags); mode_t mode = mode_of(flags, args); va_end(args); \
    if (stuck(path) || interrupt("open")) return -1; return NEXT(name)(path, flags, mode); }
OPEN_AT(openat)
OPEN_AT(openat64)
OPEN(open)
OPEN(open64)

int fstat(int fd, struct stat *st) { if (interrupt("fstat")) return -1; return NEXT(fstat)(fd, st); }
int fstat64(int fd, struct stat64 *st) { if (interrupt("fstat")) return -1; return NEXT(fstat64)(fd, st); }
int fchmod(int fd, mode_t mode) { if (interrupt("fchmod")) return -1; return NEXT(fchmod)(fd, mode); }
int fchown(int fd, uid_t uid, gid_t gid) { if (interrupt("fchown")) return -1; return NEXT(fchown)(fd, uid, gid); }
int ftruncate(int fd, off_t size) { if (interrupt("ftruncate")) return -1; return NEXT(ftruncate)(fd, size); }
int ftruncate64(int fd, off64_t size) { if (interrupt("ftruncate")) return -1; return NEXT(ftruncate64)(fd, size); }

/* Six register arguments pass through whatever the call takes: x86-64's calling convention allows it. */
long syscall(long number, ...) {
    va_list args; va_start(args, number);
    long a = va_arg(args, long), b = va_arg(args, long), c = va_arg(args, long);
    long d = va_arg(args, long), e = va_arg(args, long), f = va_arg(args, long);
    va_end(args);
    if (number == SYS_openat2 && (stuck((const char *)b) || interrupt("openat2"))) return -1;
    return NEXT(syscall)(number, a, b, c, d, e, f);
}
"""


@functools.cache
def shim() -> Path:
    """The shim, compiled once per session (a skip saying why where no C compiler is, a failure in CI)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        skip_or_fail("needs a C compiler (cc) to build the EINTR shim (Debian's gcc; .ci/run installs it)")
        raise AssertionError("unreachable")
    where = Path(tempfile.mkdtemp(prefix="artifactkit-eintr-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    (where / "shim.c").write_text(_SOURCE, encoding="ascii")
    built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(where / "shim.so"), str(where / "shim.c"),
                            "-ldl"], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return where / "shim.so"
