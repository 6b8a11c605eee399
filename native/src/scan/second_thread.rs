//! A scan's capture on one thread or two. On this project's machines a scan is its syscalls (an `lstat` plus an
//! xattr listing is ~5 us a name, a channel round trip ~15 us), so a second thread takes part of it in one of
//! two ways, while the walk takes directories in one at a time, in the reference's order, `on_progress`
//! between them.
//!
//! - **Ahead**: while the walk's thread captures a directory, the helper captures the next one on the walk's
//!   stack whole (`directory::capture_dir`: open, check, flags, list, every name); the walk takes that part in
//!   at its turn, or parks it while the current directory's subdirectories come first. So a tree of many
//!   directories is captured two directories at a time (measured in `CHANGELOG.md`: splitting names alone
//!   made 100 directories of 100 names only 1.2x faster on two threads than on one).
//! - **Split**: a wide directory (`SPLIT_MIN` names or more), when the helper is free, has the second half of
//!   its names' `lstat`s and xattrs done there. The helper is free mostly for the root and the last directory
//!   on the stack; a tree of one wide directory is split throughout.
//!
//! Either way the result is the one the single thread finds. A part captured ahead is taken in only if it
//! holds no failure and its directory is, by path, still the inode it captured with the same mtime and ctime
//! (no name added, removed or renamed since: `directory::unchanged`); otherwise the walk captures the
//! directory at its turn, so every failure is the walk's own, met where the reference meets it (fds and all).
//! What a taken part cannot show is a change to an entry's own inode (a `chmod`) after it was captured ahead
//! and before its turn: a change the reference misses too when it comes just after its capture, and which a
//! file's read refuses (its ctime against the capture). A split's first half is the first half of the order,
//! so its first failure is the first half's first `lstat` failure, else the second half's, else the first
//! xattr failure the same way. Calls made past a failure the reference would have stopped at are reads that
//! change nothing: `lstat`, xattrs, and a listing only of a directory opened with `O_NOATIME` (the helper
//! never lists one without it: that directory is left to the walk's own turn).

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::thread::Scope;

use crate::failure::Failure;
use crate::scan::directory::{capture_dir, read_xattrs, unchanged, DirPart, NamesFound};
use crate::scan::entry::{slash, Xattrs};
use crate::sys::c_path::{cstr, os, os_string};
use crate::sys::calls as sys;
use crate::sys::threads;

/// A directory with at least this many names has them split between two threads when the scan has two and
/// the helper is free; below it, the handover costs more than the half it saves.
pub const SPLIT_MIN: usize = 32;

/// Names to capture: `names` in the directory open as `dir` (borrowed: the caller holds it open until the
/// part comes back), at `top` (the path xattrs are read by), with their paths relative to the scan's root.
struct Names {
    dir: i32,
    top: Vec<u8>,
    names: Vec<Vec<u8>>,
    rels: Vec<Vec<u8>>,
}

enum Job {
    Names(Names),
    /// A whole directory, `rel` under `root`, that must be `identity`.
    Dir {
        root: Vec<u8>,
        rel: Vec<u8>,
        identity: (u64, u64),
    },
}

/// A directory captured ahead: `None` where it could not be opened with `O_NOATIME` (the walk's turn).
type AheadPart = Option<Result<DirPart, Failure>>;

enum Done {
    Part(Part),
    Dir(AheadPart),
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

fn capture_alone(dir: i32, top: &[u8], names: &[Vec<u8>], rels: &[Vec<u8>]) -> NamesFound {
    let part = capture_part(dir, top, names, rels);
    Ok((part.stats?, part.xattrs?))
}

fn lstat_all(dir: i32, names: &[Vec<u8>], rels: &[Vec<u8>]) -> Result<Vec<libc::stat>, Failure> {
    let mut stats = Vec::with_capacity(names.len());
    for (name, rel) in names.iter().zip(rels) {
        match sys::lstat_at(dir, &cstr(name)?) {
            Ok(st) => stats.push(st),
            // Listed, then gone: a race with whoever writes the source.
            Err(libc::ENOENT) => return Err(Failure::Vanished { gone: os_string(rel), name: os_string(name) }),
            Err(e) => return Err(os("lstat", e, name)),
        }
    }
    Ok(stats)
}

/// The second thread of a scan, started the first time there is work for it.
struct Helper {
    jobs: SyncSender<Job>,
    done: Receiver<Done>,
}

/// The capture of a scan's directories, on `threads` (one or two) threads, within `scope`.
pub struct Capture<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    two: bool,
    split_min: usize,
    helper: Option<Helper>,
    /// The directory the helper is capturing ahead, its part not received yet: at most one job at a time.
    in_flight: Option<Vec<u8>>,
    /// Directories captured ahead whose turn has not come yet (the current one's subdirectories came first).
    parked: HashMap<Vec<u8>, AheadPart>,
}

impl<'scope, 'env> Capture<'scope, 'env> {
    /// `split_min`: the fewest names split (tests split every directory of two names or more).
    pub fn new(scope: &'scope Scope<'scope, 'env>, threads: usize, split_min: usize) -> Self {
        Capture {
            scope,
            two: threads > 1,
            split_min: split_min.max(2),
            helper: None,
            in_flight: None,
            parked: HashMap::new(),
        }
    }

    /// The part of `rel` (under `root`) the helper captured ahead, waiting for it if it is still at work, if it
    /// holds and the directory is unchanged since (`directory::unchanged`); `None` otherwise, and the walk
    /// captures it at its turn: so a failure is always the walk's own, met when the reference meets it, and a
    /// directory changed while parked is read again.
    pub fn take(&mut self, root: &[u8], rel: &[u8]) -> Option<DirPart> {
        let part = match self.parked.remove(rel) {
            Some(parked) => parked,
            None if self.in_flight.as_deref() == Some(rel) => {
                self.in_flight = None;
                match self.helper.as_ref()?.done.recv() {
                    Ok(Done::Dir(part)) => part,
                    _ => None, // a helper gone (a bug: none is meant to go): the walk captures it
                }
            }
            None => None,
        };
        part?.ok().filter(|part| unchanged(root, rel, part))
    }

    /// Start the helper on `rel` (`identity`: what its parent's `lstat` found), if it is free: the part it
    /// was capturing ahead, if done, is parked first.
    pub fn start_ahead(&mut self, root: &[u8], rel: &[u8], identity: (u64, u64)) {
        if !self.two || self.parked.contains_key(rel) || self.in_flight.as_deref() == Some(rel) {
            return;
        }
        if let Some(busy) = self.in_flight.take() {
            match self.helper.as_ref().map(|helper| helper.done.try_recv()) {
                Some(Ok(Done::Dir(part))) => {
                    self.parked.insert(busy, part);
                }
                Some(Err(TryRecvError::Empty)) => {
                    self.in_flight = Some(busy);
                    return;
                }
                // Stopped, or a reply of the wrong kind (a bug): the walk captures `busy` at its turn.
                _ => return,
            }
        }
        let Some(helper) = self.helper() else { return };
        let job = Job::Dir { root: root.to_vec(), rel: rel.to_vec(), identity };
        if helper.jobs.send(job).is_ok() {
            self.in_flight = Some(rel.to_vec());
        }
    }

    /// The helper, started the first time there is work for it; `None` where the system refuses the thread, and
    /// then the walk captures everything alone from here on.
    fn helper(&mut self) -> Option<&Helper> {
        if self.helper.is_none() {
            self.helper = start(self.scope);
            self.two = self.helper.is_some();
        }
        self.helper.as_ref()
    }

    /// Every name's `lstat` in `dir`, then every name's xattrs (read by `top/name`), in the order of `names`.
    pub fn names(&mut self, dir: i32, top: &[u8], names: &[Vec<u8>], rels: &[Vec<u8>]) -> NamesFound {
        if !self.two || names.len() < self.split_min || self.in_flight.is_some() {
            return capture_alone(dir, top, names, rels);
        }
        let Some(helper) = self.helper() else { return capture_alone(dir, top, names, rels) };
        let half = names.len() / 2;
        let job = Names { dir, top: top.to_vec(), names: names[half..].to_vec(), rels: rels[half..].to_vec() };
        let sent = helper.jobs.send(Job::Names(job)).is_ok();
        let mine = capture_part(dir, top, &names[..half], &rels[..half]);
        // Always waited for before `dir` may close: the helper may still be reading through it.
        let theirs = if sent { helper.done.recv().ok() } else { None };
        // A helper that stopped (a bug: none is meant to) is a failure here, never a panic in Python.
        let Some(Done::Part(theirs)) = theirs else { return Err(Failure::os("", libc::EIO, None)) };
        let mut stats = mine.stats?;
        stats.extend(theirs.stats?);
        let mut xattrs = mine.xattrs?;
        xattrs.extend(theirs.xattrs?);
        Ok((stats, xattrs))
    }
}

fn start<'scope>(scope: &'scope Scope<'scope, '_>) -> Option<Helper> {
    // One job at a time: the walk receives each reply before it sends the next job.
    let (jobs, job_rx) = sync_channel::<Job>(1);
    let (done_tx, done) = sync_channel::<Done>(1);
    threads::scoped(scope, move || {
        // Ends when the walk drops its `Capture` (the jobs' sender), so the scope's end never waits on it.
        for job in job_rx {
            let reply = match job {
                Job::Names(j) => Done::Part(capture_part(j.dir, &j.top, &j.names, &j.rels)),
                Job::Dir { root, rel, identity } => {
                    Done::Dir(capture_dir(&root, &rel, Some(identity), true, capture_alone).transpose())
                }
            };
            if done_tx.send(reply).is_err() {
                break;
            }
        }
    })?;
    Some(Helper { jobs, done })
}
