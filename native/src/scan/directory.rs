//! One directory's capture, as `artifactkit/engine/reference/scan.py::_scan_dir` reads it: opened by path with `O_NOATIME`
//! (without it where refused), checked to be the inode its parent listed, its flags read, listed as
//! `os.listdir` lists, and its names captured (`lstat`, then xattrs by path). `scan/walk.rs` takes the parts in,
//! in the walk's order; `scan/second_thread.rs` may capture one ahead on its second thread.

use std::os::fd::OwnedFd;

use crate::failure::{Errno, Failure};
use crate::scan::entry::{fs_points, join, slash, Xattrs, ROOT};
use crate::sys::c_path::{cstr, os, os_string};
use crate::sys::calls::{self as sys, XTarget};

/// `flags.py`'s unsupported and forbidden errnos: the directory's flags are then not recorded (`None`).
const NO_FLAGS: [Errno; 7] =
    [libc::ENOTTY, libc::EOPNOTSUPP, libc::EINVAL, libc::ENOSYS, libc::EPERM, libc::EACCES, libc::EROFS];
/// `extended.py`'s `_ALIASES`: xfs's second copy of the POSIX ACLs, never recorded.
const ALIASES: [&[u8]; 2] = [b"trusted.SGI_ACL_FILE", b"trusted.SGI_ACL_DEFAULT"];

/// `_syscalls.open_noatime(path, flags)`: `O_NOATIME` for the owner, without it on `EPERM`/`EACCES`.
fn open_noatime(path: &[u8], flags: libc::c_int) -> Result<(OwnedFd, bool), Failure> {
    let c = cstr(path)?;
    let base = flags | libc::O_NOFOLLOW;
    match sys::open_at(libc::AT_FDCWD, &c, base | libc::O_NOATIME, 0) {
        Ok(fd) => Ok((fd, true)),
        Err(libc::EPERM | libc::EACCES) => {
            sys::open_at(libc::AT_FDCWD, &c, base, 0).map(|fd| (fd, false)).map_err(|e| os("open", e, path))
        }
        Err(e) => Err(os("open", e, path)),
    }
}

/// `os.listdir(fd)`: every name but `.` and `..`, in the kernel's order, read as CPython reads them —
/// through a `dup` of `fd`, rewound and closed after (a listing of `/proc/self/fd` shows that very `dup`).
/// A failure names `top`, the directory's path, as `_scan_dir`'s `naming(top)` does.
fn list_dir(fd: &OwnedFd, top: &[u8]) -> Result<Vec<Vec<u8>>, Failure> {
    let dup = sys::dup(sys::raw(fd)).map_err(|errno| os("listdir", errno, top))?;
    let names = read_names(&dup).map_err(|errno| os("listdir", errno, top))?;
    sys::lseek(sys::raw(&dup), 0, libc::SEEK_SET).map_err(|errno| os("listdir", errno, top))?;
    Ok(names)
}

fn read_names(dup: &OwnedFd) -> Result<Vec<Vec<u8>>, Errno> {
    let mut buf = vec![0u8; 32 << 10];
    let mut names = Vec::new();
    loop {
        let filled = sys::getdents(sys::raw(dup), &mut buf)?;
        if filled == 0 {
            return Ok(names);
        }
        // linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), then the NUL-terminated name.
        let mut at = 0;
        while at + 19 <= filled {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen < 19 || at + reclen > filled {
                return Err(libc::EIO); // no kernel writes such a record
            }
            let area = &buf[at + 19..at + reclen];
            let name = &area[..area.iter().position(|b| *b == 0).unwrap_or(area.len())];
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
            at += reclen;
        }
    }
}

/// scan.py's `_NOT_THE_FILESYSTEM`: what the xattr calls answer about the entry itself, not its filesystem.
const NOT_THE_FILESYSTEM: [Errno; 4] = [libc::ENOENT, libc::ENOTDIR, libc::EACCES, libc::EPERM];

/// scan.py's `_source_xattrs`: the source filesystem's failure of the xattr calls, named as such.
fn xattrs_failed(call: &'static str, e: Errno, path: &[u8]) -> Failure {
    if NOT_THE_FILESYSTEM.contains(&e) {
        os(call, e, path)
    } else {
        Failure::SourceXattrs { path: os_string(path), errno: e }
    }
}

/// `extended.read_xattrs(path)`: every xattr of the path itself, by name in Python's order.
pub(crate) fn read_xattrs(path: &[u8]) -> Result<Xattrs, Failure> {
    let c = cstr(path)?;
    let target = XTarget::Link(&c);
    let mut names = match sys::list_xattrs(target) {
        Ok(names) => names,
        Err(e) if e == libc::ENOTSUP || e == libc::EOPNOTSUPP => return Ok(Vec::new()),
        Err(e) => return Err(xattrs_failed("listxattr", e, path)),
    };
    names.sort_by_cached_key(|n| fs_points(n.as_bytes()));
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        if ALIASES.contains(&name.as_bytes()) {
            continue;
        }
        match sys::get_xattr(target, &name) {
            Ok(value) => found.push((name.into_bytes(), value)),
            Err(libc::ENODATA) => {} // removed between the list and the read
            Err(e) => return Err(xattrs_failed("getxattr", e, path)),
        }
    }
    Ok(found)
}

fn read_flags(fd: &OwnedFd) -> Result<Option<i32>, Failure> {
    match sys::get_flags(sys::raw(fd)) {
        Ok(v) => Ok(Some(v)),
        Err(e) if NO_FLAGS.contains(&e) => Ok(None),
        Err(e) => Err(Failure::os("ioctl", e, None)), // fcntl.ioctl's OSError names no file
    }
}

/// The key of a directory in `Scan::dirs`: its path, `.` for the root.
pub(crate) fn dir_key(rel: &[u8]) -> &[u8] {
    if rel.is_empty() {
        ROOT
    } else {
        rel
    }
}

/// What `_scan_dir` reads of one directory, before the scan takes it in (`Scan::take_in`).
pub struct DirPart {
    /// The directory's own `fstat` as it was opened (`stamp`): what `unchanged` compares at its turn.
    pub stamp: DirStamp,
    pub noatime: bool,
    pub flags: Option<i32>,
    pub relpaths: Vec<Vec<u8>>,
    pub stats: Vec<libc::stat>,
    pub xattrs: Vec<Xattrs>,
}

/// Every name's `lstat` and xattrs in a directory, in the order of its names.
pub type NamesFound = Result<(Vec<libc::stat>, Vec<Xattrs>), Failure>;

/// `_scan_dir`'s reads of the directory `rel` under `root`, in its order: open it by path with `O_NOATIME`
/// (`noatime_only`: `Ok(None)` where that is refused, nothing read), check it is the inode its parent listed
/// (`identity`; `None`: never listed), read its flags, list it, and capture its names with `names`.
pub fn capture_dir(
    root: &[u8],
    rel: &[u8],
    identity: Option<(u64, u64)>,
    noatime_only: bool,
    names: impl FnOnce(i32, &[u8], &[Vec<u8>], &[Vec<u8>]) -> NamesFound,
) -> Result<Option<DirPart>, Failure> {
    let top = if rel.is_empty() { root.to_vec() } else { join(root, rel) };
    let key = dir_key(rel);
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    let (fd, noatime) = if noatime_only {
        match sys::open_at(libc::AT_FDCWD, &cstr(&top)?, flags | libc::O_NOFOLLOW | libc::O_NOATIME, 0) {
            Ok(fd) => (fd, true),
            Err(libc::EPERM | libc::EACCES) => return Ok(None),
            Err(e) => return Err(os("open", e, &top)),
        }
    } else {
        open_noatime(&top, flags)?
    };
    // Opened by name, following any link in its components: it must still be the directory listed.
    let st = sys::fstat(sys::raw(&fd)).map_err(|errno| os("fstat", errno, &top))?;
    if identity != Some((st.st_dev, st.st_ino)) {
        return Err(Failure::DirReplaced { rel: os_string(key), when: 0 });
    }
    let dir_flags = read_flags(&fd)?;
    let mut listed = list_dir(&fd, &top)?;
    listed.sort_by_cached_key(|n| fs_points(n));
    let relpaths: Vec<Vec<u8>> =
        listed.iter().map(|n| if rel.is_empty() { n.clone() } else { slash(rel, n) }).collect();
    // Every lstat, then every xattr listing.
    let (stats, xattrs) = names(sys::raw(&fd), &top, &listed, &relpaths)?;
    Ok(Some(DirPart { stamp: stamp(&st), noatime, flags: dir_flags, relpaths, stats, xattrs }))
}

/// A directory's identity and its entries' last change: `(dev, ino, mtime, ctime)`, each time to the ns.
pub type DirStamp = (u64, u64, (i64, i64), (i64, i64));

fn stamp(st: &libc::stat) -> DirStamp {
    (st.st_dev, st.st_ino, (st.st_mtime, st.st_mtime_nsec), (st.st_ctime, st.st_ctime_nsec))
}

/// Whether the directory `rel` under `root` is, by path, still the one `part` captured, no name added,
/// removed or renamed in it since (those change its mtime and ctime): a part captured ahead is taken in only so.
pub fn unchanged(root: &[u8], rel: &[u8], part: &DirPart) -> bool {
    let top = if rel.is_empty() { root.to_vec() } else { join(root, rel) };
    let Ok(path) = cstr(&top) else { return false };
    sys::lstat_at(libc::AT_FDCWD, &path).is_ok_and(|st| stamp(&st) == part.stamp)
}
