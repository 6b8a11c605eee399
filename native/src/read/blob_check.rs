//! A stored blob, looked at before it is opened and checked by content before a publish trusts it (mirrors
//! `artifactkit/engine/content.py::open_regular` and `artifactkit/engine/blob_check.py`, step for step).
//!
//! `open_regular` is the one way a blob is opened, by a download (`restore/create.rs`) and by a publish's check: an
//! `O_PATH` fd first, so a FIFO or a device node a writer of the store put under a blob's name is never opened
//! (a device's driver never runs, a FIFO's writer never wakes). `check` is a publish's question about a blob it
//! would deduplicate against: a name holding other bytes than the content (same size, wrong bytes: planted, or
//! rotted) is `Damaged`, and the publish stages its own bytes over it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::os::fd::{OwnedFd, RawFd};

use crate::failure::{Errno, Failure};
use crate::read::copy::CHUNK;
use crate::read::file_data::data_extents;
use crate::sys::c_path::{cstr, os_string};
use crate::sys::calls as sys;

/// What is under a name: a regular file opened for reading (with its `fstat`), or anything else (never opened).
pub enum Looked {
    Regular(OwnedFd, libc::stat),
    Other(libc::stat),
}

/// `open_regular`: the name looked at through an `O_PATH` fd (not followed), and only a regular file opened for
/// reading, by reopening that very inode through procfs. `Err(ENOENT)`: nothing is there.
pub fn open_regular(dir: RawFd, name: &CStr) -> Result<Looked, Errno> {
    let look = sys::open_at(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
    let st = sys::fstat(sys::raw(&look))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(Looked::Other(st));
    }
    reopen(PROC_FD, &look, dir, name, &st).map(|fd| Looked::Regular(fd, st))
}

/// Where an `O_PATH` fd is opened again for reading (content.py's `PROC_FD`).
const PROC_FD: &str = "/proc/self/fd";

/// content.py's `_reopen`: through `proc` (`/proc/self/fd`); where there is no procfs, by name again,
/// `O_NONBLOCK`, the inode the look saw required (`ENOENT` if it was replaced meanwhile).
fn reopen(proc: &str, look: &OwnedFd, dir: RawFd, name: &CStr, st: &libc::stat) -> Result<OwnedFd, Errno> {
    // A path and digits: never a NUL.
    let proc = CString::new(format!("{proc}/{}", sys::raw(look))).map_err(|_| libc::EINVAL)?;
    match sys::open_at(libc::AT_FDCWD, &proc, libc::O_RDONLY, 0) {
        Err(libc::ENOENT) => {}
        opened => return opened,
    }
    let fd = sys::open_at(dir, name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0)?;
    let again = sys::fstat(sys::raw(&fd))?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(libc::ENOENT);
    }
    Ok(fd)
}

/// What a publish has of a file's content when it asks about its blob (`blob_check.Held`): the bytes of a small
/// file, or the copy staged (and hashed) as a larger one was read, with the source's data runs.
#[derive(Clone, Copy)]
pub enum Held<'a> {
    Bytes(&'a [u8]),
    Copy { fd: RawFd, extents: Option<&'a [(u64, u64)]> },
}

/// A publish's verdict on a blob name (`blob_check.blob_holds`: `True`, `False`, `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    Holds,
    Damaged,
    Absent,
}

/// `BlobLookup.__call__` with the bytes in hand: a name the caller's listing lacks is absent (not looked at); one
/// that is there holds the content only if it is a regular file of `size` bytes equal to `held`. A name this
/// process may not read is damaged too: no download of it by this user could read it either.
pub fn check(
    blobs: RawFd,
    listed: Option<&HashSet<String>>,
    sha: &str,
    size: u64,
    held: Held<'_>,
) -> Result<Stored, Failure> {
    if listed.is_some_and(|names| !names.contains(sha)) {
        return Ok(Stored::Absent);
    }
    let (fd, st) = match open_regular(blobs, &cstr(sha.as_bytes())?) {
        Ok(Looked::Regular(fd, st)) => (fd, st),
        Ok(Looked::Other(_)) | Err(libc::EACCES | libc::EPERM) => return Ok(Stored::Damaged),
        Err(libc::ENOENT) => return Ok(Stored::Absent),
        Err(e) => return Err(Failure::os("open", e, Some(os_string(sha.as_bytes())))),
    };
    if u64::try_from(st.st_size).ok() != Some(size) {
        return Ok(Stored::Damaged);
    }
    let same = match held {
        Held::Bytes(data) => same_as_bytes(sys::raw(&fd), data),
        Held::Copy { fd: copy, extents } => same_as_copy(sys::raw(&fd), copy, size, extents),
    };
    Ok(if same.map_err(|e| Failure::os("pread", e, None))? { Stored::Holds } else { Stored::Damaged })
}

thread_local! {
    /// The blob's bytes and a staged copy's, a chunk at a time: allocated once per thread, touched only as far as
    /// a read fills them (a small file's check faults in a page, not a megabyte).
    static BUFFERS: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn buffers<T>(use_them: impl FnOnce(&mut [u8], &mut [u8]) -> T) -> T {
    BUFFERS.with_borrow_mut(|(mine, other)| {
        if mine.len() < CHUNK {
            *mine = vec![0; CHUNK];
            *other = vec![0; CHUNK];
        }
        use_them(mine, other)
    })
}

/// Whether `fd` reads as exactly `data` (its size was checked by the caller: no byte past it is read).
fn same_as_bytes(fd: RawFd, data: &[u8]) -> Result<bool, Errno> {
    buffers(|buf, _| {
        let mut at = 0usize;
        while at < data.len() {
            let step = CHUNK.min(data.len() - at);
            let n = sys::pread(fd, &mut buf[..step], at as u64)?;
            if n == 0 || buf[..n] != data[at..at + n] {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    })
}

/// `same_as_copy`: whether the `size` bytes of `fd` are the staged copy's, read only where either has data.
fn same_as_copy(fd: RawFd, copy: RawFd, size: u64, extents: Option<&[(u64, u64)]>) -> Result<bool, Errno> {
    let copy_size = sys::fstat(copy)?.st_size;
    if u64::try_from(copy_size).ok() != Some(size) {
        return Ok(false);
    }
    let runs = match extents {
        None => vec![(0, size)],
        Some(runs) => union(runs, &data_extents(fd, size)?.unwrap_or_else(|| vec![(0, size)])),
    };
    buffers(|mine, other| {
        for (start, length) in runs {
            let (mut at, end) = (start, start + length);
            while at < end {
                let step = usize::try_from(end - at).map_or(CHUNK, |left| left.min(CHUNK));
                let n = sys::pread(fd, &mut mine[..step], at)?;
                if n == 0 || n != read_full(copy, &mut other[..n], at)? || mine[..n] != other[..n] {
                    return Ok(false);
                }
                at += n as u64;
            }
        }
        Ok(true)
    })
}

/// `buf.len()` bytes at `offset` unless the file ends first: how many were read.
fn read_full(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
    let mut total = 0;
    while total < buf.len() {
        let n = sys::pread(fd, &mut buf[total..], offset + total as u64)?;
        if n == 0 {
            break;
        }
        total += n;
    }
    Ok(total)
}

/// `blob_check.union`: the ranges covered by either list of `(start, length)` runs, merged, in order.
pub fn union(first: &[(u64, u64)], second: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = first.iter().chain(second).copied().collect();
    all.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(all.len());
    for (start, length) in all {
        match merged.last_mut() {
            Some((last, last_length)) if start <= *last + *last_length => {
                *last_length = (*last_length).max(start + length - *last);
            }
            _ if length > 0 => merged.push((start, length)),
            _ => {}
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::fs::File;
    use std::os::fd::AsRawFd;
    use std::path::PathBuf;

    fn blobs(name: &str) -> (PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("artifactkit-blob-check-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fd = File::open(&dir).unwrap();
        (dir, fd)
    }

    #[test]
    fn runs_of_either_file_are_merged_where_they_touch_or_overlap() {
        assert_eq!(union(&[(0, 10), (100, 5)], &[(8, 4), (50, 0), (105, 5)]), vec![(0, 12), (100, 10)]);
        assert_eq!(union(&[], &[(4, 4)]), vec![(4, 4)]);
        assert_eq!(union(&[(0, 0)], &[]), Vec::<(u64, u64)>::new());
    }

    #[test]
    fn a_blob_holds_its_content_only_when_its_bytes_are_the_ones_in_hand() {
        let (dir, fd) = blobs("bytes");
        let content = b"the content".as_slice();
        std::fs::write(dir.join("good"), content).unwrap();
        std::fs::write(dir.join("planted"), b"the CONTENT").unwrap(); // same size, other bytes
        std::fs::write(dir.join("short"), b"the").unwrap();
        let ask = |name: &str| check(fd.as_raw_fd(), None, name, content.len() as u64, Held::Bytes(content)).unwrap();
        assert_eq!(ask("good"), Stored::Holds);
        assert_eq!(ask("planted"), Stored::Damaged);
        assert_eq!(ask("short"), Stored::Damaged);
        assert_eq!(ask("absent"), Stored::Absent);
        let listed: HashSet<String> = ["planted".to_owned()].into();
        let unlisted = check(fd.as_raw_fd(), Some(&listed), "good", content.len() as u64, Held::Bytes(content));
        assert_eq!(unlisted.unwrap(), Stored::Absent, "a name the listing lacks is not looked at");
        let copy = File::open(dir.join("good")).unwrap();
        let held = Held::Copy { fd: copy.as_raw_fd(), extents: None };
        assert_eq!(check(fd.as_raw_fd(), None, "planted", content.len() as u64, held).unwrap(), Stored::Damaged);
        assert_eq!(check(fd.as_raw_fd(), None, "good", content.len() as u64, held).unwrap(), Stored::Holds);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_procfs_a_regular_blob_is_opened_by_name_as_the_inode_looked_at() {
        let (dir, fd) = blobs("no-procfs");
        std::fs::write(dir.join("blob"), b"content").unwrap();
        let name = CString::new("blob").unwrap();
        let look = sys::open_at(fd.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0).unwrap();
        let st = sys::fstat(sys::raw(&look)).unwrap();
        let missing = dir.join("no-procfs").to_string_lossy().into_owned();
        let opened = reopen(&missing, &look, fd.as_raw_fd(), &name, &st).unwrap();
        assert_eq!(sys::fstat(sys::raw(&opened)).unwrap().st_ino, st.st_ino);
        std::fs::rename(dir.join("blob"), dir.join("old")).unwrap();
        std::fs::write(dir.join("blob"), b"swapped").unwrap(); // another inode under the name since the look
        assert_eq!(reopen(&missing, &look, fd.as_raw_fd(), &name, &st).unwrap_err(), libc::ENOENT);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_fifo_or_a_link_under_a_blob_name_is_looked_at_never_opened() {
        let (dir, fd) = blobs("nodes");
        let made = std::process::Command::new("mkfifo").arg(dir.join("fifo")).status().unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", dir.join("link")).unwrap();
        for name in ["fifo", "link"] {
            let looked = open_regular(fd.as_raw_fd(), &CString::new(name).unwrap()).unwrap();
            assert!(matches!(looked, Looked::Other(_)), "{name}");
            // A reader would block on the FIFO without O_NONBLOCK: the look returns at once, and so does the check.
            assert_eq!(check(fd.as_raw_fd(), None, name, 0, Held::Bytes(b"")).unwrap(), Stored::Damaged, "{name}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
