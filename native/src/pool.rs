//! A scoped thread pool sized by the caller: items claimed one at a time from a shared counter (files
//! differ in cost; fixed slices would leave a thread idle behind a big one), results put back in input
//! order, and the first failure stops every thread at its next claim. std threads only: one batch of
//! work, no pool kept between calls, so no crate is needed for it. Threads the system refuses are done
//! without: the items go to those that started, or all to the calling thread (`threads::scoped`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::error::Located;
use crate::threads;

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
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let work = || {
        let mut done: Vec<(usize, R)> = Vec::new();
        let mut failed: Option<Located> = None;
        while !stop.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            match f(i, item) {
                Ok(r) => done.push((i, r)),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    failed = Some(e);
                }
            }
        }
        (done, failed)
    };
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

/// [`map`], with `report(position)` called on the calling thread as each item is done (in the order they finish);
/// once it answers `false` every thread stops at its next claim, and the result is [`Failure::Stopped`] at 0
/// unless an item failed. The caller's thread only waits and reports: `threads` threads do the items.
pub fn map_reporting<T, R, F, P>(items: &[T], threads: usize, f: F, mut report: P) -> Result<Vec<R>, Located>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> Result<R, Located> + Sync,
    P: FnMut(usize) -> bool,
{
    let threads = threads.clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (done, finished) = mpsc::channel::<usize>();
    let work = |done: mpsc::Sender<usize>| {
        let mut made: Vec<(usize, R)> = Vec::new();
        let mut failed: Option<Located> = None;
        while !stop.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            match f(i, item) {
                Ok(r) => {
                    made.push((i, r));
                    let _ = done.send(i); // the receiver outlives every worker (the scope)
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    failed = Some(e);
                }
            }
        }
        (made, failed)
    };
    let mut stopped = false;
    let parts: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .filter_map(|_| {
                let done = done.clone();
                threads::scoped(s, move || work(done))
            })
            .collect();
        // No thread would start: every item on this one, reported once all are done.
        let inline = handles.is_empty().then(|| work(done.clone()));
        drop(done);
        for i in finished {
            if !stopped && !report(i) {
                stopped = true;
                stop.store(true, Ordering::Relaxed);
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
                    seen.push(i);
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
                |_| {
                    calls += 1;
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
    fn the_lowest_failing_position_is_reported() {
        let items: Vec<usize> = (0..100).collect();
        let err =
            map(&items, 1, |i, _| if i >= 10 { Err(Located { at: i, failure: Failure::os(1, None) }) } else { Ok(()) })
                .unwrap_err();
        assert_eq!(err.at, 10);
    }
}
