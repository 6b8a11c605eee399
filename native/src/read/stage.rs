//! Read a source file once: hash it and, when its blob is new, stage its bytes (mirrors
//! `artifactkit/engine/content.py::read_source` and `engine/reference/stage.py::stage_file`, step for step).

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsString};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::failure::{Errno, Failure, Located, StatFacts};
use crate::read::blob_check::{self, Held, Stored};
use crate::read::copy::{copy_sparse, hex};
use crate::read::file_data::{data_extents, read_small_into};
use crate::read::hash_while_copying::hash_while_copying;
use crate::read::progress::Tally;
use crate::sys::c_path::{cstr, os, os_string};
use crate::sys::calls as sys;
use crate::sys::pool;

/// As content.py: files up to this size are hashed from memory and written only if their blob is new.
pub const IN_MEMORY_LIMIT: u64 = 8 << 20;

/// A file to read: `engine/native.py`'s wire item, its path borrowed from whoever holds it.
#[derive(Clone, Copy)]
pub struct Item<'a> {
    pub index: u64,
    pub path: &'a [u8],
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: Option<i128>,
    pub dev: u64,
    pub ino: u64,
}

/// What [`stage_files`] takes a slice of: anything that makes its [`Item`] when a thread comes to read it. A
/// captured tree's reads are references to its entries (`py/captured_tree.rs`), so a publish that stages all its reads in
/// one call makes no second list of them with paths of their own (a transient list the size of the tree; the
/// publish's peak of memory is later, at the manifest's assembly).
pub trait ToRead: Sync {
    fn item(&self) -> Item<'_>;
}

impl ToRead for Item<'_> {
    fn item(&self) -> Item<'_> {
        *self
    }
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
    /// Whether `blob-{index}` was made in staging: always for a large or sparse file, for a small one only where
    /// its content was new when it was read (see [`Claims`]).
    copied: bool,
    /// Whether the store holds its content (`blob_check::check`, asked of the bytes read).
    stored: Stored,
}

/// errnos meaning "no flags here" (flags.py's `_UNSUPPORTED` and `_FORBIDDEN`): recorded as `None`.
const NO_FLAGS: [Errno; 7] =
    [libc::ENOTTY, libc::EOPNOTSUPP, libc::EINVAL, libc::ENOSYS, libc::EPERM, libc::EACCES, libc::EROFS];

fn changed(item: &Item<'_>, st: &libc::stat) -> bool {
    (st.st_dev, st.st_ino) != (item.dev, item.ino)
        || u64::try_from(st.st_size).ok() != Some(item.size)
        || StatFacts::of(st).mtime_ns != item.mtime_ns
        || item.ctime_ns.is_some_and(|c| StatFacts::of(st).ctime_ns != c)
        || st.st_mode & libc::S_IFMT != libc::S_IFREG
}

fn check_unchanged(item: &Item<'_>, full: &OsString, fd: RawFd, when: u8) -> Result<(), Failure> {
    let st = sys::fstat(fd).map_err(|e| Failure::os("fstat", e, None))?;
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
            Failure::os("open", e, Some(shown.clone()))
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

/// The staging name of the read at `index`, spelled as the reference's `staging_name` (`artifactkit/engine/reference/stage.py`).
pub fn stage_name(index: u64) -> String {
    format!("blob-{index}")
}

fn stage_cname(index: u64) -> CString {
    // Digits only: never contains a NUL.
    CString::new(stage_name(index)).unwrap_or_default()
}

/// `read_source`: hash once; a new small dense file's bytes are written to staging straight from this thread's
/// buffer, anything else is copied into staging while it is hashed. `check(sha, held)` says whether the store holds
/// the content, asked of the bytes in hand (the small file's, or the staged copy: `blob_check::Held`), and whether
/// this read writes a small file's copy (the decision needs the digest). Writing here rather than after every read
/// of the batch keeps no file's bytes past its own read: a batch's bytes held at once were the cold first publish's
/// page faults (about 5 µs each on this machine's VMs: 2.5 ms of CPU for the 2 MiB of `small`), and a second pass
/// of threads to write them was one spawn more.
fn read_source<D>(root: &[u8], item: &Item<'_>, txn: RawFd, check: D) -> Result<Read, Failure>
where
    D: FnOnce(&str, Held<'_>) -> Result<(Stored, bool), Failure>,
{
    let mut full_bytes = root.to_vec();
    full_bytes.push(b'/');
    full_bytes.extend_from_slice(item.path);
    let shown = os_string(&full_bytes);
    let full = cstr(&full_bytes)?;
    let (fd, noatime) = open_source(&full, &shown)?;
    let src = sys::raw(&fd);
    check_unchanged(item, &shown, src, 0)?;
    let flags = match sys::get_flags(src) {
        Ok(v) => Some(v),
        Err(e) if NO_FLAGS.contains(&e) => None,
        Err(e) => return Err(Failure::os("ioctl", e, None)),
    };
    let extents = data_extents(src, item.size).map_err(|e| Failure::os("lseek", e, None))?;
    let name = stage_cname(item.index);
    let create = || {
        sys::open_at(txn, &name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o444)
            .map_err(|e| os("open", e, name.as_bytes()))
    };
    // A file that grew or shrank is refused before its blob is asked about: never stage a wrong length.
    let whole = |count: u64| {
        if count == item.size {
            Ok(())
        } else {
            Err(Failure::SourceLength { path: shown.clone(), count })
        }
    };
    let (sha256, stored, copied) = if extents.is_none() && item.size <= IN_MEMORY_LIMIT {
        SMALL_BYTES.with_borrow_mut(|data| {
            read_small_into(src, item.size, data).map_err(|e| Failure::os("pread", e, None))?;
            let sha = hex(&Sha256::digest(&data[..]));
            let checked = whole(data.len() as u64).and_then(|()| check(&sha, Held::Bytes(data)));
            let written = match checked {
                Ok((stored, true)) => sys::pwrite_all(sys::raw(&create()?), data, 0)
                    .map(|()| (sha, stored, true))
                    .map_err(|e| Failure::os("write", e, None)),
                Ok((stored, false)) => Ok((sha, stored, false)),
                Err(failure) => Err(failure),
            };
            keep_small(data); // last: it may empty the buffer
            written
        })?
    } else {
        let out = create()?;
        let copied = match &extents {
            None => hash_while_copying(src, sys::raw(&out), item.size),
            Some(runs) => copy_sparse(src, sys::raw(&out), item.size, runs),
        };
        let (sha, count) = copied.map_err(|e| Failure::os("copy_file_range", e, None))?;
        whole(count)?;
        let (stored, _) = check(&sha, Held::Copy { fd: sys::raw(&out), extents: extents.as_deref() })?;
        (sha, stored, true)
    };
    check_unchanged(item, &shown, src, 1)?;
    Ok(Read { sha256, noatime, flags, extents, copied, stored })
}

/// A small file's bytes are read into the buffer its thread keeps: cleared, never freed between files, so a
/// thread's pages are faulted in once. One that held a big file shrinks back after it, so no thread keeps
/// megabytes once it is done with them (the caller's own thread, with one thread, lives on in Python).
const SMALL_KEPT: usize = 1 << 20;

thread_local! {
    static SMALL_BYTES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn keep_small(data: &mut Vec<u8>) {
    if data.capacity() > SMALL_KEPT {
        *data = Vec::new();
    }
}

/// What the calls of one publish share: the content staged by an earlier file of the publish (so equal content
/// is staged once, whichever call it came in), where the caller listed `blobs/` once, that listing, and the
/// damaged blobs the publish staged its own bytes over (`BlobLookup.repaired`).
#[derive(Debug, Default)]
pub struct Seen {
    pub staged: HashSet<String>,
    pub listed: Option<HashSet<String>>,
    pub repaired: Vec<String>,
}

/// Which small file of this call writes a content's staged copy, claimed as the reads happen: a content is written
/// by the lowest position that has read it so far. The lowest position of all always writes (no lower one can have
/// claimed before it), and it is the one marked staged — as the reference's one pass in input order does — so the
/// output never depends on the threads; a higher one that wrote first (threads out of step: rare) has its copy
/// dropped after the reads. Equal contents in one call (empty files, above all) are written about once, not once each.
#[derive(Default)]
struct Claims(Mutex<HashMap<String, usize>>);

impl Claims {
    fn claim(&self, sha: &str, position: usize) -> bool {
        // A poisoned lock means a thread panicked (a bug): its claims stand, and writing one more copy is harmless.
        let mut by_sha = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match by_sha.get_mut(sha) {
            Some(lowest) if *lowest <= position => false,
            Some(lowest) => {
                *lowest = position;
                true
            }
            None => {
                by_sha.insert(sha.to_owned(), position);
                true
            }
        }
    }
}

/// `stage_file` for every item: read, hash and (where new) stage in parallel, decide "staged?" in input order (so
/// which of two equal files is staged never depends on the threads), then drop the copies that lost. `seen` carries
/// the publish's staged content from call to call. `poll(tally, end)`, the files read so far, is asked on the
/// calling thread while the threads read (`pool::map_polling`: now and then as the tally says, and every `POLL`)
/// and once all are read (`end`); a `false` stops them, a big file at its next step.
pub fn stage_files<T: ToRead>(
    root: &[u8],
    txn: RawFd,
    blobs: RawFd,
    items: &[T],
    threads: usize,
    seen: &mut Seen,
    poll: &mut dyn FnMut(&Tally, bool) -> bool,
) -> Result<Vec<Staged>, Located> {
    let (claims, tally) = (Claims::default(), Tally::default());
    let known = &*seen;
    let at = |i: usize| move |failure| Located { at: i, failure };
    // A stored blob is checked against the bytes in hand (`blob_check::check`): a damaged one is not stored.
    let is_stored = |sha: &str, size: u64, held: Held<'_>| {
        if known.staged.contains(sha) {
            return Ok(Stored::Holds);
        }
        blob_check::check(blobs, known.listed.as_ref(), sha, size, held)
    };
    // The calling thread waits, asking `poll` (signals) meanwhile: a big file's read stops at its next step.
    let mut reads = pool::map_polling(
        items,
        threads,
        |i, read| {
            let item = read.item();
            let read = read_source(root, &item, txn, |sha, held| {
                let stored = is_stored(sha, item.size, held)?;
                Ok((stored, stored != Stored::Holds && matches!(held, Held::Bytes(_)) && claims.claim(sha, i)))
            })
            .map_err(at(i))?;
            let Read { sha256, noatime, flags, extents, copied, stored } = read;
            // The output as it will be kept, `staged` decided below in input order: no second list of them made.
            Ok((Staged { index: item.index, sha256, noatime, flags, extents, staged: false }, stored, copied))
        },
        &|i| tally.add(items[i].item().size),
        || poll(&tally, false),
    )?;
    // What was read since the threads last woke this thread: the count ends exact.
    if !poll(&tally, true) {
        return Err(Located { at: 0, failure: Failure::Stopped });
    }
    let mut dropped: Vec<(usize, u64)> = Vec::new();
    for (i, (read, stored, copied)) in reads.iter_mut().enumerate() {
        read.staged = *stored != Stored::Holds && !seen.staged.contains(&read.sha256);
        if read.staged {
            seen.staged.insert(read.sha256.clone());
            if *stored == Stored::Damaged {
                seen.repaired.push(read.sha256.clone()); // its own bytes are renamed over the damaged blob
            }
        } else if *copied {
            dropped.push((i, read.index)); // copied while hashing (or claimed out of step), but already stored
        }
    }
    let out: Vec<Staged> = reads.into_iter().map(|(read, _, _)| read).collect(); // std collects this in place
    pool::map(&dropped, threads, |_, &(i, index)| {
        let name = stage_cname(index);
        sys::unlink_at(txn, &name).map_err(|e| at(i)(os("unlink", e, name.as_bytes())))
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_is_claimed_by_the_lowest_position_that_has_read_it_so_far() {
        let claims = Claims::default();
        assert!(claims.claim("aa", 5), "the first reader writes");
        assert!(!claims.claim("aa", 7), "a later position does not write it again");
        assert!(claims.claim("aa", 3), "an earlier position out of step writes its own copy: it is the one staged");
        assert!(!claims.claim("aa", 4));
        assert!(!claims.claim("aa", 3));
        assert!(claims.claim("bb", 9), "each content on its own");
    }

    #[test]
    fn a_thread_keeps_a_small_buffer_and_gives_a_big_one_back() {
        let mut small = Vec::with_capacity(16 << 10);
        keep_small(&mut small);
        assert_eq!(small.capacity(), 16 << 10);
        let mut big = Vec::with_capacity(SMALL_KEPT + 1);
        keep_small(&mut big);
        assert_eq!(big.capacity(), 0);
    }
}
