//! A batch's work stopped early at the caller's request: a Ctrl-C during one big file reaches the copy and hash
//! loops between their steps. Before this a signal was looked for only as each unit of a download finished, so a
//! 24 GiB file ran to its end first (13-21 s here; the reference stops at once).
//!
//! The thread that waits for a batch (`pool::map_reporting`, `pool::map_polling`: a download's files, a
//! publish's reads) looks for signals with the GIL every [`POLL`](crate::sys::pool::POLL) and, on one, sets the
//! batch's flag. Each thread doing the batch's work watches it: the pool's workers, and the threads they start (a
//! large file's copier, through [`current`]). [`requested`] is what the loops ask, and the `EINTR` retries of
//! `sys/calls.rs` too; a step already in the kernel ends first. Work outside such a batch (the scan, a manifest's
//! parse) watches no flag, and `requested` is always `false` there; so is a batch whose threads the system
//! refused, done on the calling thread, which looks for signals once it is done.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::failure::Errno;

thread_local! {
    static WATCHED: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The errno a loop stops with when asked to: the caller raises what asked it (the `KeyboardInterrupt`), never
/// this, and a test of the loops alone sees it.
pub const STOPPED: Errno = libc::EINTR;

/// Whether the batch this thread works for was asked to stop.
pub fn requested() -> bool {
    WATCHED.with(|watched| watched.borrow().as_ref().is_some_and(|flag| flag.load(Ordering::Relaxed)))
}

/// `Err(STOPPED)` if [`requested`], for a loop's `?` between its steps.
pub fn check() -> Result<(), Errno> {
    if requested() {
        Err(STOPPED)
    } else {
        Ok(())
    }
}

/// The flag this thread watches, for a thread it starts to watch too.
pub fn current() -> Option<Arc<AtomicBool>> {
    WATCHED.with(|watched| watched.borrow().clone())
}

/// `f` with this thread watching `flag` (none: nothing), the flag it watched before put back however `f` ends.
pub fn watching<R>(flag: Option<Arc<AtomicBool>>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<AtomicBool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            WATCHED.with(|watched| *watched.borrow_mut() = before);
        }
    }
    let _restore = Restore(WATCHED.with(|watched| watched.replace(flag)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_sees_only_the_flag_it_watches_and_the_one_before_comes_back() {
        assert!(!requested() && current().is_none());
        let outer = Arc::new(AtomicBool::new(false));
        watching(Some(outer.clone()), || {
            assert!(!requested());
            outer.store(true, Ordering::Relaxed);
            assert_eq!(check(), Err(STOPPED));
            let inner = Arc::new(AtomicBool::new(false));
            watching(Some(inner), || assert!(!requested()));
            assert!(requested());
            // Another thread watches nothing until it is given the flag.
            std::thread::scope(|s| {
                assert!(!s.spawn(requested).join().unwrap());
                let flag = current();
                assert!(s.spawn(move || watching(flag, requested)).join().unwrap());
            });
        });
        assert!(!requested() && current().is_none());
    }
}
