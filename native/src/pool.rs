//! A scoped thread pool sized by the caller: items claimed one at a time from a shared counter (files
//! differ in cost; fixed slices would leave a thread idle behind a big one), results put back in input
//! order, and the first failure stops every thread at its next claim. std threads only: one batch of
//! work, no pool kept between calls, so no crate is needed for it. Threads the system refuses are done
//! without: the items go to those that started, or all to the calling thread (`threads::scoped`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::error::Located;
use crate::{cancel, threads};

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

/// `f(position, item)` for every item on up to `threads` threads; the results in input order, or the
/// failure at the lowest position among those that happened.
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
    let work = || claim_items(items, &next, &stop, &f, |_| {});
    let parts: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).filter_map(|_| threads::scoped(s, work)).collect();
        if handles.is_empty() {
            return vec![Some(work())]; // no thread would start: every item on this one
        }
        // A worker that panicked (a bug: none is meant to) becomes a failure here, never a panic in Python.
        handles.into_iter().map(|h| h.join().ok()).collect()
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

/// [`map_reporting`] for work whose progress is told now and then (a publish's stage: `tally.rs`): the calling
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
    let mut stopped = false;
    let parts: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .filter_map(|_| {
                let (done, watched) = (done.clone(), Some(cancelled.clone()));
                threads::scoped(s, move || cancel::watching(watched, || work(done)))
            })
            .collect();
        // No thread would start: every item on this one, reported once all are done.
        let inline = handles.is_empty().then(|| work(done.clone()));
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
        match inline {
            Some(part) => vec![Some(part)],
            None => handles.into_iter().map(|h| h.join().ok()).collect(),
        }
    });
    if stopped && parts.iter().all(|part| part.as_ref().is_some_and(|(_, failed)| failed.is_none())) {
        // Stopped by the caller, nothing failed: some items were never done, and that is no bug.
        return Err(Located { at: 0, failure: crate::error::Failure::Stopped });
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
            let bug = Located { at: 0, failure: crate::error::Failure::os(libc::EIO, None) };
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
    slots.into_iter().map(|r| r.ok_or(Located { at: 0, failure: crate::error::Failure::os(libc::EIO, None) })).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Failure;

    #[test]
    fn results_keep_input_order_on_any_number_of_threads() {
        let items: Vec<usize> = (0..1000).collect();
        for threads in [1, 2, 7] {
            let out = map(&items, threads, |_, x| Ok(x * 2)).unwrap();
            assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        }
    }

    #[test]
    fn every_item_is_reported_once_on_the_calling_thread_and_a_false_stops_the_rest() {
        let items: Vec<usize> = (0..500).collect();
        let caller = std::thread::current().id();
        for threads in [1, 2, 7] {
            let mut seen = Vec::new();
            let out = map_reporting(
                &items,
                threads,
                |_, x| Ok(x + 1),
                |i| {
                    assert_eq!(std::thread::current().id(), caller);
                    seen.extend(i);
                    true
                },
            )
            .unwrap();
            seen.sort_unstable();
            assert_eq!((out[499], seen), (500, items.clone()));
            // Past the first few, an item waits until the false is reported: the stop must end the rest.
            let (refused, made) = (AtomicBool::new(false), AtomicUsize::new(0));
            let mut calls = 0;
            let stopped = map_reporting(
                &items,
                threads,
                |i, x| {
                    while i >= 3 + threads && !refused.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                    }
                    made.fetch_add(1, Ordering::Relaxed);
                    Ok(*x)
                },
                |i| {
                    calls += usize::from(i.is_some());
                    refused.store(calls >= 3, Ordering::Relaxed);
                    calls < 3
                },
            );
            assert!(matches!(stopped, Err(Located { at: 0, failure: Failure::Stopped })));
            assert_eq!(calls, 3, "reported after a false");
            assert!(made.load(Ordering::Relaxed) <= 3 + 2 * threads, "the workers went on after a false");
        }
    }

    #[test]
    fn a_false_to_a_poll_stops_the_items_in_progress_at_their_next_step() {
        // Each item runs until its batch is asked to stop (a big file's copy between steps): only the poll can.
        let items = [(); 3];
        for threads in [1, 2] {
            let mut polls = 0;
            let got = map_reporting(
                &items,
                threads,
                |at, _| loop {
                    if cancel::check().is_err() {
                        break Err::<(), _>(Located { at, failure: Failure::os(cancel::STOPPED, None) });
                    }
                    std::thread::yield_now();
                },
                |asked| {
                    polls += usize::from(asked.is_none());
                    asked.is_some()
                },
            );
            assert!(got.is_err() && polls == 1, "{polls} polls");
            assert!(!cancel::requested(), "the calling thread watches no flag");
        }
    }

    #[test]
    fn the_lowest_failing_position_is_reported() {
        let items: Vec<usize> = (0..100).collect();
        let err =
            map(&items, 1, |i, _| if i >= 10 { Err(Located { at: i, failure: Failure::os(1, None) }) } else { Ok(()) })
                .unwrap_err();
        assert_eq!(err.at, 10);
    }
}
