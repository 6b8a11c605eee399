//! What `restore_meta.py::apply_fd` restores on an open file beyond its content, in its order — owner, xattrs
//! exactly (read back), mode, the restorable inode flags (read back) — for the core's create (`restore/create.rs`).

use std::ffi::CString;
use std::os::fd::RawFd;

use crate::failure::{Errno, Failure};
use crate::restore::entry::Entry;
use crate::sys::c_path::{cstr, os_string};
use crate::sys::calls::{self as sys, XTarget};

/// flags.py's `RESTORABLE_FLAGS` (sync, nodump, dirsync) and `COMPARED_FLAGS` (those, immutable, append).
pub const RESTORABLE_FLAGS: i32 = 0x0000_0008 | 0x0000_0040 | 0x0001_0000;
pub const COMPARED_FLAGS: i32 = RESTORABLE_FLAGS | 0x0000_0010 | 0x0000_0020;
/// extended.py's `_ALIASES`: xfs's names for the POSIX ACLs, never recorded.
const ALIASES: [&[u8]; 2] = [b"trusted.SGI_ACL_FILE", b"trusted.SGI_ACL_DEFAULT"];
/// Extended attributes as `(name, value)` pairs, as read back.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// A manifest's flags (`0..2**32`) as the `FS_IOC_GETFLAGS`/`SETFLAGS` C int, bit for bit (flags.py packs
/// `=i`): a bit past 31 is no bit a restore sets or compares, and is carried as it is.
#[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
pub fn flags_bits(flags: impl Into<i64>) -> i32 {
    flags.into() as i32
}

/// `read_xattrs(fd)`: every name but xfs's aliases, sorted, a name removed meanwhile skipped; a failure with
/// the call that failed.
fn read_xattrs(target: XTarget<'_>) -> Result<Xattrs, (&'static str, Errno)> {
    let mut names = match sys::list_xattrs(target) {
        Ok(n) => n,
        Err(e) if e == libc::EOPNOTSUPP => return Ok(Vec::new()),
        Err(e) => return Err(("listxattr", e)),
    };
    names.sort();
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        if ALIASES.contains(&name.as_bytes()) {
            continue;
        }
        match sys::get_xattr(target, &name) {
            Ok(v) => found.push((name.into_bytes(), v)),
            Err(libc::ENODATA) => {}
            Err(e) => return Err(("getxattr", e)),
        }
    }
    Ok(found)
}

/// `_set_xattrs_exactly` on an fd: set every wanted one, remove any other (an inherited default ACL),
/// return what is there afterwards, read back.
fn set_xattrs_exactly(fd: RawFd, wanted: &[(&[u8], &[u8])], entry: &Entry<'_>) -> Result<Xattrs, Failure> {
    let refuse = |call: &'static str| {
        move |e: Errno| {
            if e == libc::EOPNOTSUPP || e == libc::EPERM {
                Failure::Xattrs { path: os_string(entry.path), errno: e }
            } else {
                Failure::os(call, e, Some(os_string(entry.path)))
            }
        }
    };
    let target = XTarget::Fd(fd);
    let present = match sys::list_xattrs(target) {
        Ok(p) => p,
        // sshfs, s3fs, ramfs: no xattrs at all. The filesystem holds none, and none is wanted: exact.
        Err(e) if e == libc::EOPNOTSUPP && wanted.is_empty() => return Ok(Vec::new()),
        Err(e) => return Err(refuse("listxattr")(e)),
    };
    if present.is_empty() && wanted.is_empty() {
        return Ok(Vec::new());
    }
    for (name, value) in wanted {
        sys::set_xattr(target, &cstr(name)?, value).map_err(refuse("setxattr"))?;
    }
    let mut extra: Vec<CString> =
        present.into_iter().filter(|p| !wanted.iter().any(|(n, _)| *n == p.as_bytes())).collect();
    extra.sort();
    for name in extra {
        sys::remove_xattr(target, &name).map_err(refuse("removexattr"))?;
    }
    read_xattrs(target).map_err(|(call, e)| refuse(call)(e))
}

/// `restore_flags_fd`'s outcome: the flags now, or `Err(errno)` where they cannot be read or set.
fn restore_flags(fd: RawFd, wanted: i32) -> Result<Result<i32, Errno>, Failure> {
    let translate = |e: Errno| -> Result<Result<i32, Errno>, Failure> {
        if [libc::ENOTTY, libc::EOPNOTSUPP, libc::EINVAL, libc::ENOSYS, libc::EPERM, libc::EACCES, libc::EROFS]
            .contains(&e)
        {
            Ok(Err(e))
        } else {
            Err(Failure::os("ioctl", e, None)) // not ours (EBADF, ...): stays an OSError
        }
    };
    let current = match sys::get_flags(fd) {
        Ok(c) => c,
        Err(e) => return translate(e),
    };
    let target = (current & !RESTORABLE_FLAGS) | (wanted & RESTORABLE_FLAGS);
    if target == current {
        return Ok(Ok(current));
    }
    if let Err(e) = sys::set_flags(fd, target) {
        return translate(e);
    }
    match sys::get_flags(fd) {
        Ok(c) => Ok(Ok(c)),
        Err(e) => translate(e),
    }
}

/// `apply_fd` then the times: owner, xattrs exactly, mode, restorable flags, each read back.
pub fn apply_fd(fd: RawFd, entry: &Entry<'_>) -> Result<(), Failure> {
    if let (Some(uid), Some(gid)) = (entry.uid, entry.gid) {
        sys::fchown(fd, uid, gid).map_err(|e| Failure::os("fchown", e, Some(os_string(entry.path))))?;
    }
    let mut xattrs = None;
    if let Some(wanted) = &entry.xattrs {
        let present = if wanted.is_empty() { sys::list_xattrs(XTarget::Fd(fd)).ok() } else { None };
        // The usual new file: none wanted, none there, and that listing was the read-back.
        xattrs = Some(if present.is_some_and(|p| p.is_empty()) {
            Vec::new()
        } else {
            set_xattrs_exactly(fd, wanted, entry)?
        });
    }
    sys::fchmod(fd, entry.mode).map_err(|e| Failure::os("fchmod", e, Some(os_string(entry.path))))?;
    let mut flags = None;
    if let Some(wanted) = entry.flags {
        match restore_flags(fd, wanted)? {
            Ok(now) => flags = Some(now),
            Err(e) if wanted & COMPARED_FLAGS != 0 => {
                return Err(Failure::Flags { path: os_string(entry.path), errno: e })
            }
            Err(_) => {}
        }
    }
    let xattrs_ok = match (&xattrs, &entry.xattrs) {
        (Some(found), Some(wanted)) => same_xattrs(found, wanted),
        _ => true,
    };
    let flags_ok = match (flags, entry.flags) {
        (Some(found), Some(wanted)) => (found ^ wanted) & COMPARED_FLAGS == 0,
        _ => true,
    };
    if !(xattrs_ok && flags_ok) {
        let xattrs = xattrs.map(|x| x.into_iter().map(|(n, v)| (os_string(&n), v)).collect());
        return Err(Failure::ReadBack { xattrs, flags });
    }
    Ok(())
}

fn same_xattrs(found: &[(Vec<u8>, Vec<u8>)], wanted: &[(&[u8], &[u8])]) -> bool {
    let mut wanted = wanted.to_vec();
    wanted.sort();
    found.len() == wanted.len() && found.iter().zip(&wanted).all(|((n, v), (wn, wv))| n == wn && v == wv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_masks_are_flags_py_s() {
        assert_eq!(RESTORABLE_FLAGS, 0x10048);
        assert_eq!(COMPARED_FLAGS, 0x10078);
    }
}
