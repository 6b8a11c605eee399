//! A scoped thread pool sized by the caller: items claimed one at a time from a shared counter (files
//! differ in cost; fixed slices would leave a thread idle behind a big one), results put back in input
//! order, and the first failure stops every thread at its next claim. std threads only: one batch of
//! work, no pool kept between calls, so no crate is needed for it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::Located;

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
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        // A worker that panicked (a bug: none is meant to) becomes a failure here, never a panic in Python.
        handles.into_iter().map(|h| h.join().ok()).collect()
    });
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
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
    fn the_lowest_failing_position_is_reported() {
        let items: Vec<usize> = (0..100).collect();
        let err =
            map(&items, 1, |i, _| if i >= 10 { Err(Located { at: i, failure: Failure::os(1, None) }) } else { Ok(()) })
                .unwrap_err();
        assert_eq!(err.at, 10);
    }
}
