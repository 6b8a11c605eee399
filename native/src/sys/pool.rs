//! A scoped thread pool sized by the caller: items claimed one at a time from a shared counter (files
//! differ in cost; fixed slices would leave a thread idle behind a big one), results put back in input
//! order, and the first failure stops every thread at its next claim. std threads only: one batch of
//! work, no pool kept between calls, so no crate is needed for it. Threads the system refuses are done
//! without: the items go to those that started, or all to the calling thread (`threads::scoped`).
//!
//! Each thread is started by the one before it ([`chain`]), before that one takes an item. Started all by the
//! calling thread while it still ran, a fresh process's workers were all put on the CPU that was idle then, and
//! took turns there for 2-3 ms while the caller's CPU, once it waited, idled (`perf record -e
//! sched:sched_wakeup_new,sched:sched_switch` on this project's 2-CPU guests: `small`'s publish and download each
//! about 2 ms slower on two threads than on one). The scheduler puts a new thread on the idlest CPU it sees: for a
//! thread started by a running worker, one other than that worker's. Where the calling thread has nothing to
//! answer meanwhile ([`map`]) it takes a share itself, beside `threads - 1` started threads; where it reports and
//! looks for signals, it only waits, so that a Ctrl-C is answered within a [`POLL`] whatever an item does.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Duration;

use crate::failure::Located;
use crate::sys::{cancel, threads};

/// How long [`map_reporting`]'s calling thread waits for an item before it asks `report(None)` anyway: how soon a
/// Ctrl-C is seen while one big file is being done.
pub const POLL: Duration = Duration::from_millis(50);

/// One thread's share: items claimed from `next` until none is left or `stop` is set (by the first failure, here
/// or on another thread, or by the caller); `done(position)` after each item made.
fn claim_items<T, R, F>(
    items: &[T],
    next: &AtomicUsize,
    stop: &AtomicBool,
    f: &F,
    mut done: impl FnMut(usize),
) -> (Vec<(usize, R)>, Option<Located>)
where
    F: Fn(usize, &T) -> Result<R, Located>,
{
    let mut made: Vec<(usize, R)> = Vec::new();
    let mut failed: Option<Located> = None;
    while !stop.load(Ordering::Relaxed) {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        match f(i, item) {
            Ok(r) => {
                made.push((i, r));
                done(i);
            }
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                failed = Some(e);
            }
        }
    }
    (made, failed)
}

/// One thread per item of `each` (what that thread is given: its channel's sender, say), each started by the one
/// before it before it runs `share`; the handle of the first, whose result is every thread's part in order, `None`
/// for one that panicked (a bug: none is meant to; `stop` is set so the others end at their next claim). `None` if
/// the system refused the first thread; a thread refused further down ends the chain there, and the threads that
/// started share the items.
fn chain<'scope, 'env, E, S, P>(
    s: &'scope Scope<'scope, 'env>,
    mut each: Vec<E>,
    share: &'scope S,
    stop: &'scope AtomicBool,
) -> Option<ScopedJoinHandle<'scope, Vec<Option<P>>>>
where
    E: Send + 'scope,
    S: Fn(E) -> P + Sync,
    P: Send + 'scope,
{
    let given = each.pop()?;
    threads::scoped(s, move || {
        let after = chain(s, each, share, stop);
        let mine = catch_unwind(AssertUnwindSafe(|| share(given))).ok();
        if mine.is_none() {
            stop.store(true, Ordering::Relaxed);
        }
        let mut parts = vec![mine];
        if let Some(after) = after {
            parts.extend(after.join().unwrap_or_else(|_| vec![None]));
        }
        parts
    })
}

/// `f(position, item)` for every item on up to `threads` threads (the calling one among them); the results in
/// input order, or the failure at the lowest position among those that happened.
pub fn map<T, R, F>(items: &[T], threads: usize, f: F) -> Result<Vec<R>, Located>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> Result<R, Located> + Sync,
{
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().enumerate().map(|(i, item)| f(i, item)).collect();
    }
    let (next, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    let work = |()| claim_items(items, &next, &stop, &f, |_| {});
    let parts: Vec<_> = std::thread::scope(|s| {
        let others = chain(s, vec![(); threads - 1], &work, &stop);
        // The calling thread takes a share too (nothing to answer meanwhile here); a panic in it is a lost part.
        let mine = catch_unwind(AssertUnwindSafe(|| work(()))).ok();
        if mine.is_none() {
            stop.store(true, Ordering::Relaxed);
        }
        let others = others.map_or_else(Vec::new, |h| h.join().unwrap_or_else(|_| vec![None]));
        std::iter::once(mine).chain(others).collect()
    });
    gather(parts, items.len())
}

/// [`map`], with `report(Some(position))` called on the calling thread as each item is done (in the order they
/// finish), and `report(None)` after each [`POLL`] with none done; once it answers `false` every thread stops at
/// its next claim, the items in progress stop at their next step ([`cancel`]: their loops end with
/// `cancel::STOPPED`), and the result is [`Failure::Stopped`] at 0 unless an item failed. The caller's thread only
/// waits and reports: `threads` threads do the items.
pub fn map_reporting<T, R, F, P>(items: &[T], threads: usize, f: F, report: P) -> Result<Vec<R>, Located>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> Result<R, Located> + Sync,
    P: FnMut(Option<usize>) -> bool,
{
    on_threads_asking(items, threads, f, &|_| true, report)
}

/// [`map_reporting`] for work whose progress is told now and then (a publish's stage: `read/progress.rs`): the calling
/// thread is woken by the items for which `wake(position)` answers `true` (asked on the item's thread once it is
/// made), by the [`POLL`] and by the threads' ends, and `poll()` answers each time as `report` does.
pub fn map_polling<T, R, F, W, P>(items: &[T], threads: usize, f: F, wake: &W, mut poll: P) -> Result<Vec<R>, Located>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> Result<R, Located> + Sync,
    W: Fn(usize) -> bool + Sync,
    P: FnMut() -> bool,
{
    on_threads_asking(items, threads, f, wake, |_| poll())
}

/// [`map_reporting`], an item's end sent to the calling thread only where `wake(position)` (and each thread's end).
fn on_threads_asking<T, R, F, W, P>(items: &[T], threads: usize, f: F, wake: &W, mut ask: P) -> Result<Vec<R>, Located>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> Result<R, Located> + Sync,
    W: Fn(usize) -> bool + Sync,
    P: FnMut(Option<usize>) -> bool,
{
    let threads = threads.clamp(1, items.len().max(1));
    let (next, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    // Apart from `stop`, which a failed item sets too: a failure must not turn the other items' steps into errors.
    let cancelled = Arc::new(AtomicBool::new(false));
    let (done, finished) = mpsc::channel::<Option<usize>>();
    // The receiver outlives every worker (the scope), so a send cannot fail.
    let work = |done: mpsc::Sender<Option<usize>>| {
        let part = claim_items(items, &next, &stop, &f, |i| {
            if wake(i) {
                let _ = done.send(Some(i));
            }
        });
        let _ = done.send(None); // this thread's end: the caller asks again at once
        part
    };
    let watched = |done| cancel::watching(Some(cancelled.clone()), || work(done));
    let mut stopped = false;
    let parts: Vec<_> = std::thread::scope(|s| {
        // Each thread its own sender: once they have all ended, the channel says so.
        let started = chain(s, (0..threads).map(|_| done.clone()).collect(), &watched, &stop);
        // No thread would start: every item on this one, reported once all are done.
        let inline = started.is_none().then(|| work(done.clone()));
        drop(done);
        loop {
            let asked = match finished.recv_timeout(POLL) {
                Ok(asked) => asked,
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            if !stopped && !ask(asked) {
                stopped = true;
                stop.store(true, Ordering::Relaxed);
                cancelled.store(true, Ordering::Relaxed);
            }
        }
        match started {
            Some(first) => first.join().unwrap_or_else(|_| vec![None]),
            None => vec![inline], // done here: no thread started
        }
    });
    if stopped && parts.iter().all(|part| part.as_ref().is_some_and(|(_, failed)| failed.is_none())) {
        // Stopped by the caller, nothing failed: some items were never done, and that is no bug.
        return Err(Located { at: 0, failure: crate::failure::Failure::Stopped });
    }
    gather(parts, items.len())
}

type Part<R> = Option<(Vec<(usize, R)>, Option<Located>)>;

/// The workers' results in input order, or the failure at the lowest position.
fn gather<R>(parts: Vec<Part<R>>, len: usize) -> Result<Vec<R>, Located> {
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(len).collect();
    let mut first: Option<Located> = None;
    for part in parts {
        let Some((done, failed)) = part else {
            let bug = Located { at: 0, failure: crate::failure::Failure::os("", libc::EIO, None) };
            first = Some(first.map_or(bug, |f| f));
            continue;
        };
        for (i, r) in done {
            slots[i] = Some(r);
        }
        if let Some(e) = failed {
            if first.as_ref().is_none_or(|f| e.at < f.at) {
                first = Some(e);
            }
        }
    }
    if let Some(e) = first {
        return Err(e);
    }
    // Every slot is filled when nothing failed; a hole would be a bug, reported as EIO rather than a panic.
    slots
        .into_iter()
        .map(|r| r.ok_or(Located { at: 0, failure: crate::failure::Failure::os("", libc::EIO, None) }))
        .collect()
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
