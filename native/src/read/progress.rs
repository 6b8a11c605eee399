//! What a publish's read threads have done, for its progress: the threads count each file as it is done, and wake
//! the calling thread only now and then to tell it (a wake per file was a thread switch per file on two cores).
//!
//! This is what lets one `stage_files` call take a whole publish: its progress moves every
//! [`EVERY_FILES`] files or [`EVERY_BYTES`] bytes, counted, not timed, so what it tells cannot depend on the
//! machine's speed or on when the calling thread runs. Measured before (`many`, 10,000 files, 2 threads): ten calls of 1,024 files were 6 % of a
//! publish's wall time in their threads' starts and their waits for each batch's slowest file.

use std::sync::{Mutex, PoisonError};

/// The calling thread is woken after every this many files done.
pub const EVERY_FILES: u64 = 256;
/// ... and whenever the bytes done cross a multiple of this (a few big files).
pub const EVERY_BYTES: u64 = 64 << 20;

/// Files and bytes done so far by every thread of one call, and the counts at each wake not yet told.
///
/// One lock a file (uncontended it is a few nanoseconds against a file's microseconds): the counts at a wake are
/// then exact and in order, so what is told never depends on when the calling thread gets to run.
#[derive(Default)]
pub struct Tally(Mutex<Counts>);

#[derive(Default)]
struct Counts {
    files: u64,
    bytes: u64,
    marks: Vec<(u64, u64)>,
}

impl Tally {
    /// One file of `size` bytes done; whether the calling thread should be woken to tell it.
    pub fn add(&self, size: u64) -> bool {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let before = counts.bytes;
        counts.files += 1;
        counts.bytes = before.saturating_add(size);
        let wake = counts.files % EVERY_FILES == 0 || before / EVERY_BYTES != counts.bytes / EVERY_BYTES;
        if wake {
            let mark = (counts.files, counts.bytes);
            counts.marks.push(mark);
        }
        wake
    }

    /// The counts at each wake since the last call, in order; with `end` (every thread joined) the totals last.
    fn take(&self, end: bool) -> Vec<(u64, u64)> {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut marks = std::mem::take(&mut counts.marks);
        if end {
            marks.push((counts.files, counts.bytes));
        }
        marks
    }
}

/// What the calling thread has told of a [`Tally`]: each [`Told::since`] gives what is new, a step a wake.
#[derive(Default)]
pub struct Told(u64, u64);

impl Told {
    /// The `(files, bytes)` done since the last step told, a step for each wake (and with `end`, one to the totals),
    /// none of them empty.
    pub fn since(&mut self, tally: &Tally, end: bool) -> Vec<(u64, u64)> {
        let mut steps = Vec::new();
        for (files, bytes) in tally.take(end) {
            if files > self.0 {
                steps.push((files - self.0, bytes.saturating_sub(self.1)));
                (self.0, self.1) = (files, bytes);
            }
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_every_so_many_files_and_at_each_crossing_of_the_bytes() {
        let tally = Tally::default();
        let wakes: Vec<u64> = (1..=2 * EVERY_FILES).filter(|_| tally.add(1)).collect();
        assert_eq!(wakes, [EVERY_FILES, 2 * EVERY_FILES]);
        let tally = Tally::default();
        assert!(!tally.add(EVERY_BYTES - 1));
        assert!(tally.add(1), "the bytes reached a multiple");
        assert!(!tally.add(EVERY_BYTES - 1));
        assert!(tally.add(3 * EVERY_BYTES), "one big file crossing several");
    }

    #[test]
    fn told_gives_a_step_a_wake_then_the_rest_at_the_end_and_nothing_empty() {
        let (tally, mut told) = (Tally::default(), Told::default());
        assert_eq!(told.since(&tally, false), []);
        for _ in 0..EVERY_FILES * 2 + 3 {
            tally.add(2);
        }
        let step = (EVERY_FILES, 2 * EVERY_FILES);
        assert_eq!(told.since(&tally, false), [step, step], "each wake's exact counts, however late asked");
        assert_eq!(told.since(&tally, false), []);
        tally.add(0);
        assert_eq!(told.since(&tally, true), [(4, 6)], "the end: the rest, an empty file too");
        assert_eq!(told.since(&tally, true), []);
    }
}
