//! Create a download's files and symlinks beneath the private staging root, content verified while
//! written, metadata restored owners → xattrs → mode → flags → times, then every entry `lstat`ed back
//! (mirrors `download.py::create_items` / `_create` / `_copy_blob` / `_verify_children` and
//! `restore_meta.py::apply_symlink`, step for step; `apply_fd` is `restore/metadata.rs`).

use std::ffi::CStr;
use std::os::fd::{OwnedFd, RawFd};

use sha2::{Digest, Sha256};

use crate::failure::{Failure, Located, StatFacts};
use crate::manifest::parse::fields::MAX_EXTENTS;
use crate::read::blob_check::{open_regular, Looked};
use crate::read::copy::{copy_sparse, hex};
use crate::read::file_data::{data_extents, read_small_into};
use crate::read::hash_while_copying::hash_while_copying;
use crate::read::stage::IN_MEMORY_LIMIT;
use crate::restore::entry::{Dir, Entry, Kind};
use crate::restore::metadata::apply_fd;
use crate::sys::c_path::{cstr, os, os_string};
use crate::sys::calls::{self as sys, XTarget};
use crate::sys::pool;

/// At most this many entries of one directory per unit of work, so a big directory spreads over threads.
const UNIT: usize = 128;
/// A unit ends once its files hold this many bytes (the progress a person sees moves once a unit is done).
const UNIT_BYTES: u64 = 64 << 20;
/// `_dir_fd`: the root itself, or `open_beneath(root, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)`.
fn open_dir(root: RawFd, rel: &[u8]) -> Result<Option<OwnedFd>, Failure> {
    if rel == b"." {
        return Ok(None);
    }
    let path = cstr(rel)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    match sys::openat2_beneath(root, &path, flags) {
        Ok(fd) => Ok(Some(fd)),
        Err(libc::ENOSYS) => open_walk(root, rel, flags).map(Some),
        Err(e) => Err(os("open", e, rel)),
    }
}

/// `_open_walk`: component by component with `O_NOFOLLOW`, for kernels before openat2 (5.6).
fn open_walk(root: RawFd, rel: &[u8], flags: libc::c_int) -> Result<OwnedFd, Failure> {
    let mut current: Option<OwnedFd> = None;
    for part in rel.split(|b| *b == b'/') {
        let at = current.as_ref().map_or(root, sys::raw);
        let next = sys::open_at(at, &cstr(part)?, flags, 0).map_err(|e| os("open", e, part))?;
        current = Some(next);
    }
    current.ok_or_else(|| os("open", libc::ENOENT, rel))
}

fn blob_failure(what: &'static str, entry: &Entry, sha: &str) -> Failure {
    blob_found(what, entry, sha, 0, String::new())
}

fn blob_found(what: &'static str, entry: &Entry, sha: &str, actual_size: u64, actual_sha: String) -> Failure {
    Failure::Blob { what, sha: sha.to_owned(), path: os_string(entry.path), actual_size, actual_sha }
}

/// What a unit's files reuse, one after another: a name's C string, a small blob's bytes (a malloc and a free
/// of each per file were a twentieth of the create threads' time).
#[derive(Default)]
struct Scratch {
    name: Vec<u8>,
    data: Vec<u8>,
}

impl Scratch {
    /// `bytes` as a C string in the name buffer; a NUL inside is `cstr`'s `EINVAL`, naming them.
    fn c<'s>(name: &'s mut Vec<u8>, bytes: &[u8]) -> Result<&'s CStr, Failure> {
        name.clear();
        name.extend_from_slice(bytes);
        name.push(0);
        CStr::from_bytes_with_nul(name).map_err(|_| Failure::os("", libc::EINVAL, Some(os_string(bytes))))
    }
}

/// `_copy_blob`: the blob's kind and size before a byte is read; a small blob written only if it hashes
/// to its name; a large or sparse one hashed as written (the caller's staging is dropped on failure).
fn copy_blob(entry: &Entry, blobs: RawFd, out: RawFd, scratch: &mut Scratch) -> Result<(), Failure> {
    let sha = entry.sha256.ok_or_else(|| Failure::os("open", libc::EINVAL, Some(os_string(entry.path))))?;
    let name = Scratch::c(&mut scratch.name, sha.as_bytes())?;
    // Looked at before it is opened (`blob_check::open_regular`): a FIFO or a device under the name is never opened.
    let (blob, st) = match open_regular(blobs, name) {
        Ok(Looked::Regular(fd, st)) => (fd, st),
        Ok(Looked::Other(st)) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
            return Err(blob_failure("symlink", entry, sha))
        }
        Ok(Looked::Other(_)) => return Err(blob_failure("not_regular", entry, sha)),
        Err(libc::ENOENT) => return Err(blob_failure("missing", entry, sha)),
        Err(e) => return Err(os("open", e, sha.as_bytes())),
    };
    let src = sys::raw(&blob);
    let stored = u64::try_from(st.st_size).unwrap_or(0);
    if stored != entry.size {
        return Err(blob_found("size", entry, sha, stored, String::new()));
    }
    let (actual, count) = if let Some(runs) = entry.extents {
        copy_sparse(src, out, entry.size, runs).map_err(|e| Failure::os("copy_file_range", e, None))?
    } else if entry.size <= IN_MEMORY_LIMIT {
        let data = &mut scratch.data;
        read_small_into(src, entry.size, data).map_err(|e| Failure::os("pread", e, None))?;
        let digest = Sha256::digest(&data[..]);
        if names(&digest, sha) && data.len() as u64 == entry.size {
            sys::pwrite_all(out, data, 0).map_err(|e| Failure::os("write", e, None))?;
            return Ok(()); // never write bytes that are not the named content
        }
        // The hex only for the failure's message: a format per byte was a tenth of a small file's user time.
        (hex(&digest), data.len() as u64)
    } else {
        // `_copy_blob`: a blob with holes under an entry that records none stays sparse (a writer of the store
        // plants a tebibyte of hole for free; a store copied with `rsync -S` has them too), so no more is
        // written than the blob holds; a blob of more runs than a manifest may list is no publish's blob.
        match data_extents(src, entry.size).map_err(|e| Failure::os("lseek", e, None))? {
            Some(runs) if runs.len() > MAX_EXTENTS => return Err(blob_found("runs", entry, sha, 0, String::new())),
            Some(runs) => copy_sparse(src, out, entry.size, &runs),
            None => hash_while_copying(src, out, entry.size),
        }
        .map_err(|e| Failure::os("copy_file_range", e, None))?
    };
    if actual != sha || count != entry.size {
        return Err(blob_found("corrupt", entry, sha, count, actual));
    }
    Ok(())
}

/// `hex(digest) == named`, without making the hex: `named` is exactly the digest in lowercase hex.
fn names(digest: &[u8], named: &str) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let named = named.as_bytes();
    named.len() == digest.len() * 2
        && digest
            .iter()
            .zip(named.chunks_exact(2))
            .all(|(b, pair)| pair == [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
}

fn create_file(dir: RawFd, entry: &Entry<'_>, blobs: RawFd, scratch: &mut Scratch) -> Result<(), Failure> {
    let name = Scratch::c(&mut scratch.name, entry.name())?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let out = sys::open_at(dir, name, flags, 0o600).map_err(|e| os("open", e, entry.name()))?;
    let fd = sys::raw(&out);
    copy_blob(entry, blobs, fd, scratch)?;
    apply_fd(fd, entry)?; // after the writes: a write clears setuid for non-root
    sys::set_times(fd, None, entry.atime_ns, entry.mtime_ns).map_err(|e| os("utime", e, entry.path))
}

/// `os.symlink` + `apply_symlink` + `utime(follow_symlinks=False)`.
fn create_symlink(dir: RawFd, entry: &Entry<'_>) -> Result<(), Failure> {
    let name = cstr(entry.name())?;
    let target = entry.target.unwrap_or_default();
    sys::symlink_at(&cstr(target)?, dir, &name).map_err(|e| Failure::Os {
        call: "symlink",
        errno: e,
        filename: Some(os_string(target)),
        filename2: Some(os_string(entry.name())),
    })?;
    if let (Some(uid), Some(gid)) = (entry.uid, entry.gid) {
        sys::lchown_at(dir, &name, uid, gid).map_err(|e| os("chown", e, entry.name()))?;
    }
    if let Some(xattrs) = entry.xattrs.as_ref().filter(|x| !x.is_empty()) {
        let mut path = format!("/proc/self/fd/{dir}/").into_bytes();
        path.extend_from_slice(entry.name());
        let link = cstr(&path)?;
        for (xname, value) in xattrs {
            // Named by the entry, not the /proc path the call went through (as `naming` does in Python).
            sys::set_xattr(XTarget::Link(&link), &cstr(xname)?, value).map_err(|e| os("setxattr", e, entry.path))?;
        }
    }
    sys::set_times(dir, Some(&name), entry.atime_ns, entry.mtime_ns).map_err(|e| os("utime", e, entry.name()))
}

/// `verify_stored`'s `_exact` for a file or symlink (no pair field: neither kind carries one).
fn exact(entry: &Entry<'_>, st: &libc::stat) -> bool {
    let f = StatFacts::of(st);
    let ifmt = match entry.kind {
        Kind::File => libc::S_IFREG,
        Kind::Symlink => libc::S_IFLNK,
    };
    f.mode & libc::S_IFMT == ifmt
        && f.mode & 0o7777 == entry.mode
        && f.mtime_ns == entry.mtime_ns
        && f.atime_ns == entry.atime_ns
        && (entry.kind != Kind::File || f.size == entry.size)
        && (entry.uid.is_none() || (Some(f.uid), Some(f.gid)) == (entry.uid, entry.gid))
}

/// One unit: some entries of one directory, created, then read back together.
fn create_unit(root: RawFd, blobs: RawFd, dir: &Dir<'_>, first: usize, entries: &[Entry<'_>]) -> Result<(), Located> {
    let opened = open_dir(root, dir.rel).map_err(|failure| Located { at: first, failure })?;
    let fd = opened.as_ref().map_or(root, sys::raw);
    let mut scratch = Scratch::default();
    for (i, entry) in entries.iter().enumerate() {
        let made = match entry.kind {
            Kind::File => create_file(fd, entry, blobs, &mut scratch),
            Kind::Symlink => create_symlink(fd, entry),
        };
        made.map_err(|failure| Located { at: first + i, failure })?;
    }
    // Read back once all are made: nothing after this touches these entries' own times, mode or size.
    let last = first + entries.len().saturating_sub(1);
    let mut wrong = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let name = Scratch::c(&mut scratch.name, entry.name()).map_err(|failure| Located { at: last, failure })?;
        let st = sys::lstat_at(fd, name).map_err(|e| Located { at: last, failure: os("lstat", e, entry.name()) })?;
        if !exact(entry, &st) {
            wrong.push((first + i, StatFacts::of(&st)));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Located { at: last, failure: Failure::Verify { wrong } })
    }
}

/// `create_items` for a whole batch; `at` of a failure counts entries across the batch's directories.
/// `report(Some((entries, file bytes)))` is called on the calling thread as each unit is done, `report(None)` every
/// `pool::POLL` meanwhile; once it answers `false` the rest is not made and the files being made stop at their
/// next step ([`Failure::Stopped`], unless something failed).
pub fn create_files(
    root: RawFd,
    blobs: RawFd,
    batch: &[Dir<'_>],
    threads: usize,
    report: &mut dyn FnMut(Option<(usize, u64)>) -> bool,
) -> Result<(), Located> {
    let mut units: Vec<(&Dir<'_>, usize, &[Entry<'_>], u64)> = Vec::new();
    let mut position = 0;
    for dir in batch {
        let mut rest = &dir.entries[..];
        while !rest.is_empty() {
            // At most UNIT entries and about UNIT_BYTES of files: progress moves for big files too.
            let (mut count, mut bytes) = (0, 0);
            while count < rest.len().min(UNIT) && bytes < UNIT_BYTES {
                bytes += if rest[count].kind == Kind::File { rest[count].size } else { 0 };
                count += 1;
            }
            let (part, tail) = rest.split_at(count);
            units.push((dir, position, part, bytes));
            position += part.len();
            rest = tail;
        }
    }
    let create = |_, unit: &(&Dir<'_>, usize, &[Entry<'_>], u64)| create_unit(root, blobs, unit.0, unit.1, unit.2);
    pool::map_reporting(&units, threads, create, |at| match at {
        Some(at) => report(Some((units[at].2.len(), units[at].3))),
        None => report(None),
    })?;
    Ok(())
}
