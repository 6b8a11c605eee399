//! Read a source file once: hash it and, when its blob is new, stage its bytes (mirrors
//! `artifactkit/store/content.py::read_source` and `stage.py::stage_file`, step for step).

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use sha2::{Digest, Sha256};

use crate::copy::{copy_sparse, hash_while_copying, hex};
use crate::error::{Failure, Located, StatFacts};
use crate::pool;
use crate::syscalls::{self as sys, Errno};

/// As content.py: files up to this size are hashed from memory and written only if their blob is new.
pub const IN_MEMORY_LIMIT: u64 = 8 << 20;
/// Small files' bytes held at once between their read and their write (bounds a batch's memory).
const IN_FLIGHT_BYTES: u64 = 64 << 20;

/// A file to read: `stage.py`'s wire item.
pub struct Item {
    pub index: u64,
    pub path: OsString,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: Option<i128>,
    pub dev: u64,
    pub ino: u64,
}

/// `stage.py::Staged` without `data` (always `None` here: the core stages every new file's bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub index: u64,
    pub sha256: String,
    pub noatime: bool,
    pub flags: Option<i32>,
    pub extents: Option<Vec<(u64, u64)>>,
    pub staged: bool,
}

struct Read {
    sha256: String,
    noatime: bool,
    flags: Option<i32>,
    extents: Option<Vec<(u64, u64)>>,
    data: Option<Vec<u8>>,
}

/// errnos meaning "no flags here" (flags.py's `_UNSUPPORTED` and `_FORBIDDEN`): recorded as `None`.
const NO_FLAGS: [Errno; 7] =
    [libc::ENOTTY, libc::EOPNOTSUPP, libc::EINVAL, libc::ENOSYS, libc::EPERM, libc::EACCES, libc::EROFS];

pub fn cstr(bytes: &[u8]) -> Result<CString, Failure> {
    CString::new(bytes).map_err(|_| Failure::os(libc::EINVAL, Some(os_string(bytes))))
}

pub fn os_string(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

fn os(errno: Errno, name: &[u8]) -> Failure {
    Failure::os(errno, Some(os_string(name)))
}

/// `read_small`: one `pread` of `size + 1` in the usual case, never taking a short read for the end.
pub fn read_small(fd: RawFd, size: u64) -> Result<Vec<u8>, Errno> {
    let mut data = Vec::new();
    read_small_into(fd, size, &mut data)?;
    Ok(data)
}

/// [`read_small`] into `data` (its earlier contents dropped), so a caller reading many files reuses one buffer.
pub fn read_small_into(fd: RawFd, size: u64, data: &mut Vec<u8>) -> Result<(), Errno> {
    let want = usize::try_from(size + 1).map_err(|_| libc::EFBIG)?;
    data.clear();
    data.resize(want, 0);
    let mut total = 0usize;
    loop {
        let n = sys::pread(fd, &mut data[total..], total as u64)?;
        total += n;
        if n == 0 || total as u64 >= size {
            break;
        }
    }
    data.truncate(total);
    Ok(())
}

/// `data_extents`: `None` for a dense file (one `lseek`), else the data runs up to `size`.
pub fn data_extents(fd: RawFd, size: u64) -> Result<Option<Vec<(u64, u64)>>, Errno> {
    if size == 0 {
        return Ok(None);
    }
    let first_hole = match sys::lseek(fd, 0, libc::SEEK_HOLE) {
        Ok(h) => h,
        Err(e) if [libc::EINVAL, libc::ENXIO, libc::EOPNOTSUPP].contains(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    if first_hole >= size {
        return Ok(None);
    }
    let mut runs = Vec::new();
    let mut offset = 0u64;
    while offset < size {
        let start = match sys::lseek(fd, offset, libc::SEEK_DATA) {
            Ok(s) => s,
            Err(libc::ENXIO) => break, // only a hole from here to the end
            Err(e) => return Err(e),
        };
        let end = sys::lseek(fd, start, libc::SEEK_HOLE)?.min(size);
        runs.push((start, end - start));
        offset = end;
    }
    Ok(Some(runs))
}

fn changed(item: &Item, st: &libc::stat) -> bool {
    (st.st_dev, st.st_ino) != (item.dev, item.ino)
        || u64::try_from(st.st_size).ok() != Some(item.size)
        || StatFacts::of(st).mtime_ns != item.mtime_ns
        || item.ctime_ns.is_some_and(|c| StatFacts::of(st).ctime_ns != c)
        || st.st_mode & libc::S_IFMT != libc::S_IFREG
}

fn check_unchanged(item: &Item, full: &OsString, fd: RawFd, when: u8) -> Result<(), Failure> {
    let st = sys::fstat(fd).map_err(|e| Failure::os(e, None))?;
    if changed(item, &st) {
        return Err(Failure::SourceChanged { path: full.clone(), when, found: Box::new(StatFacts::of(&st)) });
    }
    Ok(())
}

/// `open_noatime(path, O_RDONLY | O_NONBLOCK)`: `O_NOATIME` for the owner, without it on `EPERM`/`EACCES`.
fn open_source(full: &CString, shown: &OsString) -> Result<(OwnedFd, bool), Failure> {
    let base = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW;
    let refused = |e: Errno| {
        if e == libc::ELOOP {
            Failure::SourceSymlink { path: shown.clone() }
        } else {
            Failure::os(e, Some(shown.clone()))
        }
    };
    match sys::open_at(libc::AT_FDCWD, full, base | libc::O_NOATIME, 0) {
        Ok(fd) => Ok((fd, true)),
        Err(libc::EPERM | libc::EACCES) => {
            sys::open_at(libc::AT_FDCWD, full, base, 0).map(|fd| (fd, false)).map_err(refused)
        }
        Err(e) => Err(refused(e)),
    }
}

fn stage_name(index: u64) -> CString {
    // Digits only: never contains a NUL.
    CString::new(format!("blob-{index}")).unwrap_or_default()
}

/// `read_source`: hash once; a small dense file's bytes come back, anything else is copied into staging.
fn read_source(root: &[u8], item: &Item, txn: RawFd) -> Result<Read, Failure> {
    let mut full_bytes = root.to_vec();
    full_bytes.push(b'/');
    full_bytes.extend_from_slice(item.path.as_bytes());
    let shown = os_string(&full_bytes);
    let full = cstr(&full_bytes)?;
    let (fd, noatime) = open_source(&full, &shown)?;
    let src = sys::raw(&fd);
    check_unchanged(item, &shown, src, 0)?;
    let flags = match sys::get_flags(src) {
        Ok(v) => Some(v),
        Err(e) if NO_FLAGS.contains(&e) => None,
        Err(e) => return Err(Failure::os(e, None)),
    };
    let extents = data_extents(src, item.size).map_err(|e| Failure::os(e, None))?;
    let (sha256, count, data) = if extents.is_none() && item.size <= IN_MEMORY_LIMIT {
        let data = read_small(src, item.size).map_err(|e| Failure::os(e, None))?;
        (hex(&Sha256::digest(&data)), data.len() as u64, Some(data))
    } else {
        let name = stage_name(item.index);
        let out = sys::open_at(txn, &name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o444)
            .map_err(|e| os(e, name.as_bytes()))?;
        let copied = match &extents {
            None => hash_while_copying(src, sys::raw(&out), item.size),
            Some(runs) => copy_sparse(src, sys::raw(&out), item.size, runs),
        };
        let (sha, count) = copied.map_err(|e| Failure::os(e, None))?;
        (sha, count, None)
    };
    if count != item.size {
        return Err(Failure::SourceLength { path: shown, count });
    }
    check_unchanged(item, &shown, src, 1)?;
    Ok(Read { sha256, noatime, flags, extents, data })
}

/// What the calls of one publish share: the content staged by an earlier file of the publish (so equal content
/// is staged once, whichever call it came in) and, where the caller listed `blobs/` once, that listing.
#[derive(Debug, Default)]
pub struct Seen {
    pub staged: HashSet<String>,
    pub listed: Option<HashSet<String>>,
}

/// `layout.BlobLookup`: whether `sha` is in the blobs directory as a regular file of `size` bytes — a name the
/// caller's listing lacks is not (no `lstat`), any other is `lstat`ed (`layout.stored_at`).
fn has_blob(blobs: RawFd, listed: Option<&HashSet<String>>, sha: &str, size: u64) -> Result<bool, Failure> {
    if listed.is_some_and(|names| !names.contains(sha)) {
        return Ok(false);
    }
    let name = cstr(sha.as_bytes())?;
    match sys::lstat_at(blobs, &name) {
        Ok(st) => Ok(st.st_mode & libc::S_IFMT == libc::S_IFREG && u64::try_from(st.st_size).ok() == Some(size)),
        Err(libc::ENOENT) => Ok(false),
        Err(e) => Err(os(e, sha.as_bytes())),
    }
}

enum Then {
    Nothing,
    Write(Vec<u8>),
    Unlink,
}

/// `stage_file` for every item: read and hash in parallel, decide "new?" in input order (so which of two
/// equal files is staged never depends on the threads), then write or drop the staged copies in parallel.
/// `seen` carries the publish's staged content from call to call.
pub fn stage_files(
    root: &[u8],
    txn: RawFd,
    blobs: RawFd,
    items: &[Item],
    threads: usize,
    seen: &mut Seen,
) -> Result<Vec<Staged>, Located> {
    let mut out = Vec::with_capacity(items.len());
    let mut start = 0;
    while start < items.len() {
        let mut end = start;
        let mut in_flight = 0u64;
        while end < items.len() && (end == start || in_flight + items[end].size.min(IN_MEMORY_LIMIT) <= IN_FLIGHT_BYTES)
        {
            in_flight += items[end].size.min(IN_MEMORY_LIMIT);
            end += 1;
        }
        let chunk = &items[start..end];
        let at = |i: usize| move |failure| Located { at: start + i, failure };
        let reads = pool::map(chunk, threads, |i, item| read_source(root, item, txn).map_err(at(i)))?;
        let mut todo: Vec<(u64, Then)> = Vec::with_capacity(chunk.len());
        for (i, (item, read)) in chunk.iter().zip(reads).enumerate() {
            let is_new = !seen.staged.contains(&read.sha256)
                && !has_blob(blobs, seen.listed.as_ref(), &read.sha256, item.size).map_err(at(i))?;
            let then = match (is_new, read.data) {
                (true, Some(data)) => Then::Write(data),
                (false, None) => Then::Unlink, // copied while hashing, but already stored
                _ => Then::Nothing,
            };
            if is_new {
                seen.staged.insert(read.sha256.clone());
            }
            out.push(Staged {
                index: item.index,
                sha256: read.sha256,
                noatime: read.noatime,
                flags: read.flags,
                extents: read.extents,
                staged: is_new,
            });
            todo.push((item.index, then));
        }
        pool::map(&todo, threads, |i, (index, then)| {
            let name = stage_name(*index);
            match then {
                Then::Nothing => Ok(()),
                Then::Unlink => sys::unlink_at(txn, &name).map_err(|e| at(i)(os(e, name.as_bytes()))),
                Then::Write(data) => {
                    let fd = sys::open_at(txn, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o444)
                        .map_err(|e| at(i)(os(e, name.as_bytes())))?;
                    sys::pwrite_all(sys::raw(&fd), data, 0).map_err(|e| at(i)(Failure::os(e, None)))
                }
            }
        })?;
        start = end;
    }
    Ok(out)
}
