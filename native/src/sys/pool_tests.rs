//! `pool.rs`'s tests: order, reporting, stopping, failures, and which items the calling thread takes.

use super::*;
use crate::failure::Failure;
use std::sync::Mutex;

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
                    break Err::<(), _>(Located { at, failure: Failure::os("", cancel::STOPPED, None) });
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
    for threads in [1, 2, 7] {
        let failing =
            |i, _: &usize| if i >= 10 { Err(Located { at: i, failure: Failure::os("", 1, None) }) } else { Ok(()) };
        assert_eq!(map(&items, threads, failing).unwrap_err().at, 10);
        let reported = map_reporting(&items, threads, failing, |_| true);
        assert_eq!(reported.unwrap_err().at, 10);
    }
}

/// Holds each thread in the first item it takes until `threads` threads have each entered one (a thread held
/// inside an item cannot claim another, so every thread must take one), or fails after a deadline; a thread's later
/// items pass at once. `enter` answers the order this thread first entered in (0 for the first).
struct Gate {
    entered: Mutex<Vec<std::thread::ThreadId>>,
    threads: usize,
}

impl Gate {
    fn new(threads: usize) -> Self {
        Self { entered: Mutex::new(Vec::new()), threads }
    }

    fn enter(&self) -> usize {
        let me = std::thread::current().id();
        let order = {
            let mut entered = self.entered.lock().unwrap();
            if let Some(k) = entered.iter().position(|&t| t == me) {
                return k;
            }
            entered.push(me);
            entered.len() - 1
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self.entered.lock().unwrap().len() < self.threads {
            assert!(std::time::Instant::now() < deadline, "fewer than {} threads took an item", self.threads);
            std::thread::yield_now();
        }
        order
    }
}

/// Which thread did each item (`map_reporting`, or `map` where `reporting` is false), and the most items in
/// progress at once.
fn record(items: usize, threads: usize, reporting: bool) -> (Vec<std::thread::ThreadId>, usize) {
    let (by, busy, most) = (Mutex::new(vec![None; items]), AtomicUsize::new(0), AtomicUsize::new(0));
    let gate = Gate::new(threads);
    let all: Vec<usize> = (0..items).collect();
    let f = |i, _: &usize| {
        most.fetch_max(busy.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        gate.enter();
        std::thread::sleep(Duration::from_millis(1)); // time for a thread too many to start and take items too
        by.lock().unwrap()[i] = Some(std::thread::current().id());
        busy.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    };
    if reporting {
        map_reporting(&all, threads, f, |_| true).unwrap();
    } else {
        map(&all, threads, f).unwrap();
    }
    (by.into_inner().unwrap().into_iter().map(Option::unwrap).collect(), most.into_inner())
}

#[test]
fn every_thread_of_the_chain_works_and_no_more_than_asked_for() {
    let caller = std::thread::current().id();
    for threads in [1, 2, 4] {
        for reporting in [true, false] {
            let (by, most) = record(64, threads, reporting);
            let mut distinct = by.clone();
            distinct.sort_unstable_by_key(|t| format!("{t:?}"));
            distinct.dedup();
            assert_eq!(distinct.len(), threads, "{threads} threads, reporting {reporting}");
            assert!(most <= threads, "{threads} threads: {most} items at once");
            // Where it reports, the calling thread only waits; `map` has no one to answer, and takes a share.
            assert_eq!(by.contains(&caller), !reporting);
        }
    }
}

#[test]
fn a_panic_on_any_thread_is_a_failure_that_stops_the_others_not_a_panic() {
    // Every thread but the first to take an item panics in it (the calling thread or a chained one in `map`;
    // threads started by workers in `map_reporting`); the first would do every item left, 5 ms each (2 s: time for
    // a loaded machine's panic hook to print its backtrace first), unless the panics stop it.
    for reporting in [false, true] {
        let (gate, made) = (Gate::new(4), AtomicUsize::new(0));
        let f = |_, _: &()| -> Result<(), Located> {
            assert_eq!(gate.enter(), 0, "a bug, on purpose");
            std::thread::sleep(Duration::from_millis(5));
            made.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        let got = if reporting { map_reporting(&[(); 400], 4, f, |_| true) } else { map(&[(); 400], 4, f) };
        assert!(got.is_err(), "reporting {reporting}");
        assert!(made.into_inner() < 397, "reporting {reporting}: the panics did not stop the batch");
    }
}

#[test]
fn a_thread_refused_anywhere_in_the_chain_leaves_the_items_to_those_that_started() {
    // The system refuses the start after `allowed` (`threads::budget`: a real refusal, at a chosen point): the
    // first thread, one in the middle of the chain, or none. Every item is still done once, in order, reported
    // once, by exactly the threads that started (the calling thread where no thread did, or in `map`).
    let caller = std::thread::current().id();
    let items: Vec<usize> = (0..64).collect();
    for threads in [1, 2, 4] {
        for allowed in 0..=threads {
            for reporting in [true, false] {
                let chained = if reporting { allowed.min(threads) } else { allowed.min(threads - 1) };
                let with_caller = usize::from(!reporting && threads > 1 || chained == 0);
                let gate = Gate::new(chained + with_caller);
                let by = Mutex::new(vec![None; items.len()]);
                let f = |i, x: &usize| {
                    gate.enter();
                    std::thread::sleep(Duration::from_millis(1)); // time for a thread too many to take items too
                    by.lock().unwrap()[i] = Some(std::thread::current().id());
                    Ok(x * 3)
                };
                let mut reported = 0;
                let out = crate::sys::threads::budget::allowing(allowed, || {
                    if reporting {
                        map_reporting(&items, threads, f, |i| {
                            reported += usize::from(i.is_some());
                            true
                        })
                    } else {
                        map(&items, threads, f)
                    }
                });
                let case = format!("{threads} threads, {allowed} starts allowed, reporting {reporting}");
                assert_eq!(out.unwrap(), items.iter().map(|x| x * 3).collect::<Vec<_>>(), "{case}");
                assert_eq!(reported, if reporting { items.len() } else { 0 }, "{case}");
                let mut distinct: Vec<_> = by.into_inner().unwrap().into_iter().map(Option::unwrap).collect();
                assert_eq!(distinct.contains(&caller), with_caller == 1, "{case}");
                distinct.sort_unstable_by_key(|t| format!("{t:?}"));
                distinct.dedup();
                assert_eq!(distinct.len(), chained + with_caller, "{case}");
            }
        }
    }
}
