//! What can go wrong in a batch, as data: the Python wrapper (`artifactkit/engine/native_errors.py`) turns
//! each variant into the very exception class and message the reference engine raises. No message text
//! lives here: Python keeps the messages, Rust reports the facts.

use std::ffi::OsString;

/// An errno value: what a failed call reports, and what Python raises as `OSError(errno, ...)`.
pub type Errno = i32;

/// The `lstat`/`fstat` fields a check compared, handed back so Python can explain the difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFacts {
    pub mode: u32,
    pub ino: u64,
    pub dev: u64,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: i128,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub blksize: i64,
    pub blocks: i64,
    pub rdev: u64,
}

impl StatFacts {
    pub fn of(st: &libc::stat) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            mode: st.st_mode,
            ino: st.st_ino,
            dev: st.st_dev,
            nlink: st.st_nlink,
            uid: st.st_uid,
            gid: st.st_gid,
            size: u64::try_from(st.st_size).unwrap_or(0),
            atime_ns: ns(st.st_atime, st.st_atime_nsec),
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
            blksize: st.st_blksize,
            blocks: st.st_blocks,
            rdev: st.st_rdev,
        }
    }

    /// The device number as `(major, minor)`, as `os.major` and `os.minor` split it.
    pub fn device(&self) -> (u32, u32) {
        (libc::major(self.rdev), libc::minor(self.rdev))
    }
}

/// One failure, and `at`: the position of the item it happened to (the lowest one is reported, so a
/// batch fails the same way however its threads interleaved).
#[derive(Debug)]
pub enum Failure {
    /// A syscall failed: `OSError(errno, "call: strerror", filename[, None, filename2])`; `call` is named as the
    /// reference's `os` function for the same step is, so both engines' messages read alike.
    Os { call: &'static str, errno: Errno, filename: Option<OsString>, filename2: Option<OsString> },
    /// The source's final component is a symlink now (`O_NOFOLLOW` met it).
    SourceSymlink { path: OsString },
    /// The source's `fstat` differs from its capture (`when`: 0 before the read, 1 after it).
    SourceChanged { path: OsString, when: u8, found: Box<StatFacts> },
    /// The read found another length than captured.
    SourceLength { path: OsString, count: u64 },
    /// A blob is missing, a symlink, not a regular file, of the wrong size, or does not hash to its name.
    Blob { what: &'static str, sha: String, path: OsString, actual_size: u64, actual_sha: String },
    /// The source's filesystem failed `llistxattr`/`lgetxattr` of `path` (rclone mount answers `EIO`).
    SourceXattrs { path: OsString, errno: Errno },
    /// Setting xattrs exactly was refused (`NotRestorableError`).
    Xattrs { path: OsString, errno: Errno },
    /// Inode flags could not be set (`errno` 0: the filesystem reports none).
    Flags { path: OsString, errno: Errno },
    /// What was read back of xattrs or flags differs from what was set.
    ReadBack { xattrs: Option<Vec<(OsString, Vec<u8>)>>, flags: Option<i32> },
    /// The `lstat` read-back of a directory's entries differs: (entry position, what `lstat` showed).
    Verify { wrong: Vec<(usize, StatFacts)> },
    /// The publish source is not a directory (a link to one is not one either).
    ScanRoot,
    /// `rel` is another inode than the directory its parent listed (`when`: 0 while it was scanned, 1 when
    /// its links were read).
    DirReplaced { rel: OsString, when: u8 },
    /// `gone` was listed, then its `lstat` (given `name`) found nothing.
    Vanished { gone: OsString, name: OsString },
    /// The link `path` is not the one its `lstat` captured when its target was read.
    LinkChanged { path: OsString },
    /// The link `path` holds a target `symlink(2)` cannot make.
    BadTarget { path: OsString, target: OsString },
    /// Entries no artifact holds (sockets), every one, in scan order.
    Unsupported { paths: Vec<OsString> },
    /// The entry at `at` has more data runs than a manifest may list (`count` of them).
    TooManyRuns { count: usize },
    /// The caller's progress callback raised: its exception is the caller's to re-raise.
    Stopped,
}

impl Failure {
    pub fn os(call: &'static str, errno: Errno, filename: Option<OsString>) -> Self {
        Failure::Os { call, errno, filename, filename2: None }
    }
}

/// A failure at a position in the batch.
#[derive(Debug)]
pub struct Located {
    pub at: usize,
    pub failure: Failure,
}
