//! Every raw call into the C library: the only module with `unsafe`, each block with its `SAFETY` line.
//!
//! Each wrapper returns `Err(errno)` exactly where the C call failed, so the caller can raise the
//! same `OSError` (errno and filename) the Python engine's `os.*` call would. Paths cross as `CStr`
//! (a Python path with a NUL byte is refused at the edge, as `os.open` refuses it).

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::failure::Errno;

/// A syscall's outcome.
pub type Result<T> = std::result::Result<T, Errno>;

/// `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` on x86-64: they transfer a C int although the header says long.
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
/// include/uapi/linux/openat2.h
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

fn errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn check(ret: libc::c_int) -> Result<()> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `call` again while it fails with `EINTR`, for the calls CPython retries so (PEP 475: `os.open`, `os.fstat`,
/// `os.fchmod`, `os.fchown`, `os.ftruncate`; `_syscalls.open_beneath` the same for `openat2`): where a signal
/// interrupts one (FUSE and network filesystems do), the reference engine goes on, and so must the core.
/// Calls CPython does not retry (`lstat`, `utimensat`, the xattr calls, `rename`...) are not retried here either.
/// A batch asked to stop (`sys/cancel.rs`) ends the retries with the `EINTR` itself, as a Python handler that raises
/// ends CPython's: a call that fails so forever would hold the stop off for ever otherwise.
fn retried<T: Copy + PartialOrd + From<i8>>(mut call: impl FnMut() -> T) -> T {
    loop {
        let ret = call();
        if ret >= T::from(0) || !interrupted_again(errno()) {
            return ret;
        }
    }
}

/// Whether a call that failed with `e` is to be made again: `EINTR`, unless the batch was asked to stop.
fn interrupted_again(e: Errno) -> bool {
    e == libc::EINTR && !crate::sys::cancel::requested()
}

fn owned(fd: libc::c_int) -> Result<OwnedFd> {
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd was just returned by the kernel as a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`, retried on `EINTR`.
pub fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> Result<OwnedFd> {
    // SAFETY: name is a valid NUL-terminated string for the duration of the call.
    owned(retried(|| unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, libc::c_uint::from(mode)) }))
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, as
/// `_syscalls.open_beneath`, retried on `EINTR`: `Err(ENOSYS)` on a kernel without it (the caller walks instead).
pub fn openat2_beneath(dir: RawFd, path: &CStr, flags: libc::c_int) -> Result<OwnedFd> {
    let how = OpenHow {
        flags: u64::from((flags | libc::O_CLOEXEC) as u32),
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: path is NUL-terminated and how is a live open_how of the size passed; the kernel only reads both.
    let ret = retried(|| unsafe {
        libc::syscall(libc::SYS_openat2, dir, path.as_ptr(), &how as *const OpenHow, std::mem::size_of::<OpenHow>())
    });
    owned(libc::c_int::try_from(ret).unwrap_or(-1))
}

/// `fstat`, retried on `EINTR`.
pub fn fstat(fd: RawFd) -> Result<libc::stat> {
    // SAFETY: zeroed is a valid bit pattern for the plain C struct stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a live, writable struct stat.
    check(retried(|| unsafe { libc::fstat(fd, &mut st) }))?;
    Ok(st)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: an `lstat` beneath a directory fd.
pub fn lstat_at(dir: RawFd, name: &CStr) -> Result<libc::stat> {
    // SAFETY: zeroed is a valid bit pattern for the plain C struct stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: name is NUL-terminated and st is a live, writable struct stat.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, 0)`: a second descriptor of the same open file (its offset shared).
pub fn dup(fd: RawFd) -> Result<OwnedFd> {
    // SAFETY: fcntl with F_DUPFD_CLOEXEC takes plain integers and returns a new descriptor or -1.
    owned(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })
}

/// `getdents64(fd, buf)`: the bytes of `linux_dirent64` records written (0 at the end), retried on `EINTR`.
pub fn getdents(fd: RawFd, buf: &mut [u8]) -> Result<usize> {
    loop {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes; the kernel writes at most that many.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n >= 0 {
            return Ok(usize::try_from(n).unwrap_or(0));
        }
        let e = errno();
        if !interrupted_again(e) {
            return Err(e);
        }
    }
}

/// `readlinkat(dir, name)`: the whole target (the buffer grows until the target fits with room to spare).
pub fn readlink_at(dir: RawFd, name: &CStr) -> Result<Vec<u8>> {
    let mut buf: Vec<u8> = vec![0; 4096];
    loop {
        // SAFETY: name is NUL-terminated; buf is a live, writable buffer of buf.len() bytes.
        let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(errno());
        }
        let n = n.unsigned_abs();
        if n < buf.len() {
            buf.truncate(n);
            return Ok(buf);
        }
        buf.resize(buf.len() * 2, 0);
    }
}

/// One `pread`, retried on `EINTR`.
pub fn pread(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<usize> {
    let off = libc::off_t::try_from(offset).map_err(|_| libc::EOVERFLOW)?;
    loop {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
        if n >= 0 {
            return Ok(n.unsigned_abs());
        }
        let e = errno();
        if !interrupted_again(e) {
            return Err(e);
        }
    }
}

/// `pwrite` until all of `buf` is written (a short write is not an error), retried on `EINTR`.
pub fn pwrite_all(fd: RawFd, mut buf: &[u8], mut offset: u64) -> Result<()> {
    while !buf.is_empty() {
        let off = libc::off_t::try_from(offset).map_err(|_| libc::EOVERFLOW)?;
        // SAFETY: buf is a live, readable buffer of buf.len() bytes.
        let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off) };
        if n < 0 {
            let e = errno();
            if interrupted_again(e) {
                continue;
            }
            return Err(e);
        }
        let n = n.unsigned_abs();
        buf = &buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// One `copy_file_range` of up to `count` bytes from `offset` of `src` to the same offset of `dst`
/// (explicit offsets: neither fd's position moves), retried on `EINTR`.
pub fn copy_file_range(src: RawFd, dst: RawFd, count: usize, offset: u64) -> Result<usize> {
    let start = libc::loff_t::try_from(offset).map_err(|_| libc::EOVERFLOW)?;
    loop {
        let (mut off_in, mut off_out) = (start, start);
        // SAFETY: both offsets are live, writable loff_t the kernel updates; the fds are plain integers.
        let n = unsafe { libc::copy_file_range(src, &mut off_in, dst, &mut off_out, count, 0) };
        if n >= 0 {
            return Ok(n.unsigned_abs());
        }
        let e = errno();
        if !interrupted_again(e) {
            return Err(e);
        }
    }
}

/// One `sendfile(dst, src, &offset, count)` after moving `dst`'s position to `offset` (`os.sendfile` with an
/// offset reads `src` there without moving its position, and writes `dst` at its position), retried on `EINTR`.
pub fn sendfile_at(src: RawFd, dst: RawFd, count: usize, offset: u64) -> Result<usize> {
    lseek(dst, offset, libc::SEEK_SET)?;
    let start = libc::off_t::try_from(offset).map_err(|_| libc::EOVERFLOW)?;
    loop {
        let mut off = start;
        // SAFETY: off is a live, writable off_t the kernel updates; the fds are plain integers.
        let n = unsafe { libc::sendfile(dst, src, &mut off, count) };
        if n >= 0 {
            return Ok(n.unsigned_abs());
        }
        let e = errno();
        if !interrupted_again(e) {
            return Err(e);
        }
    }
}

pub fn lseek(fd: RawFd, offset: u64, whence: libc::c_int) -> Result<u64> {
    let off = libc::off_t::try_from(offset).map_err(|_| libc::EOVERFLOW)?;
    // SAFETY: lseek takes plain integers.
    let r = unsafe { libc::lseek(fd, off, whence) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r.unsigned_abs())
    }
}

/// `ftruncate`, retried on `EINTR`.
pub fn ftruncate(fd: RawFd, size: u64) -> Result<()> {
    let len = libc::off_t::try_from(size).map_err(|_| libc::EFBIG)?;
    // SAFETY: ftruncate takes plain integers.
    check(retried(|| unsafe { libc::ftruncate(fd, len) }))
}

pub fn get_flags(fd: RawFd) -> Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    // SAFETY: the kernel writes one C int through the pointer, which is live and writable.
    check(unsafe { libc::ioctl(fd, FS_IOC_GETFLAGS, &mut value as *mut libc::c_int) })?;
    Ok(value)
}

pub fn set_flags(fd: RawFd, value: libc::c_int) -> Result<()> {
    // SAFETY: the kernel reads one C int through the pointer, which is live.
    check(unsafe { libc::ioctl(fd, FS_IOC_SETFLAGS, &value as *const libc::c_int) })
}

/// `fchown`, retried on `EINTR`.
pub fn fchown(fd: RawFd, uid: u32, gid: u32) -> Result<()> {
    // SAFETY: fchown takes plain integers.
    check(retried(|| unsafe { libc::fchown(fd, uid, gid) }))
}

/// `lchown` beneath a directory fd (`fchownat(..., AT_SYMLINK_NOFOLLOW)`).
pub fn lchown_at(dir: RawFd, name: &CStr, uid: u32, gid: u32) -> Result<()> {
    // SAFETY: name is NUL-terminated.
    check(unsafe { libc::fchownat(dir, name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
}

/// `fchmod`, retried on `EINTR`.
pub fn fchmod(fd: RawFd, mode: u32) -> Result<()> {
    // SAFETY: fchmod takes plain integers.
    check(retried(|| unsafe { libc::fchmod(fd, mode) }))
}

/// A time in ns as the kernel's timespec: floor division, as `os.utime(ns=...)` splits it (pre-1970 too).
fn timespec(ns: i128) -> Result<libc::timespec> {
    let sec = libc::time_t::try_from(ns.div_euclid(1_000_000_000)).map_err(|_| libc::EOVERFLOW)?;
    let nsec = libc::c_long::try_from(ns.rem_euclid(1_000_000_000)).map_err(|_| libc::EOVERFLOW)?;
    Ok(libc::timespec { tv_sec: sec, tv_nsec: nsec })
}

/// `utimensat(dir, name, [atime, mtime], AT_SYMLINK_NOFOLLOW)`, or `futimens(dir)` when `name` is `None`
/// (glibc's `utimensat` refuses a NULL path with `EINVAL`, unlike the raw syscall).
pub fn set_times(dir: RawFd, name: Option<&CStr>, atime_ns: i128, mtime_ns: i128) -> Result<()> {
    let times = [timespec(atime_ns)?, timespec(mtime_ns)?];
    match name {
        // SAFETY: n is NUL-terminated; times is a live array of two timespecs.
        Some(n) => check(unsafe { libc::utimensat(dir, n.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }),
        // SAFETY: times is a live array of two timespecs.
        None => check(unsafe { libc::futimens(dir, times.as_ptr()) }),
    }
}

pub fn symlink_at(target: &CStr, dir: RawFd, name: &CStr) -> Result<()> {
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) })
}

/// `renameat(src_dir, src, dst_dir, dst)`: replaces whatever `dst` names, as `os.rename` does.
pub fn rename_at(src_dir: RawFd, src: &CStr, dst_dir: RawFd, dst: &CStr) -> Result<()> {
    // SAFETY: both names are NUL-terminated.
    check(unsafe { libc::renameat(src_dir, src.as_ptr(), dst_dir, dst.as_ptr()) })
}

pub fn unlink_at(dir: RawFd, name: &CStr) -> Result<()> {
    // SAFETY: name is NUL-terminated.
    check(unsafe { libc::unlinkat(dir, name.as_ptr(), 0) })
}

/// Where an xattr call goes: an open fd (`f*xattr`) or a path never followed at its end (`l*xattr`).
#[derive(Clone, Copy)]
pub enum XTarget<'a> {
    Fd(RawFd),
    Link(&'a CStr),
}

/// The names `listxattr` returns, in the kernel's order.
pub fn list_xattrs(target: XTarget<'_>) -> Result<Vec<CString>> {
    let mut buf: Vec<u8> = vec![0; 256];
    loop {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes; the path (if any) is NUL-terminated.
        let n = unsafe {
            match target {
                XTarget::Fd(fd) => libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()),
                XTarget::Link(p) => libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()),
            }
        };
        if n >= 0 {
            buf.truncate(n.unsigned_abs());
            return Ok(buf.split(|b| *b == 0).filter(|s| !s.is_empty()).filter_map(|s| CString::new(s).ok()).collect());
        }
        let e = errno();
        if e != libc::ERANGE {
            return Err(e);
        }
        buf.resize(buf.len() * 4, 0);
    }
}

pub fn get_xattr(target: XTarget<'_>, name: &CStr) -> Result<Vec<u8>> {
    let mut buf: Vec<u8> = vec![0; 256];
    loop {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes; name and path are NUL-terminated.
        let n = unsafe {
            match target {
                XTarget::Fd(fd) => libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()),
                XTarget::Link(p) => libc::lgetxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()),
            }
        };
        if n >= 0 {
            buf.truncate(n.unsigned_abs());
            return Ok(buf);
        }
        let e = errno();
        if e != libc::ERANGE {
            return Err(e);
        }
        buf.resize(buf.len() * 4, 0);
    }
}

pub fn set_xattr(target: XTarget<'_>, name: &CStr, value: &[u8]) -> Result<()> {
    // SAFETY: value is a live buffer of value.len() bytes; name and path are NUL-terminated.
    check(unsafe {
        match target {
            XTarget::Fd(fd) => libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), value.len(), 0),
            XTarget::Link(p) => libc::lsetxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0),
        }
    })
}

pub fn remove_xattr(target: XTarget<'_>, name: &CStr) -> Result<()> {
    // SAFETY: name and path are NUL-terminated.
    check(unsafe {
        match target {
            XTarget::Fd(fd) => libc::fremovexattr(fd, name.as_ptr()),
            XTarget::Link(p) => libc::lremovexattr(p.as_ptr(), name.as_ptr()),
        }
    })
}

/// The raw fd of an `OwnedFd` (re-exported so no other module needs the trait in scope).
pub fn raw(fd: &OwnedFd) -> RawFd {
    fd.as_raw_fd()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timespec_floors_like_os_utime() {
        let t = timespec(-1).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (-1, 999_999_999));
        let t = timespec((1i128 << 34) * 1_000_000_000 + 5).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (1 << 34, 5));
    }
}
