//! A directory's per-name capture — every name's `lstat`, then every name's xattrs — on one thread or split
//! between two. On this project's machines a scan is its syscalls (an `lstat` plus an xattr listing is
//! ~5 us a name, a channel round trip ~15 us), so a second thread halves a wide directory's capture while
//! everything else keeps the reference's order: directories one at a time, `on_progress` between them.
//!
//! Split or not, the result is the one the single thread finds: the first half's names are the first half
//! of the order, so the first failure in the order is the first half's first `lstat` failure, else the
//! second half's, else the first xattr failure the same way. A half's later calls, made past a failure the
//! reference would have stopped at, are reads that change nothing (no atime moves for an `lstat` or an xattr).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::Scope;

use crate::content::{cstr, os_string};
use crate::error::Failure;
use crate::scan::{os, read_xattrs, slash, Xattrs};
use crate::syscalls as sys;

/// A directory with at least this many names has them split between two threads when the scan has two;
/// below it, the handover costs more than the half it saves.
pub const SPLIT_MIN: usize = 32;

/// Names to capture: `names` in the directory open as `dir` (borrowed: the caller holds it open until the
/// part comes back), at `top` (the path xattrs are read by), with their paths relative to the scan's root.
struct Job {
    dir: i32,
    top: Vec<u8>,
    names: Vec<Vec<u8>>,
    rels: Vec<Vec<u8>>,
}

/// What one thread found of a run of names: every `lstat`, then — all of them taken — every name's
/// xattrs; each `Err` the run's first failure in its order.
struct Part {
    stats: Result<Vec<libc::stat>, Failure>,
    xattrs: Result<Vec<Xattrs>, Failure>,
}

fn capture_part(dir: i32, top: &[u8], names: &[Vec<u8>], rels: &[Vec<u8>]) -> Part {
    let stats = lstat_all(dir, names, rels);
    let xattrs = match &stats {
        Ok(_) => names.iter().map(|name| read_xattrs(&slash(top, name))).collect(),
        Err(_) => Ok(Vec::new()), // never looked at: the lstat failure comes first
    };
    Part { stats, xattrs }
}

fn lstat_all(dir: i32, names: &[Vec<u8>], rels: &[Vec<u8>]) -> Result<Vec<libc::stat>, Failure> {
    let mut stats = Vec::with_capacity(names.len());
    for (name, rel) in names.iter().zip(rels) {
        match sys::lstat_at(dir, &cstr(name)?) {
            Ok(st) => stats.push(st),
            // Listed, then gone: a race with whoever writes the source.
            Err(libc::ENOENT) => return Err(Failure::Vanished { gone: os_string(rel), name: os_string(name) }),
            Err(e) => return Err(os(e, name)),
        }
    }
    Ok(stats)
}

/// The second thread of a scan, started at the first directory wide enough to split.
struct Helper {
    jobs: SyncSender<Job>,
    parts: Receiver<Part>,
}

/// The capture of a scan's directories, on `threads` (one or two) threads, within `scope`.
pub struct Capture<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    split: bool,
    split_min: usize,
    helper: Option<Helper>,
}

impl<'scope, 'env> Capture<'scope, 'env> {
    /// `split_min`: the fewest names split (tests split every directory of two names or more).
    pub fn new(scope: &'scope Scope<'scope, 'env>, threads: usize, split_min: usize) -> Self {
        Capture { scope, split: threads > 1, split_min: split_min.max(2), helper: None }
    }

    /// Every name's `lstat` in `dir`, then every name's xattrs (read by `top/name`), in the order of `names`.
    pub fn names(
        &mut self,
        dir: i32,
        top: &[u8],
        names: &[Vec<u8>],
        rels: &[Vec<u8>],
    ) -> Result<(Vec<libc::stat>, Vec<Xattrs>), Failure> {
        if !self.split || names.len() < self.split_min {
            let part = capture_part(dir, top, names, rels);
            return Ok((part.stats?, part.xattrs?));
        }
        let half = names.len() / 2;
        let helper = self.helper.get_or_insert_with(|| start(self.scope));
        let job = Job { dir, top: top.to_vec(), names: names[half..].to_vec(), rels: rels[half..].to_vec() };
        let sent = helper.jobs.send(job).is_ok();
        let mine = capture_part(dir, top, &names[..half], &rels[..half]);
        // Always waited for before `dir` may close: the helper may still be reading through it.
        let theirs = if sent { helper.parts.recv().ok() } else { None };
        // A helper that stopped (a bug: none is meant to) is a failure here, never a panic in Python.
        let theirs = theirs.ok_or_else(|| Failure::os(libc::EIO, None))?;
        let mut stats = mine.stats?;
        stats.extend(theirs.stats?);
        let mut xattrs = mine.xattrs?;
        xattrs.extend(theirs.xattrs?);
        Ok((stats, xattrs))
    }
}

fn start<'scope>(scope: &'scope Scope<'scope, '_>) -> Helper {
    // One job at a time: the walk waits for each part before it goes on.
    let (jobs, job_rx) = sync_channel::<Job>(1);
    let (part_tx, parts) = sync_channel::<Part>(1);
    scope.spawn(move || {
        // Ends when the walk drops its `Capture` (the jobs' sender), so the scope's end never waits on it.
        for job in job_rx {
            if part_tx.send(capture_part(job.dir, &job.top, &job.names, &job.rels)).is_err() {
                break;
            }
        }
    });
    Helper { jobs, parts }
}
